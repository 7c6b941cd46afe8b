"""Hostile payload (resource): the kernel counters kept per host user, which a sandbox's user
namespace charges to its owner, host root, whose counts every host daemon shares.

- inotify_init1: root's 128 instances (fs.inotify.max_user_instances) would be the sandbox's to
  use up; refused (seccomp EPERM).
- sigqueue: real-time signals queued and kept pending by four processes, each of its own uid
  (per-uid limits count each apart) and with its soft RLIMIT_SIGPENDING raised as far as it may,
  up to 1024 each. The sandbox's ceiling on root's count stops all four together near 1024
  (EAGAIN); the report says "capped" when the total stayed within 1100 and "OK" when all 4096
  were queued. The queued signals go with the processes.
- mq_open: POSIX message queue bytes count the same way; refused (Landlock EACCES, or
  RLIMIT_MSGQUEUE 0: EMFILE).

One JSON line per op: {"op": NAME, "ret": R, "errno": ...}."""
import ctypes
import ctypes.util
import errno
import json
import os
import resource
import signal

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def report(op, ret, err):
    print(json.dumps({"op": op, "ret": ret, "errno": err}), flush=True)


ctypes.set_errno(0)
fd = libc.inotify_init1(os.O_CLOEXEC)
report("inotify_init1", fd, "OK" if fd >= 0 else errno.errorcode.get(ctypes.get_errno()))
if fd >= 0:
    os.close(fd)

signo = signal.SIGRTMIN


class SigVal(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]


libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, SigVal]


def queue_to_self(limit):
    """Blocks signo and queues it to this process until refused or limit; returns the count."""
    soft, hard = resource.getrlimit(resource.RLIMIT_SIGPENDING)
    try:
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (hard, hard))
    except (OSError, ValueError):
        pass
    signal.pthread_sigmask(signal.SIG_BLOCK, [signo])
    queued = 0
    while queued < limit:
        if libc.sigqueue(os.getpid(), signo, SigVal(queued)) < 0:
            break
        queued += 1
    return queued


# Four processes, each as its own uid of the sandbox (a per-uid limit counts each apart), each
# queuing up to 1024 and keeping them pending until all four have counted.
release_r, release_w = os.pipe()
total = 0
children = []
for i in range(4):
    count_r, count_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(release_w)
        try:
            os.setgid(2000 + i)
            os.setuid(2000 + i)
        except OSError:
            pass
        os.write(count_w, str(queue_to_self(1024)).encode())
        os.close(count_w)
        os.read(release_r, 1)
        os._exit(0)
    os.close(count_w)
    total += int(os.read(count_r, 32) or b"0")
    os.close(count_r)
    children.append(pid)
os.close(release_w)
for pid in children:
    os.waitpid(pid, 0)
report("sigqueue", total, "OK" if total == 4096 else ("capped" if total <= 1100 else "EXCESS"))

libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
ctypes.set_errno(0)
mq = libc.mq_open(b"/sandboxd-host-counters", os.O_CREAT | os.O_RDWR, 0o600, None)
report("mq_open", mq, "OK" if mq >= 0 else errno.errorcode.get(ctypes.get_errno()))
if mq >= 0:
    libc.mq_unlink(b"/sandboxd-host-counters")
