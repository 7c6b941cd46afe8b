#!/bin/sh
# The init (pid 1) of both test guests: the user-mode-linux one that tests/uml/run.sh boots, and
# the qemu one that tests/qemu/run.sh boots (its initramfs switch_roots here). It turns the guest
# into the machine the tests expect (a pure cgroup v2 hierarchy with the memory, pids and cpu
# controllers, a writable /tmp, IPv6 on loopback), runs the stages named in SBX_VM_STAGES against
# the tree SBX_VM_TREE (read-only: the host's / through hostfs or 9p), writes each stage's exit
# status and output to the run's results directory on the host (mounted read-write), and powers
# off.
#
# The kernel command line names the guest (SBX_VM: uml, the default, or qemu) and, for UML, the
# host path of the results directory (SBX_UML_RESULTS; qemu exports it as the 9p tag "results");
# the rest is in the results directory's env file. Everything runs as root: the guest's root is
# the host's / read-only, and nothing it does reaches the host except the results directory.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp LANG=C.UTF-8

vm=${SBX_VM:-uml}
say() { echo "$vm-init: $*"; }

# Whatever happens below, the guest must end: run.sh waits for it.
trap 'poweroff -f' EXIT

mount -t proc proc /proc
mount -t sysfs sysfs /sys
# As on the host: where the LSMs are listed (and Landlock's presence is read off).
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs /tmp
# Writable as on the host: the hostile session payloads' outside controls write there (a
# read-only one made session_cross_reach's control end in an error instead of its findings).
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
mount -t tmpfs -o mode=755 tmpfs /run
# sandboxd serve's default data_dir, and anything else that writes under /var/lib; /root, where
# the integration tests make their host canaries.
mount -t tmpfs -o mode=755 tmpfs /var/lib
mount -t tmpfs -o mode=700 tmpfs /root
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# The pure v2 layout most hosts run: one hierarchy, controllers enabled at the root.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control
hostname "$vm"
ip link set lo up 2>/dev/null

# The results directory is mounted only to read the run's settings and, at the end, to write the
# results: while tests run, no mount of the guest names the host's path (the integration tests
# count any mount that mentions sandboxd as a leak).
host_results=/mnt
results=/tmp/vm-results
mkdir -p "$results"
mount_results() {
        case $vm in
        uml) mount -t hostfs -o "$SBX_UML_RESULTS" hostfs "$host_results" ;;
        # No cache option: what is written must reach the host before the power-off.
        qemu) mount -t 9p -o trans=virtio,version=9p2000.L results "$host_results" ;;
        *) false ;;
        esac
}
mount_results || {
        say "cannot mount the results directory"
        exit 1
}
. "$host_results/env"
umount "$host_results"
export SBX_VM="$vm" SBX_VM_BUILD SBX_VM_PYTEST_ARGS SBX_VM_HOSTILE_ARGS
publish() {
        mount_results && cp -r "$results/." "$host_results/" && sync && umount "$host_results"
}

# IPv6 is a module in Debian's UML kernel (with crc-ccitt, which it needs), kept outside
# /lib/modules; loaded with finit_module(2) directly (x86_64 number 313), as the host need not
# have kmod's insmod. Debian's amd64 kernel (qemu) has it built in.
modules=/usr/lib/uml/modules/$(uname -r)/kernel
[ -d /proc/sys/net/ipv6 ] || /usr/bin/python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if libc.syscall(313, fd, b"", 0) != 0:
        sys.exit("finit_module %s: %s" % (path, os.strerror(ctypes.get_errno())))
' "$modules/lib/crc-ccitt.ko" "$modules/net/ipv6/ipv6.ko" ||
        say "IPv6 is not available: tests that need it will fail"

{
        echo "kernel: $(uname -r) ($(uname -m), $vm)"
        echo "booted: init ran $(cut -d " " -f 1 /proc/uptime) s after the kernel started"
        echo "cgroup: $(stat -f -c %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
        echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
        echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null || echo none)"
} >"$results/machine.txt"
cat "$results/machine.txt"

cd "$SBX_VM_TREE" || exit 1
for stage in $SBX_VM_STAGES; do
        say "stage $stage"
        start=$(date +%s)
        # On the console as it runs (run.sh shows it), and kept for the report.
        {
                ./tests/uml/stage.sh "$stage" "$results"
                echo "$?" >"/tmp/$stage.rc"
        } 2>&1 | tee "$results/$stage.log"
        rc=$(cat "/tmp/$stage.rc" 2>/dev/null || echo 1)
        echo "$rc $(($(date +%s) - start))" >"$results/$stage.status"
        say "stage $stage: exit $rc in $(($(date +%s) - start)) s"
done
publish || say "cannot write the results to the host"
