"""Hostile payload (residue), tenant A: leaves processes behind, meant to wait for the next tenant.
A daemon made the classic way (fork, setsid, fork again, SIGHUP/SIGTERM/SIGINT ignored, stdio on
/dev/null) carries the run token (argument 1) in its command line, listens on the abstract UNIX
socket "\\0hostile-linger-<token>" to talk to tenant B, and keeps a heartbeat file
$TMPDIR/hostile-linger-<token> fresh. A second one just sleeps in its own process group with the
token in argv. A exits as soon as both are up (they report readiness over a pipe). Tenant B
(search_linger.py) looks for them.

Exit status 0 only when the daemons were up when A exited. One JSON line per plant."""
import json
import os
import signal
import socket
import sys
import time

token = sys.argv[1]
tmpdir = os.environ.get("TMPDIR", "/tmp")

DAEMON = r'''
import os, signal, socket, sys, time
token, tmpdir, ready = sys.argv[1], sys.argv[2], int(sys.argv[3])
for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0hostile-linger-" + token)
listener.listen(8)
listener.settimeout(0.2)
os.write(ready, b"up")
os.close(ready)
beat = os.path.join(tmpdir, "hostile-linger-" + token)
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        with open(beat, "w") as f:
            f.write(token)
    except OSError:
        pass
    try:
        conn, _ = listener.accept()
        conn.sendall(("lingering " + token + "\n").encode())
        conn.close()
    except OSError:
        pass
'''


def report(op, ok, **extra):
    print(json.dumps({"op": op, "ret": 0 if ok else -1, "errno": "OK" if ok else "FAILED",
                      **extra}), flush=True)


def daemonize(argv, ready_w):
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the first child exits at once: the daemon is reparented
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.set_inheritable(ready_w, True)
    try:
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


ready_r, ready_w = os.pipe()
daemonize(["/usr/bin/python3", "-c", DAEMON, token, tmpdir, str(ready_w)], ready_w)
os.close(ready_w)
up = os.read(ready_r, 2) == b"up"
report("plant_daemon", up)

ready_r2, ready_w2 = os.pipe()
sleeper = ("import os, sys, time; os.setpgid(0, 0); os.write(int(sys.argv[2]), b'up'); "
           "time.sleep(60)")
daemonize(["/usr/bin/python3", "-c", sleeper, "hostile-linger-sleeper-" + token, str(ready_w2)],
          ready_w2)
os.close(ready_w2)
up2 = os.read(ready_r2, 2) == b"up"
report("plant_sleeper", up2)

# The daemon answers on its abstract socket: it is really there when A leaves.
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect("\0hostile-linger-" + token)
        answered = token.encode() in s.recv(200)
except OSError:
    answered = False
report("plant_daemon_answers", answered)
time.sleep(0.3)  # let the first heartbeat land
sys.exit(0 if up and up2 and answered else 1)
