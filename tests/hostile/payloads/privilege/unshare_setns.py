"""Hostile payload (privilege): leave the sandbox's namespaces. unshare(2) every namespace type,
alone and together; setns(2) into every namespace file the program can open (its own, and the
init's, which should not even be visible). One JSON line per attempt on stdout."""
import ctypes
import errno
import json
import os

libc = ctypes.CDLL(None, use_errno=True)

FLAGS = {
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWTIME": 0x00000080,
}
NS_FILES = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time", "pid_for_children",
            "time_for_children"]


def report(op, ret, err=None, **extra):
    line = {"op": op, "ret": ret, "errno": errno.errorcode.get(err, str(err)) if err else None}
    line.update(extra)
    print(json.dumps(line), flush=True)


def unshare(name, flags):
    ret = libc.unshare(ctypes.c_int(flags))
    report("unshare", ret, ctypes.get_errno() if ret != 0 else None, flags=name)
    return ret == 0


def setns(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        report("open_ns", -1, e.errno, path=path)
        return
    try:
        ret = libc.setns(fd, 0)
        report("setns", ret, ctypes.get_errno() if ret != 0 else None, path=path)
    finally:
        os.close(fd)


# setns first: after a successful unshare the program's own namespace files would change.
for ns in NS_FILES:
    setns("/proc/self/ns/" + ns)
for ns in NS_FILES:
    setns("/proc/1/ns/" + ns)
for name, flag in FLAGS.items():
    unshare(name, flag)
unshare("all", sum(FLAGS.values()))
