"""The two processes and their lifecycle: the API process runs unprivileged (non-zero uid, no
capabilities at all, no_new_privs); SIGTERM mid-execution stops the server with exit code 0
within the grace period and leaves nothing behind; killing the engine makes /health fail and
leaves no sandbox behind; killing the API stops the engine; the audit log survives a restart."""

import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from serve_helpers import (API_UID, FREE_TIER, SANDBOXD, SLOW, STANDARD_TENANTS, STANDARD_TIERS,
                           expect_json, expect_problem, no_new_leaks, proc_status,
                           running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

SLEEP_BODY = {"language": "python", "code": "import time\ntime.sleep({})\nprint('slept')",
              "limits": {"wall_ms": 10000}}


def sleeping(seconds):
    return {**SLEEP_BODY, "code": SLEEP_BODY["code"].format(seconds)}


def post_in_thread(srv, body):
    outcome = {}

    def go():
        try:
            outcome["response"] = srv.post_execution(body)
        except requests.RequestException as e:
            outcome["error"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, outcome


def gone(pid):
    """True when pid no longer runs (exited; a zombie counts as exited)."""
    status = proc_status(pid)
    return status is None or status.get("State", "").startswith("Z")


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS) as server:
        yield server


# --- privilege separation -------------------------------------------------------------------------


def test_api_process_is_unprivileged(srv):
    api = srv.api_pid()
    argv0 = open(f"/proc/{api}/cmdline", "rb").read().split(b"\0")[0]
    assert os.path.basename(argv0) == b"sandboxd-api"
    tasks = os.listdir(f"/proc/{api}/task")
    assert tasks
    # Credentials are per thread in Linux: every thread of the API must have dropped them.
    for tid in tasks:
        status = proc_status(f"{api}/task/{tid}")
        if status is None:
            continue  # a connection thread that just ended
        uids = [int(x) for x in status["Uid"].split()]
        gids = [int(x) for x in status["Gid"].split()]
        assert uids == [API_UID] * 4, (tid, status["Uid"])
        assert all(u != 0 for u in uids)
        assert gids == [API_UID] * 4, (tid, status["Gid"])
        assert status["Groups"] == "", (tid, status["Groups"])
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[cap], 16) == 0, (tid, cap, status[cap])
        assert status["NoNewPrivs"] == "1", (tid, status["NoNewPrivs"])


def test_engine_is_root_and_the_api_its_child(srv):
    engine = proc_status(srv.pid)
    assert [int(x) for x in engine["Uid"].split()] == [0, 0, 0, 0]
    api = proc_status(srv.api_pid())
    assert int(api["PPid"]) == srv.pid


def test_api_holds_no_file_of_the_engine(srv):
    """The API keeps only its sockets, its stdio and the audit store in the data dir: no cgroup
    directory, no /proc or other root-opened file crossed the exec."""
    api = srv.api_pid()
    fd_dir = f"/proc/{api}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except FileNotFoundError:
            continue
        allowed = (target.startswith(("socket:", "pipe:", "anon_inode:"))
                   or target in ("/dev/null", "/dev/urandom")
                   or target.startswith(srv.workdir + "/"))
        assert allowed, f"the API process holds fd {fd} -> {target}"


def test_data_dir_belongs_to_the_api_uid(srv):
    info = os.stat(srv.data_dir)
    assert (info.st_uid, info.st_gid) == (API_UID, API_UID)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert os.path.exists(os.path.join(srv.data_dir, "audit.db"))


# --- SIGTERM --------------------------------------------------------------------------------------


def test_sigterm_mid_execution_exits_0_and_leaves_nothing():
    grace = 2
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"shutdown_grace_s": grace}) as srv:
        thread, outcome = post_in_thread(srv, sleeping(5))
        srv.wait_for_running(1)
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.wait_exit(grace + 5 * SLOW)
        elapsed = time.monotonic() - t0
        assert rc is not None, f"still running {grace + 5 * SLOW}s after SIGTERM"
        assert rc == 0, f"exit code {rc}"
        thread.join(timeout=10 * SLOW)
        assert not thread.is_alive(), "the client is still waiting after the server exited"
        if "response" in outcome:
            r = outcome["response"]
            if r.status_code == 200:
                result = r.json()
                # Canceled, not allowed to run its 5 s past the 2 s grace period.
                assert result["status"] != "ok" and "slept" not in result["stdout"], result
                assert result["status"] == "internal_error", result
            else:
                expect_problem(r, 503)
        else:
            assert isinstance(outcome["error"], requests.ConnectionError), outcome
        print(f"SIGTERM: exited {rc} after {elapsed:.2f}s; client got "
              f"{outcome.get('response') and outcome['response'].text[:200] or outcome}")
        # running_server checks that nothing is left.


def test_sigterm_under_load_answers_or_refuses_every_request():
    """16 clients keep posting while SIGTERM arrives: every request gets an answer (200, 429,
    503) or a refused/closed connection, never a 500 or a hang; exit 0; nothing left."""
    tiers = {"wide": {**FREE_TIER, "max_concurrency": 8}}
    with running_server(tiers=tiers, tenants={"acme": "wide"},
                        server={"shutdown_grace_s": 2}) as srv:
        stop = threading.Event()
        outcomes = []
        lock = threading.Lock()
        body = {"language": "python", "code": "import time\ntime.sleep(0.2)\nprint(1)"}

        def client():
            session = requests.Session()
            while not stop.is_set():
                try:
                    r = srv.post_execution(body, session=session, timeout=(2, 30 * SLOW))
                    outcome = r
                    if r.status_code == 429:
                        stop.wait(0.02)
                except requests.ConnectionError as e:
                    outcome = e
                    stop.wait(0.05)
                with lock:
                    outcomes.append(outcome)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(16)]
        for t in threads:
            t.start()
        try:
            srv.wait_for_running(1)
            time.sleep(0.5)
            srv.signal(signal.SIGTERM)
            rc = srv.wait_exit(2 + 10 * SLOW)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=40 * SLOW)
        assert rc == 0, f"exit code {rc} (None: still running)"
        assert not any(t.is_alive() for t in threads), "a client hangs after the server exited"
        codes = {}
        for o in outcomes:
            key = o.status_code if isinstance(o, requests.Response) else type(o).__name__
            codes[key] = codes.get(key, 0) + 1
        print(f"SIGTERM under load: {codes}")
        assert codes.get(200, 0) > 0, codes
        for o in outcomes:
            if isinstance(o, requests.Response):
                if o.status_code == 200:
                    assert o.json()["status"] in ("ok", "internal_error"), o.text[:500]
                else:
                    assert o.status_code in (429, 503), o.text[:500]
                    expect_problem(o, o.status_code)


def test_sigterm_to_the_api_stops_the_whole_server_with_0():
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"shutdown_grace_s": 2}) as srv:
        api = srv.api_pid()
        os.kill(api, signal.SIGTERM)
        rc = srv.wait_exit(2 + 10 * SLOW)
        assert rc == 0, f"exit code {rc} (None: still running)"
        wait_until(lambda: gone(api), 5 * SLOW, "the API process to exit")


# --- losing a process -----------------------------------------------------------------------------


def test_engine_killed_health_fails_and_no_sandbox_remains():
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"shutdown_grace_s": 2}) as srv:
        srv.expected_rc = -signal.SIGKILL
        thread, outcome = post_in_thread(srv, sleeping(8))
        srv.wait_for_running(1)
        api = srv.api_pid()
        srv.signal(signal.SIGKILL)
        assert srv.wait_exit(10) == -signal.SIGKILL

        # From now on /health must never say the engine is up.
        for _ in range(10):
            try:
                r = srv.get("/health", timeout=(2, 10 * SLOW))
            except requests.ConnectionError:
                break  # the API is gone already: that is a failed health check too
            expect_problem(r, 503)
            time.sleep(0.05)

        thread.join(timeout=15 * SLOW)
        assert not thread.is_alive(), "the running request hangs after the engine died"
        if "response" in outcome:
            r = outcome["response"]
            if r.status_code == 200:
                # The orphaned worker cancels its sandbox (PDEATHSIG) and still reports.
                result = r.json()
                assert result["status"] == "internal_error" and "slept" not in result["stdout"], \
                    result
            else:
                expect_problem(r, 503)
        else:
            assert isinstance(outcome["error"], requests.ConnectionError), outcome
        # The API notices and exits; running_server then waits for every process and cgroup of
        # the server (the orphaned worker kills its sandbox on PDEATHSIG) to be gone.
        wait_until(lambda: gone(api), 10 * SLOW, "the API process to exit after the engine died")


def test_api_killed_engine_stops_and_no_sandbox_remains():
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"shutdown_grace_s": 2}) as srv:
        srv.expected_rc = None  # how a supervisor should read an API crash is not specified
        thread, outcome = post_in_thread(srv, sleeping(8))
        srv.wait_for_running(1)
        api = srv.api_pid()
        os.kill(api, signal.SIGKILL)
        rc = srv.wait_exit(2 + 10 * SLOW)
        assert rc is not None, "the engine kept running after its API process died"
        thread.join(timeout=15 * SLOW)
        assert not thread.is_alive()
        assert "error" in outcome or outcome["response"].status_code >= 500, outcome
        print(f"API killed: the main process exited with {rc}")


# --- the audit store across restarts --------------------------------------------------------------


def test_audit_records_survive_a_restart():
    base = tempfile.mkdtemp(prefix="serve-test-data-")
    os.chmod(base, 0o711)
    data_dir = os.path.join(base, "data")
    try:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                            data_dir=data_dir) as first:
            result = first.run("print('remember me')")
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                            data_dir=data_dir) as second:
            record = expect_json(second.get_execution(result["id"]), 200)
            assert record["status"] == "ok" and record["usage"] == result["usage"]
            expect_problem(second.get_execution(result["id"], tenant="globex"), 404)
            newer = second.run("print('new')")
            assert newer["id"] != result["id"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_no_tenant_configured_creates_local_with_a_printed_token():
    """make run's case: with no tenant configured, serve creates "local" in the first tier and
    prints its token once (the API process makes it); that token gets in, and no other."""
    with running_server(tiers=STANDARD_TIERS, tenants={}) as server:
        with open(server.stdout_path) as f:
            out = f.read()
        printed = re.search(r'created tenant "local" \(tier (\w+)\)\n  token: (\S+)\n', out)
        assert printed, out
        assert printed.group(1) == next(iter(STANDARD_TIERS))
        body = {"language": "python", "code": "print(2+2)"}
        result = expect_json(server.post_execution(body, token=printed.group(2)), 200)
        assert result["status"] == "ok" and result["stdout"] == "4\n", result
        expect_problem(server.post_execution(body, token=printed.group(2) + "x"), 401)


def test_bad_config_is_refused_before_anything_starts(tmp_path):
    """A config error names file:line and the key, and the server does not start."""
    config = tmp_path / "bad.ini"
    config.write_text("[server]\nlisten = localhost:8080\n")
    proc = subprocess.run([SANDBOXD, "serve", "--config", str(config)], capture_output=True,
                          text=True, timeout=30 * SLOW, check=False)
    assert proc.returncode != 0
    assert f"{config}:2" in proc.stderr and "listen" in proc.stderr, proc.stderr
    config.write_text("[server]\nlisten = 127.0.0.1:1\n[tier.x]\nmax_memory = 5\n")
    proc = subprocess.run([SANDBOXD, "serve", "--config", str(config)], capture_output=True,
                          text=True, timeout=30 * SLOW, check=False)
    assert proc.returncode != 0
    assert f"{config}:4" in proc.stderr and "max_memory" in proc.stderr, proc.stderr
