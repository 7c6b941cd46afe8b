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
# whole run, default 600), QEMU_PYTEST_ARGS, QEMU_HOSTILE_ARGS (replace the subsets: pytest's
# arguments, relative to the tree, and the hostile harness's extra arguments),
# SANDBOXD_TEST_CACHE (where scripts/install-deps.sh unpacked the guest kernel, default
# /var/cache/sandboxd-test), QEMU_KERNEL_ARGS (added to the guest kernel's command line, e.g. an
# lsm= list without landlock), QEMU_REPORT (the hostile report's name in $BUILD).
#
# Nothing survives it: qemu runs in a session of its own, killed by its leader's pid on timeout or
# interruption, and the run's temp directory is removed; the hostile report is kept as
# $BUILD/qemu-hostile-report.json (or QEMU_REPORT), the integration stage's JUnit XML as
# $BUILD/qemu-integration.xml.
set -u
cd "$(dirname "$0")/../.." || exit 1
tree=$PWD
build=${BUILD:-build}
stages=${*:-smoke integration hostile}
timeout_s=${QEMU_TIMEOUT:-600}
cache=${SANDBOXD_TEST_CACHE:-/var/cache/sandboxd-test}

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

vm_name=qemu
. "$tree/tests/uml/guest_run.sh"

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
# The stated subsets (tests/uml/guest_run.sh), unless QEMU_PYTEST_ARGS or QEMU_HOSTILE_ARGS replace
# them.
vm_subsets "${QEMU_PYTEST_ARGS:-}" "${QEMU_HOSTILE_ARGS:-}"
# The harness's bounds on sandboxd's whole run as the host sees it assume this host's speed: under
# emulation, on a host busy with other work, a pooled Python run's start alone took 1.8 s over
# its 1 s deadline (its bound: 2.5 s); the sandbox's own timing bounds stay as they are. Pooled
# runs: Python's only, to keep the stage within its time under emulation (the other languages'
# exec entries are in the integration subset here: test_pool_equivalence.py). The native backend
# only: the gVisor backend's column runs on the host (its ptrace platform under emulation would
# be slower still). The controls (each payload again, its limit lifted) of the resource class
# only: its caps are the cgroup v2 ones this stage is for; the other classes' controls flip on the
# host, in the hostile stage (90 s less here).
hostile_args="--host-time-scale 3 --pooled-languages python --backends native \
--controls-class resource $hostile_args"
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

vm_wait_guest
vm_report "$share" "${QEMU_REPORT:-qemu-hostile-report.json}" qemu-integration.xml
