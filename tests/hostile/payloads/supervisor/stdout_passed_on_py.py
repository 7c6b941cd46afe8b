"""Pass stdout on: start a daemon (setsid + double fork) with no stdio of its own, send it our
stdout and stderr over a UNIX socket (SCM_RIGHTS), exit. The daemon keeps the descriptors and
trickles into them, so the pipes never see EOF."""
import os
import socket
import time

parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    parent_end.close()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _, fds, _, _ = socket.recv_fds(child_end, 16, 4)
    while True:
        for fd in fds:
            try:
                os.write(fd, b"still here\n")
            except OSError:
                pass
        time.sleep(0.1)
os.waitpid(pid, 0)
socket.send_fds(parent_end, [b"x"], [1, 2])
print('{"op": "pass_stdout", "ret": 0, "errno": null}', flush=True)
