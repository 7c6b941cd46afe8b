#!/bin/sh
# The init (pid 1) of the user-mode-linux guest that tests/uml/run.sh boots: it turns the guest
# into the machine the tests expect (a pure cgroup v2 hierarchy with the memory, pids and cpu
# controllers, a writable /tmp, IPv6 on loopback), runs the stages named in SBX_UML_STAGES
# against the tree SBX_UML_TREE (read-only, through hostfs), writes each stage's exit status
# and output to SBX_UML_RESULTS (a host directory, mounted read-write), and powers off.
#
# The kernel hands SBX_UML_RESULTS to init from its command line; the rest is in its env file.
# Everything runs as root: the guest's root is the host's / read-only, and nothing it does
# reaches the host except the results directory.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp LANG=C.UTF-8

say() { echo "uml-init: $*"; }

# Whatever happens below, the guest must end: run.sh waits for it.
trap 'poweroff -f' EXIT

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=1777 tmpfs /tmp
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
hostname uml
ip link set lo up 2>/dev/null

# The results directory is mounted only to read the run's settings and, at the end, to write the
# results: while tests run, no mount of the guest names the host's path (the integration tests
# count any mount that mentions sandboxd as a leak).
host_results=/mnt
results=/tmp/uml-results
mkdir -p "$results"
mount -t hostfs -o "$SBX_UML_RESULTS" hostfs "$host_results" || {
        say "cannot mount the results directory $SBX_UML_RESULTS"
        exit 1
}
. "$host_results/env"
umount "$host_results"
export SBX_UML_BUILD SBX_UML_PYTEST_ARGS SBX_UML_HOSTILE_ARGS
publish() {
        mount -t hostfs -o "$SBX_UML_RESULTS" hostfs "$host_results" &&
                cp -r "$results/." "$host_results/" && sync && umount "$host_results"
}

# IPv6 is a module in Debian's UML kernel (with crc-ccitt, which it needs), kept outside
# /lib/modules; loaded with finit_module(2) directly (x86_64 number 313), as the host need not
# have kmod's insmod.
modules=/usr/lib/uml/modules/$(uname -r)/kernel
/usr/bin/python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if libc.syscall(313, fd, b"", 0) != 0:
        sys.exit("finit_module %s: %s" % (path, os.strerror(ctypes.get_errno())))
' "$modules/lib/crc-ccitt.ko" "$modules/net/ipv6/ipv6.ko" ||
        say "IPv6 is not available: tests that need it will fail"

{
        echo "kernel: $(uname -r) ($(uname -m), UML)"
        echo "cgroup: $(stat -f -c %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
        echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
        echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null || echo none)"
} >"$results/machine.txt"
cat "$results/machine.txt"

cd "$SBX_UML_TREE" || exit 1
for stage in $SBX_UML_STAGES; do
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
publish || say "cannot write the results to $SBX_UML_RESULTS"
