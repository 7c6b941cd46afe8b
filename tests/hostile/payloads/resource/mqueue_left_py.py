"""Create a POSIX message queue named argv[1], put a message in it and exit without unlinking
it. The host must never see it: it belongs to the sandbox's IPC namespace."""
import ctypes
import ctypes.util
import errno
import os
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
libc.mq_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]

name = (sys.argv[1] if len(sys.argv) > 1 else "/sandboxd-hostile").encode()


def report(op, ret):
    err = ctypes.get_errno() if ret < 0 else None
    print('{"op": "%s", "ret": %d, "errno": %s}'
          % (op, ret, '"%s"' % errno.errorcode.get(err, str(err)) if err else "null"), flush=True)


fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o666, None)
report("mq_open", fd)
if fd >= 0:
    report("mq_send", libc.mq_send(fd, b"residue", 7, 0))
