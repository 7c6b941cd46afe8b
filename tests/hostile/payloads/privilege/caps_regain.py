"""Hostile payload (privilege): take capabilities beyond the sandbox root's small set
(caps.h: CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID). capset(2) raising every set,
PR_CAP_AMBIENT_RAISE (an ambient capability would survive every exec), changing the securebits
(locked: the root rule, no keep-caps), PR_SET_KEEPCAPS, setuid to ids outside the sandbox's range
(they do not exist in its user namespace), becoming another id of the range and then root again
(a change away from root drops every capability, and nothing gives it back), and setgroups
(denied in the user namespace). One JSON line per attempt on stdout."""
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
# Ids 0..65535 are the sandbox's (userns.h); these are not, and cannot be named.
for uid in (65536, 2000000000, 4294967294):
    os_call("setuid_outside", os.setresuid, uid, uid, uid, uid=uid)
os_call("setgid_outside", os.setresgid, 65536, 65536, 65536, gid=65536)
os_call("setgroups", os.setgroups, [0, 1000], groups=[0, 1000])
# Another id of the range, in a child: allowed, and it must leave that process with nothing.
pid = os.fork()
if pid == 0:
    os.setresgid(1000, 1000, 1000)
    os.setresuid(1000, 1000, 1000)
    status = open("/proc/self/status").read()
    held = [line for line in status.splitlines()
            if line.startswith(("CapPrm", "CapEff", "CapAmb", "CapInh"))
            and int(line.split()[1], 16)]
    print(json.dumps({"op": "caps_after_setuid", "ret": 0, "errno": "HELD" if held else "NONE",
                      "held": held}), flush=True)
    os_call("back_to_root", os.setresuid, 0, 0, 0)
    call("capset_after_setuid", capset_all)
    os._exit(0)
os.waitpid(pid, 0)
