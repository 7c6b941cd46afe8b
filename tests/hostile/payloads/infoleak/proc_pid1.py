"""Hostile payload (infoleak): the process table. /proc/1 (the sandbox's init: a fork of the
host's sandboxd, whose command line and environment are the supervisor's) must be hidden, the
processes visible must be the program's own, and the host pids the harness passes as arguments
(a canary process, and the host's pid 1 by its host pid, which is 1) must not exist. Whatever is
readable is printed. One JSON line per attempt on stdout."""
import errno
import json
import os
import sys


def report(op, ret, err=None, **extra):
    line = {"op": op, "ret": ret, "errno": errno.errorcode.get(err, str(err)) if err else None}
    line.update(extra)
    print(json.dumps(line), flush=True)


def read(op, path):
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
        report(op, len(data), path=path, content=data[:400].decode("utf-8", "replace"))
    except OSError as e:
        report(op, -1, e.errno, path=path)


for name in ("cmdline", "environ", "status", "comm", "stat", "maps", "mountinfo", "cgroup",
             "cwd/", "root/", "exe", "fd/", "ns/mnt"):
    path = "/proc/1/" + name
    if name.endswith("/"):
        try:
            report("init_proc", len(os.listdir(path)), path=path, names=os.listdir(path)[:20])
        except OSError as e:
            report("init_proc", -1, e.errno, path=path)
    elif name in ("exe", "ns/mnt"):
        try:
            report("init_proc", 0, path=path, link=os.readlink(path))
        except OSError as e:
            report("init_proc", -1, e.errno, path=path)
    else:
        read("init_proc", path)

# Visible processes: every one must be this program or one of its descendants.
me = os.getpid()


def parent(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


foreign = {}
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
for pid in pids:
    chain, cur = [], pid
    while cur not in (None, 0, me) and len(chain) < 64:
        chain.append(cur)
        cur = parent(cur)
    if cur != me and pid != me:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                foreign[pid] = f.read(200).replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            foreign[pid] = "?"
# Under the gVisor backend the sandbox's init is its stage shell, this program's parent (it holds
# nothing but the program's own argv, files list and environment): OWN_AND_PARENT_INIT. Any other
# process is foreign.
verdict = "OWN_ONLY"
if foreign:
    verdict = "OWN_AND_PARENT_INIT" if list(foreign) == [1] and os.getppid() == 1 else "FOREIGN"
report("visible_processes", len(pids), verdict, foreign=dict(list(foreign.items())[:20]))

for arg in sys.argv[1:]:
    read("host_pid", f"/proc/{arg}/cmdline")
