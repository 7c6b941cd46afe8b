#!/bin/sh
# Runs sandboxd's tests on a pure cgroup v2 hierarchy under qemu's software emulation (TCG: these
# machines have no usable KVM), with Debian 12's own amd64 kernel (Linux 6.1, Landlock ABI 2):
# the same guest as tests/uml, for hosts where user-mode-linux cannot run. qemu boots the kernel
# with an initramfs built here (busybox-static and the virtio/9p modules; its /init is
# tests/qemu/initramfs-init.sh), which mounts the host's / read-only over 9p and switch_roots into
# tests/uml/init.sh; that sets the guest up and runs each stage (tests/uml/stage.sh), and this
# script reports each stage's result.
#
#   tests/qemu/run.sh [STAGE...]     stages: smoke, integration, hostile (default: all three)
#
# Emulation makes the guest slow (print(2+2) several times the host's wall), so by default the
# integration and hostile stages run a stated subset that covers every cgroup code path (below);
# what is left out is printed with the reason.
#
# Environment: BUILD (the build directory whose sandboxd is tested, default build), QEMU_MEM
# (guest memory, default 2G), QEMU_SMP (guest CPUs, default 2), QEMU_TIMEOUT (seconds for the
# whole run, default 420), QEMU_PYTEST_ARGS, QEMU_HOSTILE_ARGS (replace the subsets: pytest's
# arguments, relative to the tree, and the hostile harness's extra arguments),
# SANDBOXD_TEST_CACHE (where scripts/install-deps.sh unpacked the guest kernel, default
# /var/cache/sandboxd-test), QEMU_KERNEL_ARGS (added to the guest kernel's command line, e.g. an
# lsm= list without landlock), QEMU_REPORT (the hostile report's name in $BUILD).
#
# Nothing survives it: qemu runs in a session of its own, killed by its leader's pid on timeout or
# interruption, and the run's temp directory is removed; the hostile report is kept as
# $BUILD/qemu-hostile-report.json (or QEMU_REPORT).
set -u
cd "$(dirname "$0")/../.." || exit 1
tree=$PWD
build=${BUILD:-build}
stages=${*:-smoke integration hostile}
timeout_s=${QEMU_TIMEOUT:-420}
cache=${SANDBOXD_TEST_CACHE:-/var/cache/sandboxd-test}

# The integration subset: every cgroup code path on v2 (limits: memory, pids, cpu quota, cpu
# time, wall; the evidence read back; the kill of a whole cgroup on timeout and when the program
# ends; reconciliation after a crash; pooled entries, whose cgroups are made ahead of the run;
# a session's memory cap, which must kill its interpreter and not its agent: memory.oom.group).
# Files or node ids, relative to tests/integration.
integration_subset="test_cgroups.py test_limits.py test_pool_equivalence.py
        test_session_cli.py::test_memory_cap_restarts_the_interpreter
        test_serve_sessions.py::test_timeout_memory_and_a_dead_agent"
# The hostile subset, by class: resource (every limit hit, with the cgroup's evidence, and each
# control lifting it), supervisor (the kill of the whole cgroup on a deadline or an output cap),
# failclosed (failclosed_cgroup: a cgroup step that fails must fail the run), session (a session's
# cgroup killed at a cell's deadline and made again, and gone once the session ends). Left out:
# the classes whose containment does not depend on the cgroup layout (filesystem, network,
# privilege, infoleak, kernel) and residue (files and IPC one tenant leaves for the next; its
# cgroup check, A's cgroups gone, is session_residue's too): 200 s more under emulation.
hostile_classes="resource,supervisor,failclosed,session"

fail() {
        echo "qemu: $*" >&2
        exit 1
}
command -v qemu-system-x86_64 >/dev/null 2>&1 ||
        fail "qemu-system-x86_64 is missing (scripts/install-deps.sh installs qemu-system-x86)"
if ! command -v busybox >/dev/null 2>&1 || ! command -v cpio >/dev/null 2>&1; then
        fail "busybox or cpio is missing (scripts/install-deps.sh installs busybox-static, cpio)"
fi
# The newest kernel scripts/install-deps.sh unpacked (guest-kernel/<version>/boot, lib/modules).
kernel_dir=$(find "$cache/guest-kernel" -mindepth 1 -maxdepth 1 -type d ! -name ".*" 2>/dev/null |
        sort -V | tail -n 1)
version=${kernel_dir##*/}
# vmlinux (the ELF kernel, started through PVH) boots 3.4 s sooner than vmlinuz under emulation.
kernel=$kernel_dir/boot/vmlinux-$version
[ -f "$kernel" ] || kernel=$kernel_dir/boot/vmlinuz-$version
if [ -z "$kernel_dir" ] || [ ! -f "$kernel" ]; then
        fail "no guest kernel in $cache/guest-kernel (scripts/install-deps.sh fetches it)"
fi
[ -x "$build/sandboxd" ] || fail "no $build/sandboxd (run make first)"

results=$(mktemp -d /tmp/sandboxd-qemu.XXXXXX) || exit 1
# Held while the run lives: a leak audit (another checkout's, meanwhile) counts only temp dirs
# nobody holds an flock on. qemu does not inherit it (9<&- below).
exec 9<"$results" && flock -n 9 || echo "qemu: cannot lock $results" >&2
session=""

# Kills qemu (the leader of its own session) and whatever it started, and waits until none is left.
kill_guest() {
        [ -n "$session" ] || return 0
        kill -KILL "-$session" 2>/dev/null # dash: no "--"; -PID is the process group
        i=0
        while pgrep -s "$session" >/dev/null 2>&1 && [ $i -lt 100 ]; do
                sleep 0.1
                i=$((i + 1))
        done
        if pgrep -s "$session" >/dev/null 2>&1; then
                echo "qemu: processes of session $session survived SIGKILL:" >&2
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

# The initramfs: busybox, /init, and the modules that mounting a 9p root over virtio-pci needs,
# with everything they depend on (each module's depends= field; the package's modules.dep is
# made by depmod at install time, which never happens here), in load order.
modules=$kernel_dir/lib/modules/$version/kernel
initramfs=$results/initramfs
mkdir -p "$initramfs/bin" "$initramfs/dev" "$initramfs/proc" "$initramfs/newroot" \
        "$initramfs/modules"
cp "$(command -v busybox)" "$initramfs/bin/busybox"
ln -s busybox "$initramfs/bin/sh"
cp tests/qemu/initramfs-init.sh "$initramfs/init"
order=""
add_module() {
        case " $order " in *" $1 "*) return 0 ;; esac
        file=$(find "$modules" -name "$1.ko" | head -n 1)
        [ -n "$file" ] || fail "the guest kernel $version has no module $1 in $modules"
        for dependency in $(tr '\0' '\n' <"$file" | LC_ALL=C sed -n 's/^depends=//p' | tr ',' ' '); do
                add_module "$dependency"
        done
        cp "$(find "$modules" -name "$1.ko" | head -n 1)" "$initramfs/modules/"
        order="$order $1"
}
for module in virtio_pci 9pnet_virtio 9p; do
        add_module "$module"
done
echo "$order" | tr ' ' '\n' | sed '/^$/d' >"$initramfs/modules/order"
(cd "$initramfs" && find . | cpio -o -H newc --quiet | gzip -1) >"$results/initrd.gz" ||
        fail "cannot build the initramfs"

# The guest's view of the run: its settings (init.sh reads env) and, at the end, its results.
share=$results/share
mkdir "$share"
pytest_args=${QEMU_PYTEST_ARGS:-}
if [ -z "$pytest_args" ]; then
        for test in $integration_subset; do
                pytest_args="$pytest_args tests/integration/$test"
        done
        # The subset on one line, its words one space apart (it is written over several).
        # shellcheck disable=SC2086
        subset_line=" $(printf '%s ' $integration_subset)"
        left_out=""
        for file in tests/integration/test_*.py; do
                name=${file##*/}
                case "$subset_line" in
                *" $name "* | *" $name::"*) ;;
                *) left_out="$left_out $name" ;;
                esac
        done
        case " $stages " in *" integration "*) ;; *) left_out="" ;; esac
        [ -z "$left_out" ] || echo "SKIP (qemu) integration$left_out: not in the stage's subset" \
                "(the whole suite does not fit its time under emulation; the subset covers every cgroup code path)"
fi
hostile_args=${QEMU_HOSTILE_ARGS:-}
if [ -z "$hostile_args" ]; then
        hostile_args="--class $hostile_classes"
        case " $stages " in *" hostile "*) ;; *) hostile_classes="" ;; esac
        [ -z "$hostile_classes" ] || echo "SKIP (qemu) hostile classes other than $hostile_classes: not in the stage's subset" \
                "(they do not depend on the cgroup layout, and all of them do not fit its time)"
fi
# The harness's bounds on sandboxd's whole run as the host sees it assume this host's speed: under
# emulation, on a host busy with other work, a pooled Python run's start alone took 1.8 s over
# its 1 s deadline (its bound: 2.5 s); the sandbox's own timing bounds stay as they are. Pooled
# runs: Python's only, to keep the stage within its time under emulation (the other languages'
# exec entries are in the integration subset here: test_pool_equivalence.py).
hostile_args="--host-time-scale 3 --pooled-languages python $hostile_args"
cat >"$share/env" <<EOF
SBX_VM_TREE='$tree'
SBX_VM_BUILD='$build'
SBX_VM_STAGES='$stages'
SBX_VM_PYTEST_ARGS='$pytest_args'
SBX_VM_HOSTILE_ARGS='$hostile_args'
EOF

started=$(date +%s)
echo "qemu: booting Debian's $version under TCG (modules:$order), stages: $stages"
# A session of its own (setsid execs in place: $! is qemu), so that it can be killed whole.
# -nodefaults: no NIC, VGA or floppy to emulate and probe; the serial console is the output.
# -no-reboot with panic=-1: a guest kernel panic ends qemu at once instead of hanging the run.
# mitigations=off: TCG executes nothing speculatively, so the guest kernel's Spectre and
# Meltdown work-arounds only slow its system calls. The host's / is exported read-only
# (readonly=on: qemu refuses writes whatever the guest does); multidevs=remap keeps inode numbers
# unique across the host's file systems under /. SBX_VM and SBX_VM_INIT reach init as environment.
setsid qemu-system-x86_64 -M q35 -accel tcg,thread=multi -cpu max \
        -smp "${QEMU_SMP:-2}" -m "${QEMU_MEM:-2G}" \
        -nodefaults -no-user-config -display none -monitor none -serial stdio -no-reboot \
        -kernel "$kernel" -initrd "$results/initrd.gz" \
        -append "console=ttyS0 quiet loglevel=1 panic=-1 mitigations=off ${QEMU_KERNEL_ARGS:-} SBX_VM=qemu SBX_VM_INIT=$tree/tests/uml/init.sh" \
        -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
        -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
        -fsdev local,id=results,path="$share",security_model=none \
        -device virtio-9p-pci,fsdev=results,mount_tag=results </dev/null 9<&- &
session=$!

while kill -0 "$session" 2>/dev/null; do
        if [ $(($(date +%s) - started)) -ge "$timeout_s" ]; then
                echo "qemu: the guest is still running after $timeout_s s: killing it" >&2
                break
        fi
        sleep 1
done
# Also after a clean power-off: nothing of the session may outlive the run.
kill_guest
[ -f "$share/hostile-report.json" ] && cp "$share/hostile-report.json" "$build/${QEMU_REPORT:-qemu-hostile-report.json}"
echo "qemu: machine: $(tr '\n' ';' <"$share/machine.txt" 2>/dev/null)"
failed=""
for stage in $stages; do
        if [ -f "$share/$stage.status" ]; then
                read -r rc seconds <"$share/$stage.status"
                echo "qemu: stage $stage: exit $rc in $seconds s"
                [ "$rc" = 0 ] || failed="$failed $stage"
        else
                echo "qemu: stage $stage: did not finish"
                failed="$failed $stage"
        fi
done
echo "qemu: total $(($(date +%s) - started)) s"
[ -z "$failed" ] || {
        echo "qemu: FAILED:$failed"
        exit 1
}
