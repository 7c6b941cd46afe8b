"""Hostile payload (session), session B: runs while session A (peer_hold.py, another tenant's,
kept open by the harness) holds the run token in files, a process and an abstract socket. B looks
for A and attacks what it finds: files by name and content in its workspace (cwd), /tmp,
/dev/shm, /var/tmp; every visible process's command line and environment, and what its
/proc/PID/root and /proc/PID/cwd lead to; A's abstract socket; then, against every process found
with the token and against {peer_pid} (the host pid of A's holder, which the harness read on the
host): kill(0), ptrace(PTRACE_ATTACH), pidfd_open, process_vm_readv, and SIGKILL. The harness
checks from the host that A's holder is still alive afterwards.

A self-test first: a child of B's with a marker (the token reversed) in argv and environment, a
marker file in each place, a marker abstract socket: each must be FOUND by the same search, and
the child must be reachable by the same calls (it is killed by them). One JSON line per check:
errno "FOUND"/"OK", or the errno that refused."""
# %%
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

TOKEN = "{token}"
PEER_PID = int("{peer_pid}")
MARKER = TOKEN[::-1]
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.syscall.restype = ctypes.c_long
SYS_PIDFD_OPEN, SYS_PROCESS_VM_READV = 434, 310
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
PLACES = [p for p in dict.fromkeys([os.getcwd(), "/tmp", "/dev/shm", "/var/tmp"])
          if os.path.isdir(p)]


def report(op, found, err="ENOENT", **extra):
    print(json.dumps({"op": op, "ret": 0 if found else -1, "errno": "FOUND" if found else err,
                      **extra}), flush=True)


def errname(number):
    return errno.errorcode.get(number, str(number))


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
    """pids whose command line or environment holds needle, and what /proc/PID/root and cwd of
    every visible process lead to that holds it."""
    pids, via_root = [], []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    if needle.encode() in f.read():
                        pids.append(int(pid))
                        break
            except OSError:
                pass
        for link in ("root/tmp", "root/dev/shm", "cwd"):
            try:
                if any(needle in name for name in os.listdir(f"/proc/{pid}/{link}")):
                    via_root.append(f"{pid}/{link}")
            except OSError:
                pass
    return sorted(set(pids)), via_root


def talk(name):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect("\0" + name)
            return True, "OK"
    except OSError as e:
        return False, errname(e.errno)


def attack(prefix, pid):
    """Every way to reach process pid; one report each (errno "OK" when it worked)."""
    def outcome(ok):
        return "OK" if ok else errname(ctypes.get_errno())
    print(json.dumps({"op": prefix + "signal0", "pid": pid,
                      "errno": outcome(libc.kill(pid, 0) == 0)}), flush=True)
    attached = libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0
    print(json.dumps({"op": prefix + "ptrace", "pid": pid, "errno": outcome(attached)}), flush=True)
    if attached:  # wait for the attach's stop (__WALL: not necessarily our child), let go
        try:
            os.waitpid(pid, 0x40000000)
        except OSError:
            pass
        libc.ptrace(PTRACE_DETACH, pid, None, None)
    fd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    print(json.dumps({"op": prefix + "pidfd_open", "pid": pid, "errno": outcome(fd >= 0)}),
          flush=True)
    if fd >= 0:
        os.close(fd)
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    got = libc.syscall(SYS_PROCESS_VM_READV, pid, local, 1, remote, 1, 0)
    err = ctypes.get_errno()
    # EFAULT/EIO: the call reached the process, only the address was not mapped.
    print(json.dumps({"op": prefix + "vm_readv", "pid": pid,
                      "errno": "OK" if got >= 0 or err in (errno.EFAULT, errno.EIO)
                      else errname(err)}), flush=True)
    print(json.dumps({"op": prefix + "kill", "pid": pid,
                      "errno": outcome(libc.kill(pid, signal.SIGKILL) == 0)}), flush=True)


# Self-test: a child of B's own, found and reached the same ways.
for place in PLACES:
    path = os.path.join(place, f"selftest-{MARKER}")
    with open(path, "w") as f:
        f.write(MARKER)
    report("selftest_file", bool(files_with(MARKER, place)), where=place)
    os.unlink(path)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", MARKER],
                         env=dict(os.environ, HOSTILE_SELFTEST=MARKER))
mine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
mine.bind("\0hostile-peer-" + MARKER)
mine.listen(1)
time.sleep(0.3)
pids, _ = processes_with(MARKER)
report("selftest_process", child.pid in pids, pids=pids)
report("selftest_socket", *talk("hostile-peer-" + MARKER))
attack("selftest_", child.pid)
child.wait()
mine.close()

# Session A.
for place in PLACES:
    hits = files_with(TOKEN, place)
    report("peer_file", bool(hits), where=place, hits=hits[:5])
pids, via_root = processes_with(TOKEN)
report("peer_process", bool(pids), pids=pids[:8])
report("peer_proc_root", bool(via_root), hits=via_root[:8])
report("peer_socket", *talk("hostile-peer-" + TOKEN))
for pid in sorted(set(pids + [PEER_PID])):
    attack("peer_", pid)
