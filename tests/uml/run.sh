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
# UML_PYTEST_ARGS, UML_HOSTILE_ARGS (replace the stated subsets of tests/uml/guest_run.sh:
# pytest's arguments, relative to the tree, and the hostile harness's extra arguments).
#
# Nothing survives it: the guest's host processes form one session, killed as a whole by its
# leader's pid on timeout or interruption, and the results directory is removed; the hostile
# report is kept as $BUILD/uml-hostile-report.json and the integration stage's JUnit XML as
# $BUILD/uml-integration.xml (tests/uml/guest_run.sh, shared with tests/qemu).
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

vm_name=uml
. "$tree/tests/uml/guest_run.sh"

# The stated subsets (guest_run.sh), unless UML_PYTEST_ARGS or UML_HOSTILE_ARGS replace them;
# the hostile harness's bounds on a whole run as the host sees it scaled, and pooled runs of
# Python only, as under qemu: the guest's one CPU is several times slower than the host's; the
# native backend only (the gVisor backend's column runs on the host: its ptrace platform would
# trace every system call of the payload under the guest's one slow CPU).
vm_subsets "${UML_PYTEST_ARGS:-}" "${UML_HOSTILE_ARGS:-}"
hostile_args="--host-time-scale 3 --pooled-languages python --backends native $hostile_args"
# What init reads (the kernel command line passes it only the results directory).
cat >"$results/env" <<EOF
SBX_VM_TREE='$tree'
SBX_VM_BUILD='$build'
SBX_VM_STAGES='$stages'
SBX_VM_PYTEST_ARGS='$pytest_args'
SBX_VM_HOSTILE_ARGS='$hostile_args'
EOF

# Can this host run it at all? Debian's UML 6.1 cannot on some hosts (seen: Linux 6.18 on a CPU
# with AVX-512 and AMX, where the host refuses UML's write of its processes' FPU state and the
# guest's first program dies of SIGSEGV, a kernel panic at boot). That is the machine lacking
# the feature: SKIP with what the probe saw.
# Boot-time work the guests do not need (src/sandbox/uml/uml.c's kernel_arguments: ~1.8 s of each
# boot): 256 legacy BSD pty pairs, the RAID-6 benchmark, btrfs.
fast_boot="pty.legacy_count=0 initcall_blacklist=raid6_select_algo,init_btrfs_fs"
# shellcheck disable=SC2086
probe=$(setsid timeout -s KILL 60 linux.uml mem=256M root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init="$tree/tests/uml/probe.sh" quiet loglevel=1 con=null con0=fd:0,fd:1 $fast_boot \
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
# shellcheck disable=SC2086
setsid linux.uml mem="${UML_MEM:-1500M}" root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init="$tree/tests/uml/init.sh" quiet loglevel=1 con=null con0=fd:0,fd:1 $fast_boot \
        umid=sandboxd-test uml_dir="$results/uml" SBX_UML_RESULTS="$results" </dev/null 9<&- &
session=$!

vm_wait_guest
vm_report "$results" uml-hostile-report.json uml-integration.xml
