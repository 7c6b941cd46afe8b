"""Hostile payload (residue), tenant B: runs right after tenant A (plant_linger.py) and looks for
A's lingering processes: any process whose command line or name holds the run token
(argument 1), A's abstract socket "\\0hostile-linger-<token>" (connect, and ask it to talk), and
A's heartbeat file in $TMPDIR. It also reports every process it can see that is not its own
(in a fresh pid namespace there is none).

Self-test first: B starts its own child with a marker (the token reversed) in its command line
and its own abstract socket, and must find both the same way. One JSON line per check:
{"op": ..., "errno": "ENOENT"|"ECONNREFUSED"|"FOUND"}."""
import errno
import json
import os
import socket
import subprocess
import sys
import time

token = sys.argv[1]
marker = token[::-1]
tmpdir = os.environ.get("TMPDIR", "/tmp")


def report(op, found, err="ENOENT", **extra):
    print(json.dumps({"op": op, "ret": 0 if found else -1, "errno": "FOUND" if found else err,
                      **extra}), flush=True)


def ancestors():
    """This program's parent chain: B's own launcher, never A's. Under the gVisor backend the
    sandbox's pid 1 is the stage shell that started this program, with the token in its command
    line because it is this program's argument."""
    chain, pid = set(), os.getppid()
    while pid > 0 and pid not in chain:
        chain.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def processes_with(needle):
    hits = []
    own = ancestors() | {os.getpid()}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in own:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/comm", "rb") as f:
                comm = f.read()
        except OSError:
            continue
        if needle.encode() in cmdline or needle.encode() in comm:
            hits.append(int(pid))
    return hits


def talk(name):
    """(found, errno name) for a connect to abstract socket name."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect("\0" + name)
            s.recv(200)
            return True, "OK"
    except OSError as e:
        return False, errno.errorcode.get(e.errno, str(e.errno))


# Self-test: a child of ours with the marker in argv and an abstract socket of ours.
child = subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(30)", marker])
mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
mine.bind("\0hostile-linger-" + marker)
mine.listen(1)
time.sleep(0.2)
report("selftest_process", bool(processes_with(marker)))
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
    try:
        s.connect("\0hostile-linger-" + marker)
        report("selftest_socket", True)
    except OSError as e:
        report("selftest_socket", False, errno.errorcode.get(e.errno, str(e.errno)))
child.kill()
child.wait()
mine.close()

hits = processes_with(token)
report("linger_process", bool(hits), pids=hits[:8])
found, err = talk("hostile-linger-" + token)
report("linger_socket", found, err)
beat = os.path.join(tmpdir, "hostile-linger-" + token)
report("linger_heartbeat", os.path.exists(beat))

# Everything visible besides this process (a fresh pid namespace shows only our own).
others = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(l.split()[1] for l in f if l.startswith("Uid:"))
            with open(f"/proc/{pid}/comm") as f:
                others.append(f"{pid}:{f.read().strip()}:uid{uid}")
        except (OSError, StopIteration):
            pass
print(json.dumps({"op": "visible_processes", "ret": len(others), "others": others[:16],
                  "own_pid": os.getpid()}), flush=True)
