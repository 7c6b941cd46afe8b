#!/usr/bin/python3
"""The leak audit: what of sandboxd is left over on this host, run at the end of `make test` (and
by the integration tests after each test, through `leftovers()`).

A leftover is something of sandboxd that nothing live holds, so that a live sandbox of another
run on the same machine (a second checkout's tests, a service) is never taken for a leak:

  cgroups            a slot directory below a `sandboxd` parent of any hierarchy whose slot no
                     live sandboxd holds: it keeps an flock on the slot's primary directory
                     (cgroup2, else v1 memory) from just after making it until it has removed it
                     (src/sandbox/native/cgroup.c)
  sandbox processes  a process running as a sandbox host uid (>= SANDBOX_UID_BASE, zombies
                     included) that is not in a held slot's cgroup, nor a descendant of another
                     run's process (a stage beside this one: its sandboxd, or its test process
                     that adopted orphans, reaps it)
  sandboxd processes a process named sandboxd of this test run: its environment carries
                     SANDBOXD_TEST_RUN with this run's value, or with it and "/" and a stage's
                     name (scripts/test.sh runs stages side by side, each with its own value, so
                     that one stage's running sandboxd is not another's leak); without one,
                     every sandboxd process counts
  mounts             a mount in this mount namespace naming sandboxd
  loop devices       backed by a file under /tmp/sandboxd*
  temp paths         /tmp/sandboxd* that no live process holds: whoever makes one keeps an flock
                     on it while using it (the hostile harness, the benchmarks)
  gVisor             a gVisor sandbox's directory (/run/sandboxd-gvisor/<slot>: its bundle and
                     runsc's state) or a runsc process of one, whose slot no live sandboxd holds;
                     and any cgroup named sandboxd-* at a hierarchy's root (runsc makes /<id>
                     when it manages cgroups itself, which src/sandbox/gvisor/gvisor.c turns off)

A slot or a temp dir is briefly unlocked right after it is made (mkdir, then flock) and a
process is briefly outside its cgroup while it starts, so a finding counts only when it is still
there after SETTLE_S.

    python3 scripts/leak_audit.py                  prints every leftover; exit 1 if any, else
                                                   "clean"
    python3 scripts/leak_audit.py --record FILE    writes what is left over now to FILE (what
                                                   `make test` found before it began)
    python3 scripts/leak_audit.py --except FILE    counts only what FILE does not name: what a
                                                   killed earlier run left is not this run's
                                                   leak; it is listed, not counted
"""

import argparse
import fcntl
import glob
import json
import os
import re
import subprocess
import sys
import time

CGROUP_ROOT = os.environ.get("CGROUP_ROOT", "/sys/fs/cgroup")
# src/sandbox/native/userns.h: SBX_HOST_ID_BASE, the first host uid of a sandbox.
SANDBOX_UID_BASE = 2_000_000_000
TEST_RUN_VARIABLE = "SANDBOXD_TEST_RUN"
SETTLE_S = 1.0


def _held(path):
    """Whether a live process holds an flock on path (a directory or a file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the lock if it was taken


def _sandboxd_parents():
    """Every hierarchy's `sandboxd` parent directory."""
    found = []
    for dirpath, dirnames, _ in os.walk(CGROUP_ROOT):
        if dirpath.count(os.sep) - CGROUP_ROOT.count(os.sep) >= 6:
            dirnames[:] = []
            continue
        if os.path.basename(dirpath) == "sandboxd":
            found.append(dirpath)
            dirnames[:] = []  # its children are slots, not further parents
    return found


def slot_held(name):
    """Whether a live sandboxd holds the slot called name."""
    for hierarchy in ("unified", "memory", ""):
        primary = os.path.join(CGROUP_ROOT, hierarchy, "sandboxd", name)
        if os.path.isdir(primary):
            return _held(primary)
    return False


def _cgroups():
    found = {}
    for parent in _sandboxd_parents():
        for dirpath, dirnames, _ in os.walk(parent):
            if dirpath == parent:
                continue
            slot = os.path.relpath(dirpath, parent).split(os.sep)[0]
            if not slot_held(slot):
                found[dirpath] = f"cgroup {dirpath}"
    return found


def _status(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _in_held_slot(pid):
    """Whether the process is in a cgroup of a slot a live sandboxd holds."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        match = re.search(r"/sandboxd/([^/]+)", line.split(":", 2)[-1])
        if match and slot_held(match.group(1)):
            return True
    return False


def _test_run_of(pid):
    """The SANDBOXD_TEST_RUN value in the process's environment, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(f"{TEST_RUN_VARIABLE}=".encode()):
                    return entry.split(b"=", 1)[1].decode(errors="replace")
    except OSError:
        pass
    return None


def _of_another_run(pid, run):
    """Whether the process descends from a process of another test run, or of another stage of
    this one (a sandboxd, or a test process that adopted its orphans): a sandbox that run still
    has to reap, not this run's leak. A process whose nearest marked ancestor is this run's, or
    that has none (one that escaped to init), is counted."""
    if run is None:
        return False
    for _ in range(64):
        parent = re.search(r"^PPid:\s*(\d+)$", _status(pid) or "", re.M)
        if parent is None or int(parent.group(1)) <= 1:
            return False
        pid = parent.group(1)
        theirs = _test_run_of(pid)
        if theirs is not None:
            return theirs != run and not theirs.startswith(run + "/")
    return False


def _sandbox_processes(run):
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        status = _status(pid)
        uids = re.search(r"^Uid:\s*(.*)$", status or "", re.M)
        if not uids or not any(int(u) >= SANDBOX_UID_BASE for u in uids.group(1).split()):
            continue
        if _in_held_slot(pid) or _of_another_run(pid, run):
            continue
        name = re.search(r"^Name:\s*(.*)$", status, re.M)
        state = re.search(r"^State:\s*(\S+)", status, re.M)
        found[f"process {pid}"] = (
            f"process {pid} ({name.group(1) if name else '?'}, state "
            f"{state.group(1) if state else '?'}) runs as a sandbox uid outside any live slot")
    return found


def _of_this_run(pid, run):
    if run is None:
        return True
    mine = f"{TEST_RUN_VARIABLE}={run}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v == mine or v.startswith(mine + b"/") for v in f.read().split(b"\0"))
    except OSError:
        return False


def _sandboxd_processes(run):
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                if f.read().strip() != "sandboxd":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if _of_this_run(pid, run):
            found[f"sandboxd {pid}"] = f"sandboxd process {pid} still running: {cmdline}"
    return found


def _mounts():
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return {line.strip(): f"mount {line.strip()}" for line in f if "sandboxd" in line}


def _loop_devices():
    try:
        out = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].startswith("/tmp/sandboxd"):
            found[fields[0]] = f"loop device {fields[0]} backed by {fields[1]}"
    return found


def _temp_paths():
    return {path: f"temp path {path}" for path in glob.glob("/tmp/sandboxd*") if not _held(path)}


# src/sandbox/gvisor/gvisor.c: GVISOR_RUN_DIR, one directory per slot.
GVISOR_RUN_DIR = "/run/sandboxd-gvisor"


def _gvisor():
    found = {}
    for path in glob.glob(os.path.join(GVISOR_RUN_DIR, "*")):
        if not slot_held(os.path.basename(path)):
            found[path] = f"gVisor sandbox directory {path}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        root = next((a for a in argv if a.startswith(f"--root={GVISOR_RUN_DIR}/")), None)
        if root is None or not os.path.basename(argv[0]).startswith("runsc"):
            continue
        slot = root[len(f"--root={GVISOR_RUN_DIR}/"):].split("/")[0]
        if not slot_held(slot):
            found[f"runsc {pid}"] = f"runsc process {pid} of gVisor slot {slot}: {argv[:4]}"
    for path in glob.glob(os.path.join(CGROUP_ROOT, "*", "sandboxd-*")):
        found[path] = f"cgroup {path} (made by runsc)"
    return found


def _scan(run):
    found = {}
    for scan in (_cgroups, _mounts, _loop_devices, _temp_paths, _gvisor):
        found.update(scan())
    found.update(_sandbox_processes(run))
    found.update(_sandboxd_processes(run))
    return found


def leftovers(run=None, settle_s=SETTLE_S):
    """{key: description} of every leftover that is still one after settle_s. run: this test
    run's SANDBOXD_TEST_RUN value (None: the environment's, else every sandboxd process)."""
    if run is None:
        run = os.environ.get(TEST_RUN_VARIABLE)
    found = _scan(run)
    deadline = time.monotonic() + settle_s
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        again = _scan(run)
        found = {k: v for k, v in found.items() if k in again}
    return found


def hold(path):
    """Takes the flock that tells the audit that path is in use; returns the fd (keep it open
    as long as the path is used; closing it releases the lock)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def main():
    parser = argparse.ArgumentParser(description="what of sandboxd is left over on this host")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", metavar="FILE", help="write today's leftovers to FILE")
    group.add_argument("--except", dest="baseline", metavar="FILE",
                       help="do not count the leftovers FILE names")
    args = parser.parse_args()
    found = leftovers()
    if args.record:
        with open(args.record, "w", encoding="utf-8") as f:
            json.dump(sorted(found), f)
        for description in sorted(found.values()):
            print(f"leak-audit: before this run: {description}")
        return 0
    if args.baseline:
        with open(args.baseline, encoding="utf-8") as f:
            before = set(json.load(f))
        for key in sorted(k for k in found if k in before):
            print(f"leak-audit: left before this run began, not counted: {found.pop(key)}")
    for description in sorted(found.values()):
        print(f"leak-audit: {description}")
    if found:
        print(f"leak-audit: {len(found)} leak(s) found")
        return 1
    print("leak-audit: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
