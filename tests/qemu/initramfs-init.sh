#!/bin/sh
# The /init of the initramfs that tests/qemu/run.sh builds (busybox-static, the guest kernel's
# virtio and 9p modules and their load order in /modules/order): it loads the modules, mounts the
# host's / (qemu's 9p export "hostroot", read-only on both sides), moves /dev there and hands over
# to the shared guest init named by SBX_VM_INIT (the kernel command line passes it) with
# switch_root.
/bin/busybox --install -s /bin
export PATH=/bin
# devtmpfs before anything prints: the initramfs has no /dev/console node (making one would need
# mknod when building it), so the kernel could give init no console.
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

fail() {
        echo "qemu-initramfs: $*"
        poweroff -f
}

while read -r module; do
        insmod "/modules/$module.ko" || fail "cannot load $module"
done </modules/order
# cache=loose: the guest keeps what it read of the host's tree (which no test run changes), the
# difference between waiting on 9p for every stat of python's imports and not. msize: 9p's largest
# message, bigger than the 8 KiB default so that reading a file is few round trips.
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=262144 hostroot /newroot ||
        fail "cannot mount the host's / (9p tag hostroot)"
mount --move /dev /newroot/dev
[ -x "/newroot$SBX_VM_INIT" ] || fail "no guest init $SBX_VM_INIT in the host's tree"
exec switch_root /newroot "$SBX_VM_INIT"
