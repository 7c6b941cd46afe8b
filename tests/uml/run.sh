#!/bin/sh
# Runs sandboxd's tests on a pure cgroup v2 hierarchy and an older kernel without Landlock: Debian's
# user-mode-linux (Linux 6.1 as an ordinary process, no KVM needed) boots with the host's / as a
# read-only hostfs root, tests/uml/init.sh sets the guest up and runs each stage there
# (tests/uml/stage.sh), and this script reports each stage's result.
#
#   tests/uml/run.sh [STAGE...]      stages: integration, hostile (default: both)
#
# Environment: BUILD (the build directory whose sandboxd is tested, default build),
# UML_MEM (guest memory, default 1500M), UML_TIMEOUT (seconds for the whole run, default 1200),
# UML_PYTEST_ARGS, UML_HOSTILE_ARGS (extra arguments for pytest and the hostile harness).
#
# Nothing survives it: the guest's host processes form one session, killed as a whole by its
# leader's pid on timeout or interruption, and the results directory is removed; the hostile
# report is kept as $BUILD/uml-hostile-report.json.
set -u
cd "$(dirname "$0")/../.."
tree=$PWD
build=${BUILD:-build}
stages=${*:-integration hostile}
timeout_s=${UML_TIMEOUT:-1200}

if ! command -v linux.uml >/dev/null 2>&1; then
        echo "uml: linux.uml is missing (scripts/install-deps.sh installs user-mode-linux)" >&2
        exit 1
fi
if [ ! -x "$build/sandboxd" ]; then
        echo "uml: no $build/sandboxd (run make first)" >&2
        exit 1
fi

results=$(mktemp -d /tmp/sandboxd-uml.XXXXXX) || exit 1
# Held while the run lives: a leak audit (another checkout's, meanwhile) counts only temp dirs
# nobody holds an flock on. The guest does not inherit it (9<&- below).
exec 9<"$results" && flock -n 9 || echo "uml: cannot lock $results" >&2
session=""

# Kills whatever is left of the guest's session (the kernel process and one host process per
# guest address space) by its leader's pid, and waits until none is left.
kill_guest() {
        [ -n "$session" ] || return 0
        kill -KILL "-$session" 2>/dev/null # dash: no "--"; -PID is the process group
        i=0
        while pgrep -s "$session" >/dev/null 2>&1 && [ $i -lt 100 ]; do
                sleep 0.1
                i=$((i + 1))
        done
        if pgrep -s "$session" >/dev/null 2>&1; then
                echo "uml: processes of session $session survived SIGKILL:" >&2
                pgrep -a -s "$session" >&2
        fi
        wait "$session" 2>/dev/null
}
cleanup() {
        kill_guest
        rm -rf "$results"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What init reads (the kernel command line passes it only the results directory).
cat >"$results/env" <<EOF
SBX_VM_TREE='$tree'
SBX_VM_BUILD='$build'
SBX_VM_STAGES='$stages'
SBX_VM_PYTEST_ARGS='${UML_PYTEST_ARGS:-}'
SBX_VM_HOSTILE_ARGS='${UML_HOSTILE_ARGS:-}'
EOF

# Can this host run it at all? Debian's UML 6.1 cannot on some hosts (seen: Linux 6.18 on a CPU
# with AVX-512 and AMX, where the host refuses UML's write of its processes' FPU state and the
# guest's first program dies of SIGSEGV, a kernel panic at boot). That is the machine lacking
# the feature: SKIP with what the probe saw.
probe=$(setsid timeout -s KILL 60 linux.uml mem=256M root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init="$tree/tests/uml/probe.sh" quiet loglevel=1 con=null con0=fd:0,fd:1 \
        umid=sandboxd-probe uml_dir="$results/uml" </dev/null 9<&- 2>&1)
if ! echo "$probe" | grep -q "^sandboxd-uml-probe: ok"; then
        why=$(echo "$probe" | grep -m 1 -e "^sandboxd-uml-probe:" -e "Kernel panic" -e "fatal" |
                tr -d '\r')
        echo "SKIP uml: linux.uml ($(linux.uml --version 2>/dev/null | head -n 1)) cannot run" \
                "programs on this host (Linux $(uname -r)): ${why:-no answer from the guest}"
        exit 0
fi

started=$(date +%s)
echo "uml: booting linux.uml ($(linux.uml --version 2>/dev/null | head -n 1 || echo 6.1)), stages: $stages"
# A session of its own (setsid execs in place: $! is the kernel process), so that every host
# process of the guest can be killed at once. umid and uml_dir keep UML's runtime files (the
# management console socket, its pid file) inside the results directory.
setsid linux.uml mem="${UML_MEM:-1500M}" root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init="$tree/tests/uml/init.sh" quiet loglevel=1 con=null con0=fd:0,fd:1 \
        umid=sandboxd-test uml_dir="$results/uml" SBX_UML_RESULTS="$results" </dev/null 9<&- &
session=$!

while kill -0 "$session" 2>/dev/null; do
        if [ $(($(date +%s) - started)) -ge "$timeout_s" ]; then
                echo "uml: the guest is still running after $timeout_s s: killing it" >&2
                break
        fi
        sleep 1
done
# Also after a clean power-off: nothing of the session may outlive the run.
kill_guest
[ -f "$results/hostile-report.json" ] && cp "$results/hostile-report.json" "$build/uml-hostile-report.json"
echo "uml: machine: $(tr '\n' ';' <"$results/machine.txt" 2>/dev/null)"
failed=""
for stage in $stages; do
        if [ -f "$results/$stage.status" ]; then
                read -r rc seconds <"$results/$stage.status"
                echo "uml: stage $stage: exit $rc in $seconds s"
                [ "$rc" = 0 ] || failed="$failed $stage"
        else
                echo "uml: stage $stage: did not finish"
                failed="$failed $stage"
        fi
done
echo "uml: total $(($(date +%s) - started)) s"
[ -z "$failed" ] || {
        echo "uml: FAILED:$failed"
        exit 1
}
