"""Hostile payload (session), tenant A's session: leaves the run token everywhere the next
session could stumble on it. Cell 1 plants files in the workspace (cwd), /tmp (plain and in a
hidden directory), /dev/shm (with 24 MiB of data: memory charged to A's cgroup) and SysV shm,
msg and sem objects with the key {ipc_key} (the shm segment holds the token). Cell 2 leaves a
setsid double-forked daemon (token in argv, SIGINT/SIGTERM/SIGHUP ignored) that listens on the
abstract socket "\\0hostile-session-<token>" and keeps a heartbeat file in /tmp, and a plain
background child with the token in argv. Each cell ends in an error when a plant failed, so an
empty search in B is never an empty plant in A. One JSON line per plant."""
# %%
import ctypes
import json
import os

TOKEN = "{token}"
KEY = int("{ipc_key}")
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
failed = []


def plant(op, where, ok, err="FAILED"):
    print(json.dumps({"op": op, "where": where, "ret": 0 if ok else -1,
                      "errno": "OK" if ok else err}), flush=True)
    if not ok:
        failed.append(where)


def write(path, data):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return True
    except OSError:
        return False


plant("plant_file", "workspace", write(os.path.join(os.getcwd(), f"ws-{TOKEN}.txt"), TOKEN.encode()))
plant("plant_file", "/tmp", write(f"/tmp/{TOKEN}.txt", TOKEN.encode()))
plant("plant_file", "/tmp/.hidden", write(f"/tmp/.hidden-{TOKEN}/deep/note", TOKEN.encode()))
plant("plant_file", "/dev/shm", write(f"/dev/shm/{TOKEN}", TOKEN.encode()))
plant("plant_file", "/dev/shm/big", write(f"/dev/shm/big-{TOKEN}", bytes(24 << 20) + TOKEN.encode()))

shmid = libc.shmget(KEY, 4096, 0o1666)  # IPC_CREAT | 0666
if shmid >= 0:
    address = libc.shmat(shmid, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(address, TOKEN.encode(), len(TOKEN))
        libc.shmdt(ctypes.c_void_p(address))
plant("plant_sysv", "shm", shmid >= 0)
plant("plant_sysv", "msg", libc.msgget(KEY, 0o1666) >= 0)
plant("plant_sysv", "sem", libc.semget(KEY, 1, 0o1666) >= 0)
assert not failed, f"plants failed: {failed}"
# %%
import json
import os
import subprocess
import sys

TOKEN = "{token}"
DAEMON = r'''
import os, signal, socket, sys, time
token = sys.argv[1].rsplit("-", 1)[1]
for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0hostile-session-" + token)
listener.listen(8)
listener.settimeout(0.2)
os.write(int(sys.argv[2]), b"up")
os.close(int(sys.argv[2]))
beat = "/tmp/hostile-session-beat-" + token
end = time.monotonic() + 120
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
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.set_inheritable(ready_w, True)
        os.execv(sys.executable, [sys.executable, "-c", DAEMON, "hostile-session-" + TOKEN,
                                  str(ready_w)])
    finally:
        os._exit(127)
os.waitpid(pid, 0)
os.close(ready_w)
up = os.read(ready_r, 2) == b"up"
print(json.dumps({"op": "plant_daemon", "ret": 0, "errno": "OK" if up else "FAILED"}), flush=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                          "hostile-session-child-" + TOKEN],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"op": "plant_child", "ret": child.pid, "errno": "OK"}), flush=True)
assert up, "the daemon did not come up"
