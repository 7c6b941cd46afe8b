"""Hostile payload (session), tenant B's session: opened right after tenant A's ended
(residue_plant.py), it looks for A's token: files by name and content in the workspace (cwd),
/tmp, /dev/shm, /var/tmp and $HOME; SysV shm, msg and sem objects by A's key {ipc_key}; any
process whose command line holds the token; A's daemon's abstract socket; its heartbeat file.
A self-test first: B plants its own marker (the token reversed) the same ways (files, SysV
objects with another key, a child with the marker in argv, an abstract socket) and must find
each with the same search, so that "not found" means absent, not a blind search. B removes its
own marker objects again. One JSON line per check: errno "FOUND", or why not."""
# %%
import ctypes
import errno
import json
import os
import socket
import subprocess
import sys
import time

TOKEN = "{token}"
KEY = int("{ipc_key}")
MARKER = TOKEN[::-1]
MARKER_KEY = KEY ^ 0x5A5A5A
libc = ctypes.CDLL(None, use_errno=True)
PLACES = [p for p in dict.fromkeys([os.getcwd(), "/tmp", "/dev/shm", "/var/tmp",
                                    os.environ.get("HOME", "/")]) if os.path.isdir(p)]


def report(op, found, err="ENOENT", **extra):
    print(json.dumps({"op": op, "ret": 0 if found else -1, "errno": "FOUND" if found else err,
                      **extra}), flush=True)


def files_with(needle, top):
    hits = []
    for root, dirs, names in os.walk(top):
        for name in dirs + names:
            path = os.path.join(root, name)
            if needle in name:
                hits.append(path)
            elif name in names and not os.path.islink(path):
                try:
                    with open(path, "rb") as f:
                        if needle.encode() in f.read(64 << 20):
                            hits.append(path)
                except OSError:
                    pass
    return hits


def processes_with(needle):
    hits = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle.encode() in f.read():
                        hits.append(int(pid))
            except OSError:
                pass
    return hits


def sysv(kind, key):
    """(found, errno name) for a lookup of an existing object by key."""
    ret = {"shm": lambda: libc.shmget(key, 0, 0), "msg": lambda: libc.msgget(key, 0),
           "sem": lambda: libc.semget(key, 0, 0)}[kind]()
    return ret >= 0, errno.errorcode.get(ctypes.get_errno(), "?"), ret


def talk(name):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect("\0" + name)
            return True, "OK"
    except OSError as e:
        return False, errno.errorcode.get(e.errno, str(e.errno))


# Self-test: B's own marker, planted and found the same ways.
for place in ("workspace", "/tmp", "/dev/shm"):
    top = os.getcwd() if place == "workspace" else place
    path = os.path.join(top, f"selftest-{MARKER}")
    with open(path, "w") as f:
        f.write(MARKER)
    report("selftest_file", bool(files_with(MARKER, top)), where=place)
    os.unlink(path)
created = {"shm": libc.shmget(MARKER_KEY, 4096, 0o1600), "msg": libc.msgget(MARKER_KEY, 0o1600),
           "sem": libc.semget(MARKER_KEY, 1, 0o1600)}
for kind, ident in created.items():
    found, err, _ = sysv(kind, MARKER_KEY)
    report("selftest_sysv", found and ident >= 0, err, kind=kind)
libc.shmctl(created["shm"], 0, None)  # IPC_RMID
libc.msgctl(created["msg"], 0, None)
libc.semctl(created["sem"], 0, 0)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", MARKER])
mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
mine.bind("\0hostile-session-" + MARKER)
mine.listen(1)
time.sleep(0.2)
report("selftest_process", bool(processes_with(MARKER)))
report("selftest_socket", *talk("hostile-session-" + MARKER))
child.kill()
child.wait()
mine.close()

# A's token.
for place in PLACES:
    hits = files_with(TOKEN, place)
    report("search_file", bool(hits), where=place, hits=hits[:5])
for kind in ("shm", "msg", "sem"):
    found, err, ret = sysv(kind, KEY)
    report("lookup_sysv", found, err, kind=kind, ret=ret)
hits = processes_with(TOKEN)
report("linger_process", bool(hits), pids=hits[:8])
report("linger_socket", *talk("hostile-session-" + TOKEN))
report("linger_heartbeat", os.path.exists("/tmp/hostile-session-beat-" + TOKEN))
