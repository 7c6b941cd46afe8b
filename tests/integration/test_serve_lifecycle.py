"""The two processes and their lifecycle: the API process runs unprivileged (non-zero uid, no
capabilities at all, no_new_privs); SIGTERM drains (new executions and /health get 503 with
Retry-After at once, running ones finish within the grace period or end canceled, with a
record), exits 0 and leaves nothing behind; killing the engine makes /health fail, the running
execution ends canceled and recorded, and no sandbox remains; killing the API stops the engine,
whose worker keeps the result in the spool for the next start to record; the audit log and the
local tenant's token survive a restart."""

import http.server
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

import fleet_servers
import serve_helpers
from serve_helpers import (API_UID, FREE_TIER, SANDBOXD, SLOW, STANDARD_TENANTS, STANDARD_TIERS,
                           audit_rows, expect_json, expect_problem, kept_data_dir, make_token,
                           no_new_leaks, proc_status, render_config, running_server, sample,
                           spool_files)

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


@pytest.mark.own_store
def test_data_dir_belongs_to_the_api_uid(srv):
    info = os.stat(srv.data_dir)
    assert (info.st_uid, info.st_gid) == (API_UID, API_UID)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert os.path.exists(os.path.join(srv.data_dir, "audit.db"))


# --- SIGTERM --------------------------------------------------------------------------------------


def test_sigterm_mid_execution_cancels_at_the_grace_period_and_records_it():
    """A program still running when the grace period ends is canceled: its client gets its
    result (status canceled, why, usage so far), not "nothing was run", and its record says the
    same; the server exits 0 right after."""
    grace = 2
    with kept_data_dir() as data_dir:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir,
                            server={"shutdown_grace_s": grace}) as srv:
            thread, outcome = post_in_thread(srv, sleeping(6))
            srv.wait_for_running(1)
            t0 = time.monotonic()
            srv.signal(signal.SIGTERM)
            rc = srv.wait_exit(grace + 5 * SLOW)
            elapsed = time.monotonic() - t0
            assert rc == 0, f"exit code {rc} (None: still running)"
            thread.join(timeout=10 * SLOW)
            assert not thread.is_alive(), "the client is still waiting after the server exited"
            result = expect_json(outcome["response"], 200)
            print(f"SIGTERM: exited {rc} after {elapsed:.2f}s; the client got {result}")
            assert result["status"] == "canceled", result
            assert result["error"] and "slept" not in result["stdout"], result
            assert result["exit_code"] is None and result["signal"] is None, result
            # It ran until the grace period ended: its usage says so.
            assert result["usage"]["wall_ms"] >= (grace - 0.5) * 1000, result["usage"]
        rows = audit_rows(data_dir)
        assert set(rows) == {result["id"]}, rows
        row = rows[result["id"]]
        assert row["status"] == "canceled" and row["error"] == result["error"], row
        assert row["finished_at"] is not None and row["usage"] is not None, row


def test_sigterm_drains_new_requests_get_503_at_once():
    """During the grace period a new execution gets 503 shutting-down with Retry-After at once
    (not a hang and not a reset), /health says draining, reading a record still works, and the
    running execution finishes normally."""
    grace = 6
    with kept_data_dir() as data_dir:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir,
                            server={"shutdown_grace_s": grace}) as srv:
            earlier = srv.run("print('before')")
            thread, outcome = post_in_thread(srv, sleeping(2))
            srv.wait_for_running(1)
            srv.signal(signal.SIGTERM)
            time.sleep(0.3)
            t0 = time.monotonic()
            r = srv.post_execution({"language": "python", "code": "print('late')"})
            elapsed = time.monotonic() - t0
            body = expect_problem(r, 503, slug="shutting-down")
            assert elapsed < 1.0 * SLOW, f"the refusal took {elapsed:.2f}s"
            assert 1 <= int(r.headers["Retry-After"]) <= grace, r.headers
            health = srv.get("/health")
            assert "draining" in expect_problem(health, 503, slug="shutting-down")["detail"]
            assert expect_json(srv.get_execution(earlier["id"]), 200)["status"] == "ok"
            print(f"while draining: {r.status_code} in {elapsed:.3f}s {body}")
            thread.join(timeout=10 * SLOW)
            result = expect_json(outcome["response"], 200)
            assert result["status"] == "ok" and result["stdout"] == "slept\n", result
            assert srv.wait_exit(grace + 5 * SLOW) == 0
        # The refused one left no record; the two that ran did.
        assert set(audit_rows(data_dir)) == {earlier["id"], result["id"]}


def test_sigterm_under_load_answers_or_refuses_every_request():
    """16 clients keep posting while SIGTERM arrives: until the server exits, every request gets
    an answer: 200 (its execution ran: ok within the grace period), or 429/503 with a problem
    body and Retry-After; never a 500, a hang or a reset. Exit 0, one record per 200, nothing
    left."""
    tiers = {"wide": {**FREE_TIER, "max_concurrency": 8}}
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "wide"}, data_dir=data_dir,
                            server={"shutdown_grace_s": 2}) as srv:
            stop = threading.Event()
            outcomes = []
            lock = threading.Lock()
            body = {"language": "python", "code": "import time\ntime.sleep(0.2)\nprint(1)"}

            def client():
                session = requests.Session()
                while not stop.is_set():
                    # When it was sent, or for a connection error when that was seen.
                    at = time.monotonic()
                    try:
                        r = srv.post_execution(body, session=session, timeout=(2, 30 * SLOW))
                        outcome = r
                        if r.status_code != 200:
                            stop.wait(0.02)
                    except requests.ConnectionError as e:
                        outcome = e
                        at = time.monotonic()
                        stop.wait(0.05)
                    with lock:
                        outcomes.append((at, outcome))

            threads = [threading.Thread(target=client, daemon=True) for _ in range(16)]
            for t in threads:
                t.start()
            try:
                srv.wait_for_running(1)
                time.sleep(0.5)
                signaled = time.monotonic()
                srv.signal(signal.SIGTERM)
                rc = srv.wait_exit(2 + 10 * SLOW)
                exited = time.monotonic()
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=40 * SLOW)
            assert rc == 0, f"exit code {rc} (None: still running)"
            assert not any(t.is_alive() for t in threads), "a client hangs after the server exited"
        codes = {}
        for _, o in outcomes:
            key = o.status_code if isinstance(o, requests.Response) else type(o).__name__
            codes[key] = codes.get(key, 0) + 1
        drain = exited - signaled
        print(f"SIGTERM under load: {codes}; drained and exited {drain:.2f}s after SIGTERM")
        assert codes.get(200, 0) > 0, codes
        ok = set()
        for at, o in outcomes:
            if isinstance(o, requests.Response):
                if o.status_code == 200:
                    result = o.json()
                    assert result["status"] == "ok", o.text[:500]
                    ok.add(result["id"])
                else:
                    assert o.status_code in (429, 503), o.text[:500]
                    expect_problem(o, o.status_code)
            else:
                # Only once the server stops listening, at the very end of the drain (seen
                # then: a request sent just before SIGTERM may connect only after it).
                assert at > signaled, f"{o} before SIGTERM"
        assert set(audit_rows(data_dir)) == ok


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
    """kill -9 of the engine: /health fails from then on; the running execution's worker (now
    an orphan, PDEATHSIG) cancels its sandbox and still answers (canceled, recorded); the API
    process then exits; no sandbox remains; the next start serves."""
    with kept_data_dir() as data_dir:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir,
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
            result = expect_json(outcome["response"], 200)
            assert result["status"] == "canceled" and "slept" not in result["stdout"], result
            wait_until(lambda: gone(api), 10 * SLOW,
                       "the API process to exit after the engine died")
        rows = audit_rows(data_dir)
        assert set(rows) == {result["id"]} and rows[result["id"]]["status"] == "canceled", rows
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                            data_dir=data_dir) as again:
            assert again.run("print(5)")["stdout"] == "5\n"


def test_api_killed_its_result_is_recorded_at_the_next_start():
    """kill -9 of the API process: the engine cancels the running execution, whose worker
    cannot send its result and keeps it in the spool; the engine stops; the next start records
    it (status canceled, with usage) before serving, and empties the spool."""
    with kept_data_dir() as data_dir:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir,
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
            assert "error" in outcome, outcome  # its connection died with the API
            print(f"API killed: the main process exited with {rc}")
        rows = audit_rows(data_dir)
        assert len(rows) == 1, rows
        (execution_id, row), = rows.items()
        assert row["status"] == "running", row
        assert spool_files(data_dir) == [execution_id + ".result"]
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                            data_dir=data_dir) as again:
            record = expect_json(again.get_execution(execution_id), 200)
            assert record["status"] == "canceled", record
            # From the spool, not "interrupted": the worker's own outcome, usage and all.
            assert record["error"].startswith("canceled") and record["finished_at"], record
            assert record["usage"] is not None and record["timing"]["total_us"] > 0, record
            assert spool_files(data_dir) == []
            assert again.run("print(6)")["stdout"] == "6\n"


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
    prints its token (the API process makes it); that token gets in, and no other; it is kept in
    the data directory, so the next start prints and accepts the same one."""
    with kept_data_dir() as data_dir:
        tokens = []
        for _ in range(2):
            with running_server(tiers=STANDARD_TIERS, tenants={}, data_dir=data_dir) as server:
                with open(server.stdout_path) as f:
                    out = f.read()
                printed = re.search(r'tenant "local" \(tier (\w+)\)\n  token: (\S+) +\(kept in '
                                    r'(\S+)/local-token', out)
                assert printed, out
                assert printed.group(1) == next(iter(STANDARD_TIERS))
                assert printed.group(3) == data_dir
                body = {"language": "python", "code": "print(2+2)"}
                result = expect_json(server.post_execution(body, token=printed.group(2)), 200)
                assert result["status"] == "ok" and result["stdout"] == "4\n", result
                expect_problem(server.post_execution(body, token=printed.group(2) + "x"), 401)
                tokens.append(printed.group(2))
                # The playground's address, printed beside the curl line, answers the page.
                page = re.search(r"or open (http://\S+/) in a browser", out)
                assert page, out
                r = requests.get(page.group(1), timeout=10)
                assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
        assert tokens[0] == tokens[1]
        token_file = os.path.join(data_dir, "local-token")
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        assert os.stat(token_file).st_uid == 0


def test_token_lines_work_as_printed():
    """`sandboxd token NAME` prints a token and config lines (tier = default); pasted as they
    are into a config that declares other tiers, they load and the token gets in."""
    proc = subprocess.run([SANDBOXD, "token", "newcomer"], capture_output=True, text=True,
                          timeout=30 * SLOW, check=True)
    token = re.search(r"^token: (\S+)$", proc.stdout, re.M).group(1)
    lines = proc.stdout[proc.stdout.index("[tenant.newcomer]"):]
    assert "tier = default" in lines, proc.stdout
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        extra_config="\n" + lines) as srv:
        srv.tokens["newcomer"] = token
        result = expect_json(srv.post_execution({"language": "sh", "code": "echo in"},
                                                tenant="newcomer"), 200)
        assert result["stdout"] == "in\n", result


def test_sighup_reloads_tenants_and_tiers_without_a_restart():
    """SIGHUP to the server: the engine reads the config file again and the API process takes
    its tenants and tiers: an added tenant's token gets in, a removed one's no longer does, an
    execution running meanwhile finishes unharmed. A file that does not load changes nothing."""
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS) as srv:
        thread, outcome = post_in_thread(srv, sleeping(1.5))
        srv.wait_for_running(1)
        with open(srv.config_path, "w") as f:
            f.write(render_config(srv.port, srv.data_dir, srv.server_keys, STANDARD_TIERS,
                                  {"acme": "free", "newbie": "pro"}))
        srv.tokens["newbie"] = make_token("newbie")[0]
        body = {"language": "sh", "code": "echo welcome"}
        expect_problem(srv.post_execution(body, tenant="newbie"), 401)
        srv.signal(signal.SIGHUP)
        wait_until(lambda: srv.post_execution(body, tenant="newbie").status_code == 200,
                   5 * SLOW, "the added tenant to get in")
        expect_problem(srv.post_execution(body, tenant="globex"), 401)
        assert expect_json(srv.post_execution(body), 200)["stdout"] == "welcome\n"
        thread.join(timeout=10 * SLOW)
        result = expect_json(outcome["response"], 200)
        assert result["status"] == "ok" and result["stdout"] == "slept\n", result
        assert sample(srv.metrics(), "sandboxd_executions_total", tenant="newbie",
                      status="ok") >= 1

        with open(srv.config_path, "w") as f:
            f.write("[tier.broken]\nmax_memory_mb = lots\n")
        srv.signal(signal.SIGHUP)
        wait_until(lambda: "reload refused" in srv.stderr(), 5 * SLOW, "the refusal in the log")
        assert expect_json(srv.post_execution(body, tenant="newbie"), 200)["status"] == "ok"
        assert srv.get("/health").status_code == 200


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


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Another lane's server, as a test sees it through a port it took: healthy, and refusing
    every token of ours."""

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_a_port_taken_before_the_servers_bind_is_never_taken_for_its_own(monkeypatch):
    """make test runs two integration lanes side by side, each picking free ports: another
    lane's server may take a port between free_port() and the bind of the server a test starts
    on it (seen in CI: every request of the test then got 401). Here an impostor that answers
    /health holds the first port offered: the server comes up on the next one, and is ours."""
    impostor = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    taken = impostor.server_address[1]
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    offered = [taken]
    monkeypatch.setattr(serve_helpers, "free_port",
                        lambda: offered.pop() if offered else fleet_servers.free_port())
    try:
        with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS) as srv:
            assert srv.port != taken and not offered
            assert srv.run("print('ours')")["stdout"] == "ours\n"
    finally:
        impostor.shutdown()
        impostor.server_close()
