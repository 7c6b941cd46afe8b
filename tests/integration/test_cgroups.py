"""The cgroup paths that only a crash takes: reconciliation of what a killed sandboxd left behind
(cgroup.c cgroup_reconcile, which every `sandboxd run` and `sandboxd serve` calls at start), on
whichever layout the machine has (the hybrid v1 one here, pure v2 under tests/uml)."""

import json
import os
import re
import signal
import subprocess
import time

import pytest
from conftest import IDS_PER_SLOT, SANDBOX_UID_BASE

# Every start of sandboxd reconciles what a crash left, so another test stage's would take these
# tests' orphans first (and these tests' orphans would be the other stage's surprise).
pytestmark = pytest.mark.alone

# cgroup.c ORPHAN_MIN_AGE_S: a slot younger than this may be one another process is creating.
ORPHAN_MIN_AGE_S = 2


def slot_dirs(paths, slot):
    return [p for p in paths if os.path.basename(p) == slot]


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def sandbox_slot(supervisor_pid):
    """The slot of the sandbox whose supervisor is supervisor_pid, from its init's host uid
    (userns.h: slot N owns the uids from SANDBOX_UID_BASE + N * IDS_PER_SLOT), or None while
    init has not taken its ids yet."""
    try:
        with open(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children") as f:
            children = f.read().split()
        for child in children:
            with open(f"/proc/{child}/status") as f:
                uid = int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))
            if uid >= SANDBOX_UID_BASE:
                return (uid - SANDBOX_UID_BASE) // IDS_PER_SLOT
    except (OSError, AttributeError):
        pass
    return None


def slot_processes(host, slot):
    low = SANDBOX_UID_BASE + slot * IDS_PER_SLOT
    return [p for p in host.sandbox_processes() if low <= p[2][0] < low + IDS_PER_SLOT]


def crash_a_sandbox(sandboxd_binary, host):
    """Starts `sandboxd run` on a long program, SIGKILLs sandboxd itself (a crash: nothing of it
    cleans up) and returns the slot its cgroups were left under and those cgroups, once the
    sandbox's processes are gone (init follows its supervisor through PDEATHSIG)."""
    proc = subprocess.Popen([sandboxd_binary, "run", "--json", "--timeout", "60s", "-c",
                             "import time\ntime.sleep(60)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: sandbox_slot(proc.pid) is not None, 30, "the sandbox's init")
        slot = sandbox_slot(proc.pid)
        # Its program runs (pid 2 of the sandbox): the setup is complete.
        wait_until(lambda: len(slot_processes(host, slot)) >= 2, 30, "the sandbox's program")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wait_until(lambda: not slot_processes(host, slot), 30, "the crashed sandbox's processes")
    return str(slot), slot_dirs(host.cgroup_children(), str(slot))


def test_reconcile_removes_a_crashed_sandbox_and_kills_what_it_left(sandboxd_binary, host, run):
    slot, left = crash_a_sandbox(sandboxd_binary, host)
    assert left, "the crash left no cgroup to reconcile"
    # A process still in the orphan's cgroups, as a crash at a worse moment would leave one
    # (one that escaped its init's death): reconciliation must kill it.
    straggler = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        for path in left:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(straggler.pid))
        time.sleep(ORPHAN_MIN_AGE_S + 0.2)
        r = run("print('after the crash')")
        r.expect("ok", rc=0)
        assert "removed 1 orphaned sandbox" in r.cli_stderr, r.cli_stderr
        assert straggler.wait(timeout=10) == -signal.SIGKILL
        assert not slot_dirs(host.cgroup_children(), slot), host.cgroup_children()
    finally:
        if straggler.poll() is None:
            straggler.kill()
            straggler.wait()
        for path in slot_dirs(host.cgroup_children(), slot):
            os.rmdir(path)


def test_control_a_live_sandbox_is_not_reconciled(sandboxd_binary, host, run):
    # Control: the slot of a sandbox that is still running (its sandboxd holds the slot's lock)
    # is older than the orphan age too, and survives another process's reconciliation.
    before = set(host.cgroup_children())
    proc = subprocess.Popen([sandboxd_binary, "run", "--json", "-c",
                             "import time\ntime.sleep(%d)\nprint('finished')"
                             % (ORPHAN_MIN_AGE_S + 2)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    wait_until(lambda: set(host.cgroup_children()) - before, 30, "the sandbox's cgroups")
    time.sleep(ORPHAN_MIN_AGE_S + 0.2)
    r = run("print('beside a live sandbox')")
    r.expect("ok", rc=0)
    assert "orphaned" not in r.cli_stderr, r.cli_stderr
    out, err = proc.communicate(timeout=60)
    first = json.loads(out)
    assert first["status"] == "ok" and first["stdout"] == "finished\n", (first, err)
