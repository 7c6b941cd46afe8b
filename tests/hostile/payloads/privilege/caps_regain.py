"""Hostile payload (privilege): take capabilities back after they were dropped. capset(2) raising
every set, PR_CAP_AMBIENT_RAISE, clearing the securebits (SECBIT_NOROOT would let an exec as uid 0
grant everything again), PR_SET_KEEPCAPS, and uid/gid/group changes (setuid to another uid and
back would recompute the sets). One JSON line per attempt on stdout."""
import ctypes
import errno
import json
import os

libc = ctypes.CDLL(None, use_errno=True)
SYS_capset = 126
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_KEEPCAPS, PR_SET_SECUREBITS, PR_CAP_AMBIENT = 8, 28, 47
PR_CAP_AMBIENT_RAISE = 2
CAP_SYS_ADMIN, CAP_SETUID, CAP_NET_ADMIN, CAP_DAC_OVERRIDE = 21, 7, 12, 1


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def report(op, ret, err=None, **extra):
    line = {"op": op, "ret": ret, "errno": errno.errorcode.get(err, str(err)) if err else None}
    line.update(extra)
    print(json.dumps(line), flush=True)


def call(op, fn, *args, **extra):
    ret = fn(*args)
    report(op, ret, ctypes.get_errno() if ret < 0 else None, **extra)


def capset_all():
    header = CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (CapData * 2)()
    for i in range(2):
        data[i].effective = data[i].permitted = data[i].inheritable = 0xFFFFFFFF
    return libc.syscall(SYS_capset, ctypes.byref(header), data)


def os_call(op, fn, *args, **extra):
    try:
        fn(*args)
        report(op, 0, **extra)
    except OSError as e:
        report(op, -1, e.errno, **extra)


call("capset", capset_all, what="every capability in effective, permitted, inheritable")
for cap in (CAP_SYS_ADMIN, CAP_SETUID, CAP_NET_ADMIN, CAP_DAC_OVERRIDE):
    call("ambient_raise", libc.prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0, cap=cap)
call("securebits", libc.prctl, PR_SET_SECUREBITS, 0, 0, 0, 0, what="clear every securebit")
call("keepcaps", libc.prctl, PR_SET_KEEPCAPS, 1, 0, 0, 0)
# Only uid/gid 0 are mapped here; the rest do not exist in this user namespace.
for uid in (1, 1000, 65534):
    os_call("setuid", os.setresuid, uid, uid, uid, uid=uid)
os_call("setgid", os.setresgid, 1000, 1000, 1000, gid=1000)
os_call("setgroups", os.setgroups, [0, 1000], groups=[0, 1000])
