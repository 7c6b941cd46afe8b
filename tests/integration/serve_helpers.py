"""Helpers for the `sandboxd serve` integration tests (test_serve_*.py).

Each test module starts a REAL server (the engine as root plus the unprivileged sandboxd-api it
execs) on 127.0.0.1 with a free port, a generated INI config and a data dir in its own temp dir,
and talks to it over HTTP with python3-requests. Stopping a server (always, in a finally) sends
SIGTERM to the main pid, requires exit code 0, and then requires that the server left nothing
behind: no process it made (the API, workers, sandboxes: this test process is their subreaper,
so whatever outlives the server is re-parented here and found for sure) and no sandbox cgroup
(a directory below a `sandboxd` parent in any hierarchy).

    with running_server(tiers={...}, tenants={"acme": "free"}, server={...}) as srv:
        r = srv.post_execution({"language": "python", "code": "print(2+2)"})
        expect_problem(srv.post_execution({"language": 5}), 400, field="language")

The sandboxd-api program is the sibling of $SANDBOXD (the server finds it the same way), so the
ASan pass (SANDBOXD=/abs/build-asan/sandboxd) tests both sanitized programs.
"""

import collections
import contextlib
import ctypes
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time

import pytest
import requests

import conftest
from fleet_servers import ADDRESS_IN_USE, free_port, listener_pids  # noqa: F401 (test_fleet)

SANDBOXD = conftest.SANDBOXD
SANITIZED = conftest.SANITIZED
SANDBOXD_API = os.path.join(os.path.dirname(os.path.abspath(SANDBOXD)), "sandboxd-api")

# config.c: the default api_uid; the tests set it explicitly to this value.
API_UID = 1_999_999_999

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://sandboxd.dev/problems/"
PROBLEM_SLUGS = {
    400: "invalid-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    421: "misdirected",
    422: "environment-failed",
    429: "quota-exceeded",
    500: "internal",
    503: "engine-unavailable",
}
# problem.h: the other classes of 503 (each with Retry-After).
PROBLEM_503_SLUGS = {"engine-unavailable", "at-capacity", "shutting-down", "store-unavailable"}

# Seconds: ASan makes every sandboxd program several times slower (not the sandboxed program).
SLOW = 3 if SANITIZED else 1
HTTP_TIMEOUT = (5, 60 * SLOW)  # (connect, read) for every request
START_TIMEOUT = 30 * SLOW
LEAK_SETTLE_S = 10 * SLOW

# Shared by every server of the session: `sandboxd token NAME` once per name.
_token_cache = {}


def make_token(name):
    """(token, sha256 hex) from `sandboxd token NAME`."""
    if name not in _token_cache:
        proc = subprocess.run([SANDBOXD, "token", name], capture_output=True, text=True,
                              timeout=30 * SLOW, check=False)
        assert proc.returncode == 0, f"sandboxd token {name}: rc {proc.returncode}: {proc.stderr}"
        token = re.search(r"^token: (sbx_[A-Za-z0-9_-]{43})$", proc.stdout, re.M)
        digest = re.search(r"^token_sha256 = ([0-9a-f]{64})$", proc.stdout, re.M)
        assert token and digest, f"sandboxd token printed an unexpected text:\n{proc.stdout}"
        assert f"[tenant.{name}]" in proc.stdout, proc.stdout
        _token_cache[name] = (token.group(1), digest.group(1))
    return _token_cache[name]


# --- host probes ---------------------------------------------------------------------------------


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def proc_status(pid):
    """/proc/PID/status as a dict of str, or None when the process is gone."""
    try:
        text = _read(f"/proc/{pid}/status")
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def proc_stat_fields(pid):
    """(state, ppid, session) from /proc/PID/stat, or None."""
    try:
        text = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[3])


def describe_process(pid):
    status = proc_status(pid)
    if status is None:
        return "gone"
    return f"{status.get('Name', '?')} uids={status.get('Uid', '?').split()} " \
           f"state={status.get('State', '?')}"


def children_of(pid):
    """pids whose parent is pid."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat_fields(entry)
            if stat is not None and stat[1] == pid:
                found.append(int(entry))
    return sorted(found)


def cmdline(pid):
    try:
        return _read(f"/proc/{pid}/cmdline", "rb").split(b"\0")
    except OSError:
        return []


# --- what a server leaves behind -----------------------------------------------------------------
#
# While any server of ours runs, this test process is a child subreaper: a process that a server
# leaves behind when it exits (a worker, a sandbox, the API) is re-parented to us rather than to
# init, so it is ours beyond doubt, even when other sandboxd instances (someone's `sandboxd run`)
# share the machine. Sandbox cgroups are global; a new one that outlives the server counts as
# ours when it is empty or holds a process of ours.

_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)
_live_servers = []  # Server objects started and not yet stopped
# The pids of servers the tests start beside sandboxd (PostgreSQL, HAProxy): our children, but
# no exited sandboxd's orphans. Their owner stops them by pid.
helper_pids = set()


def _set_subreaper(on):
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def adopted_orphans():
    """Our children that are no live server's main process: what exited servers left."""
    mains = {srv.proc.pid for srv in _live_servers if srv.proc is not None}
    return [pid for pid in children_of(os.getpid()) if pid not in mains | helper_pids]


def _reap(pid):
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def collect_orphans(settle_s):
    """Waits up to settle_s for every adopted orphan to exit, reaping them; returns {pid:
    description} of those still running then."""
    deadline = time.monotonic() + settle_s
    while True:
        running = {}
        for pid in adopted_orphans():
            stat = proc_stat_fields(pid)
            if stat is None:
                continue
            if stat[0] in ("Z", "X"):
                _reap(pid)
                continue
            running[pid] = describe_process(pid)
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


def kill_orphans():
    """SIGKILLs and reaps every adopted orphan (ours beyond doubt) until none is left, so that
    one leak does not fail the tests after it."""
    for _ in range(200):
        pids = adopted_orphans()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        for pid in pids:
            _reap(pid)


def _descends_from_us(pid):
    me = os.getpid()
    for _ in range(64):
        stat = proc_stat_fields(pid)
        if stat is None or stat[1] <= 1:
            return False
        if stat[1] == me:
            return True
        pid = stat[1]
    return False


def _cgroup_pids(path):
    pids = []
    for dirpath, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            pids += [int(x) for x in _read(os.path.join(dirpath, "cgroup.procs")).split()]
    return pids


def leftover_cgroups(before, settle_s):
    """Sandbox cgroup dirs created since `before` (a set) that are still there after settle_s
    and are ours: empty, or holding a process of ours. (A dir busy with only other processes, or
    whose slot a live sandboxd holds, is another sandboxd's live sandbox: a concurrent run's.)"""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for path in sorted(set(conftest.cgroup_children()) - before):
            if "/sandboxd/" in path and conftest.leak_audit.slot_held(
                    path.split("/sandboxd/", 1)[1].split("/")[0]):
                continue
            pids = _cgroup_pids(path)
            if not pids or any(_descends_from_us(p) for p in pids):
                found.append(path)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def no_new_leaks():
    """Replaces conftest's per-test leak check in the serve modules (they import this name).

    While a server runs, its warm pool starts and ends sandboxes (processes, cgroups) in the
    background, so they cannot be compared test by test; they are checked when each server stops
    (Server.stop: every process it made must be gone, and every cgroup). Per test: no mount."""
    before = set(conftest.sandboxd_mounts())
    yield
    new = sorted(set(conftest.sandboxd_mounts()) - before)
    if new:
        pytest.fail(f"this test left sandboxd mounts behind: {new}")


# --- the server ----------------------------------------------------------------------------------


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: if pytest dies, the server gets SIGTERM and cleans up.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def render_config(port, data_dir, server, tiers, tenants, pools=None, extra=""):
    """The INI text. server: extra [server] keys; tiers: {name: {key: value}}; tenants:
    {name: tier} or {name: {"tier": tier, key: value}} (more keys of the tenant's section);
    pools: {language: {key: value}} for [pool.LANGUAGE] sections; extra: text appended as it
    is."""
    lines = [
        "; generated by tests/integration/serve_helpers.py",
        "[server]",
        f"listen = 127.0.0.1:{port}",
        f"data_dir = {data_dir}",
        f"api_uid = {API_UID}",
    ]
    lines += [f"{key} = {value}" for key, value in server.items()]
    for name, keys in tiers.items():
        lines += ["", f"[tier.{name}]"]
        lines += [f"{key} = {value}" for key, value in keys.items()]
    for language, keys in (pools or {}).items():
        lines += ["", f"[pool.{language}]"]
        lines += [f"{key} = {value}" for key, value in keys.items()]
    for name, tier in tenants.items():
        keys = dict(tier) if isinstance(tier, dict) else {"tier": tier}
        lines += ["", f"[tenant.{name}]", f"token_sha256 = {make_token(name)[1]}"]
        lines += [f"{key} = {value}" for key, value in keys.items()]
    return "\n".join(lines) + "\n" + extra


# The audit store of every Server: "" (SANDBOXD_TEST_STORE unset), each node's own SQLite file in
# its data directory; "postgresql", one PostgreSQL cluster for the whole session (conftest's
# shared_store sets shared_postgres), a database per data directory, so that a server started
# again on the same data directory finds its records and recovers its own, as with SQLite. The
# same tests then check both implementations of the store.
TEST_STORE = os.environ.get("SANDBOXD_TEST_STORE", "")
shared_postgres = None


def _database_of(data_dir):
    return "sbx_" + hashlib.sha256(data_dir.encode()).hexdigest()[:16]


def _shared_store_config(data_dir):
    """The [store] section for data_dir's database (made if new), or "" without one."""
    if shared_postgres is None:
        return ""
    name = _database_of(data_dir)
    if shared_postgres.sql(f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "0":
        shared_postgres.sql(f"CREATE DATABASE {name}")
    return f"\n[store]\nurl = {shared_postgres.url_of(name)}\nnode = {name}\n"


class Server:
    """One running `sandboxd serve`. Use running_server() rather than this directly."""

    def __init__(self, *, tiers, tenants, server=None, data_dir=None, pools=None, env=None,
                 extra_config=""):
        self.env = dict(os.environ, **(env or {}))
        self.extra_config = extra_config
        self.tiers = tiers
        self.pools = pools
        self.tenants = dict(tenants)
        self.server_keys = dict(server or {})
        self.grace_s = int(self.server_keys.get("shutdown_grace_s", 10))
        self.tokens = {name: make_token(name)[0] for name in self.tenants}
        self.workdir = tempfile.mkdtemp(prefix="serve-test-")
        # The API process (uid API_UID) must reach data_dir inside this dir after dropping root.
        os.chmod(self.workdir, 0o711)
        self.data_dir = data_dir or os.path.join(self.workdir, "data")
        if "[store]" not in self.extra_config:
            self.extra_config += _shared_store_config(self.data_dir)
        self.config_path = os.path.join(self.workdir, "sandboxd.ini")
        self.stdout_path = os.path.join(self.workdir, "stdout.log")
        self.stderr_path = os.path.join(self.workdir, "stderr.log")
        self.proc = None
        self.port = None
        self.base = None
        self.cgroups_before = set()
        self.returncode = None
        # What running_server() requires of the main process's exit (None: anything).
        self.expected_rc = 0

    # -- lifecycle --

    def start(self):
        assert os.access(SANDBOXD_API, os.X_OK), f"no sandboxd-api next to {SANDBOXD}"
        self.cgroups_before = set(conftest.cgroup_children())
        if not _live_servers:
            _set_subreaper(True)
        _live_servers.append(self)
        for _attempt in range(8):
            self.port = free_port()
            with open(self.config_path, "w") as f:
                f.write(render_config(self.port, self.data_dir, self.server_keys, self.tiers,
                                      self.tenants, self.pools, self.extra_config))
            self.base = f"http://127.0.0.1:{self.port}"
            with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(
                    [SANDBOXD, "serve", "--config", self.config_path],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.env,
                    start_new_session=True, preexec_fn=_die_with_parent)
            if self._wait_healthy():
                return self
            rc = self.proc.wait(timeout=10 * SLOW)
            self.proc = None
            stderr = self.stderr()
            if ADDRESS_IN_USE in stderr:
                continue  # someone took the port between our probe and the server's bind
            raise AssertionError(f"sandboxd serve exited with {rc} before /health answered:\n"
                                 f"{stderr[-4000:]}")
        raise AssertionError("no free port after 8 attempts")

    def _wait_healthy(self):
        """True once /health answers 200; False when the process exited first.

        Only after the server has said it listens (it bound the port then): make test runs two
        integration stages side by side, and the other stage's server may have taken the port
        between free_port() and this one's bind. Its /health would answer 200 too, and every
        request after would be refused 401 with the other stage's tokens."""
        deadline = time.monotonic() + START_TIMEOUT
        listening = f"serve: listening on 127.0.0.1:{self.port} "
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if listening not in self.stderr():
                time.sleep(0.02)
                continue
            try:
                r = requests.get(self.url("/health"), timeout=(1, 5 * SLOW))
                if r.status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self._kill_group()
        raise AssertionError(f"sandboxd serve did not answer /health within {START_TIMEOUT}s:\n"
                             f"{self.stderr()[-4000:]}")

    def _kill_group(self):
        """Last resort: the server's whole session (it is a session leader we created)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill_node(self):
        """kill -9 of the whole node, its API process and its engine (the main process), as a
        power cut would end them: both are stopped first, so that neither sees the other die
        and reacts (the engine ends cleanly when its API is gone); the main process's exit is
        then -SIGKILL."""
        api = self.api_pid()
        for pid in (api, self.proc.pid):
            os.kill(pid, signal.SIGSTOP)
        for pid in (api, self.proc.pid):
            os.kill(pid, signal.SIGKILL)
        self.expected_rc = -signal.SIGKILL
        # Until the API process's exit has closed its listening socket, a connection is still
        # taken into its backlog, then reset.
        # (A listener of another process is another stage's server, which took the port since.)
        deadline = time.monotonic() + 10 * SLOW
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) != 0:
                    break
            if listener_pids(self.port) - {api, self.proc.pid}:
                break
            assert time.monotonic() < deadline, f"port {self.port} still listens after kill -9"
            time.sleep(0.02)

    def wait_exit(self, timeout):
        """The main process's exit code, or None if it is still running after timeout s."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self, *, expect_rc=0, check=True):
        """SIGTERM (unless already exited), wait, then the leak check. Raises AssertionError on a
        wrong exit code, a hang, a sanitizer report or anything left behind (only if check)."""
        problems = []
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.signal(signal.SIGTERM)
            # The grace period, the API's wait for in-flight requests, and the engine's SIGKILL
            # wait all fit well inside this.
            limit = self.grace_s + 15 * SLOW
            rc = self.wait_exit(limit)
            if rc is None:
                self._kill_group()
                problems.append(f"the server did not exit within {limit}s of SIGTERM")
            elif expect_rc is not None and rc != expect_rc:
                problems.append(f"the server exited with {rc}, want {expect_rc}")
        if self in _live_servers:
            _live_servers.remove(self)
        running = collect_orphans(LEAK_SETTLE_S)
        if running:
            problems.append(f"processes still running after the server exited: {running}")
            kill_orphans()
        cgroups = leftover_cgroups(self.cgroups_before, LEAK_SETTLE_S)
        if cgroups:
            problems.append(f"sandbox cgroups left after the server exited: {cgroups}")
        if not _live_servers:
            _set_subreaper(False)
        stderr = self.stderr()
        for marker in conftest.SANITIZER_MARKERS:
            if marker in stderr:
                problems.append(f"sanitizer report in the server's stderr ({marker})")
                break
        shutil.rmtree(self.workdir, ignore_errors=True)
        if problems and check:
            raise AssertionError("; ".join(problems) + f"\nserver stderr (tail):\n{stderr[-6000:]}")
        return problems

    def started_executions(self):
        """(taken, said) from the server's log (it must run with SANDBOXD_LOG=debug): taken, the
        execution ids a worker took, each of which it answers (it runs it, or says canceled when
        the engine died first): the ground truth every audit record is checked against; said,
        those the engine said it was starting, before it forks or hands them to a pool entry (so
        that a kill right after cannot leave a running one unsaid), less those it then said were
        not started: a bound on the records, as an engine killed between its word and the fork
        starts nothing."""
        log = self.stderr()
        said = collections.Counter(
            re.findall(r'msg="engine: execution ([0-9a-f]{32}) starting', log))
        said.subtract(re.findall(r'msg="engine: execution ([0-9a-f]{32}) not started', log))
        taken = set(re.findall(r'msg="worker: execution ([0-9a-f]{32}) taken', log))
        return taken, {execution for execution, count in said.items() if count > 0}

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # -- processes --

    @property
    def pid(self):
        return self.proc.pid

    def api_pid(self):
        """The sandboxd-api child of the main process."""
        for child in children_of(self.proc.pid):
            argv = cmdline(child)
            if argv and os.path.basename(argv[0]) == b"sandboxd-api":
                return child
        raise AssertionError(f"no sandboxd-api child of {self.proc.pid}: "
                             f"{[(c, cmdline(c)) for c in children_of(self.proc.pid)]}")

    # -- HTTP --

    def url(self, path):
        return self.base + path

    def headers(self, tenant="acme", token=None, content_type="application/json", extra=None):
        h = {}
        if token is None and tenant is not None:
            token = self.tokens[tenant]
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if content_type is not None:
            h["Content-Type"] = content_type
        h.update(extra or {})
        return h

    def request(self, method, path, *, session=None, timeout=HTTP_TIMEOUT, **kwargs):
        client = session or requests
        return client.request(method, self.url(path), timeout=timeout, **kwargs)

    def post_execution(self, body, *, tenant="acme", token=None, content_type="application/json",
                       headers=None, session=None, timeout=HTTP_TIMEOUT):
        """POST /v1/executions. body: a dict/list (sent as JSON), or str/bytes (sent as is)."""
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        return self.request("POST", "/v1/executions", session=session, timeout=timeout, data=data,
                            headers=self.headers(tenant, token, content_type, headers))

    def run(self, code, language="python", *, tenant="acme", **fields):
        """POST an execution that must answer 200; returns the result dict. code None: files."""
        body = {"language": language, **fields}
        if code is not None:
            body["code"] = code
        r = self.post_execution(body, tenant=tenant)
        assert r.status_code == 200, f"want 200, got {r.status_code}: {r.text[:2000]}"
        return r.json()

    def get_execution(self, execution_id, *, tenant="acme", token=None):
        return self.request("GET", f"/v1/executions/{execution_id}",
                            headers=self.headers(tenant, token, None))

    def get(self, path, **kwargs):
        return self.request("GET", path, **kwargs)

    def metrics(self):
        r = self.get("/metrics")
        assert r.status_code == 200, r.text[:2000]
        return parse_metrics(r.text)

    def running_executions(self):
        """Executions the engine is running now (from /metrics): its workers
        (sandboxd_sandboxes_alive) minus the warm pool entries that are not in use."""
        m = self.metrics()
        alive = sample(m, "sandboxd_sandboxes_alive")
        spare = sample(m, "sandboxd_pool_entries", state="idle") + \
            sample(m, "sandboxd_pool_entries", state="starting")
        return alive - spare

    def wait_for_running(self, at_least, timeout=10 * SLOW):
        """Waits until the engine runs at least that many executions."""
        deadline = time.monotonic() + timeout
        running = None
        while time.monotonic() < deadline:
            running = self.running_executions()
            if running >= at_least:
                return running
            time.sleep(0.05)
        raise AssertionError(f"the engine runs {running} executions, want >= {at_least}")

    def wait_idle(self, timeout=LEAK_SETTLE_S):
        """Waits until the engine runs no execution (every worker of a finished request gone)."""
        deadline = time.monotonic() + timeout
        while True:
            running = self.running_executions()
            if running == 0:
                return
            assert time.monotonic() < deadline, f"{running} executions still running"
            time.sleep(0.05)

    def wait_pool_ready(self, timeout=10 * SLOW, idle=1):
        """Waits until the warm pools have idle entries (idle of them: one per pool of a server
        with several, each of one entry), so that the next Python request (one at a time) takes
        the pooled path."""
        deadline = time.monotonic() + timeout
        while sample(self.metrics(), "sandboxd_pool_entries", state="idle") < idle:
            assert time.monotonic() < deadline, "the warm pool never had an idle entry"
            time.sleep(0.05)

    def check_between_tests(self):
        """The module's server is still up and healthy, and no execution of the test runs on."""
        assert self.proc.poll() is None, \
            f"the server exited with {self.proc.returncode}:\n{self.stderr()[-4000:]}"
        r = self.get("/health")
        assert r.status_code == 200, f"/health: {r.status_code} {r.text[:500]}"
        self.wait_idle()


@contextlib.contextmanager
def running_server(*, tiers, tenants, server=None, data_dir=None, pools=None, env=None,
                   extra_config=""):
    """A started Server, stopped and leak-checked on exit (its exit code must be
    srv.expected_rc, 0 unless the test changes it). env: variables added to the server's
    environment. When the body raised, the stop still happens but its own complaints do not
    hide the original error."""
    srv = Server(tiers=tiers, tenants=tenants, server=server, data_dir=data_dir, pools=pools,
                 env=env, extra_config=extra_config)
    try:
        srv.start()
    except BaseException:
        srv.stop(check=False)
        raise
    try:
        yield srv
    except BaseException:
        srv.stop(check=False)
        raise
    srv.stop(expect_rc=srv.expected_rc)


@contextlib.contextmanager
def kept_data_dir():
    """A data directory that outlives one server (for restarts), removed at the end."""
    base = tempfile.mkdtemp(prefix="serve-test-data-")
    os.chmod(base, 0o711)  # the API process (API_UID) must reach data/ inside
    try:
        yield os.path.join(base, "data")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def audit_rows(data_dir):
    """{id: row dict} of every audit record in data_dir's store, read directly (as root; a
    running server's WAL is read too; in PostgreSQL, data_dir's database, with the same columns
    and values)."""
    if shared_postgres is not None:
        text = shared_postgres.sql("SELECT coalesce(json_agg(e), '[]') FROM executions e",
                                   database=_database_of(data_dir))
        rows = {}
        for row in json.loads(text):
            del row["rowid"]
            for output in ("stdout", "stderr"):
                if row[output] is not None:
                    row[output] = bytes.fromhex(row[output].removeprefix("\\x"))
            rows[row["id"]] = row
        return rows
    db = sqlite3.connect(f"file:{os.path.join(data_dir, 'audit.db')}?mode=ro", uri=True)
    try:
        db.row_factory = sqlite3.Row
        return {row["id"]: dict(row) for row in db.execute("SELECT * FROM executions")}
    finally:
        db.close()


def spool_files(data_dir):
    """The results in the engine's spool (protocol/spool.h)."""
    spool = os.path.join(data_dir, "spool")
    return sorted(os.listdir(spool)) if os.path.isdir(spool) else []


# --- assertions ----------------------------------------------------------------------------------


def expect_problem(response, status, *, field=None, fields=None, slug=None):
    """Asserts an RFC 9457 problem response: status code, Content-Type, the body's members, the
    type URI for the status (slug: the class, for a status with several; a 503 must be one of
    them and carry Retry-After of at least 1 s), and (optionally) that errors[] names `field` (or
    each of `fields`). Returns the parsed body."""
    context = f"{response.request.method} {response.request.url} -> {response.status_code}: " \
              f"{response.text[:1500]}"
    assert response.status_code == status, f"want {status}; {context}"
    content_type = response.headers.get("Content-Type", "")
    assert content_type.split(";")[0].strip() == PROBLEM_CONTENT_TYPE, \
        f"Content-Type {content_type!r}; {context}"
    body = response.json()
    assert isinstance(body, dict), context
    # execution_id: on a 503 for an execution that may have run (its record says what is known);
    # end_reason: on the 404 of a session that ended; error and reset_status: on the 422 of an RL
    # environment whose first reset did not succeed; rejected: on the 400 of a batch's list none of
    # whose executions is valid; message (Piston's) and error (Judge0's): the detail again, on a
    # drop-in API's refusal, where its clients read it; node and node_alive_until: on a fleet's
    # 404 node-gone and 421 misdirected.
    extensions = {"execution_id", "end_reason", "error", "reset_status", "rejected", "message",
                  "node", "node_alive_until"}
    assert set(body) - extensions == {"type", "title", "status", "detail", "errors"}, context
    if status == 503:
        assert body["type"] in {PROBLEM_TYPE_BASE + s for s in PROBLEM_503_SLUGS}, context
        retry_after = response.headers.get("Retry-After", "")
        assert retry_after.isdigit() and int(retry_after) >= 1, f"Retry-After; {context}"
    if slug is not None or status != 503:
        assert body["type"] == PROBLEM_TYPE_BASE + (slug or PROBLEM_SLUGS[status]), context
    assert body["status"] == status, context
    assert isinstance(body["title"], str) and body["title"], context
    assert isinstance(body["detail"], str) and body["detail"], context
    assert isinstance(body["errors"], list), context
    for error in body["errors"]:
        assert set(error) == {"field", "message"}, context
        assert isinstance(error["field"], str) and isinstance(error["message"], str), context
        assert error["message"], context
    named = [e["field"] for e in body["errors"]]
    for want in ([field] if field is not None else []) + list(fields or []):
        assert want in named, f"errors[] does not name {want!r} (names {named}); {context}"
    return body


def expect_json(response, status=200):
    context = f"{response.request.method} {response.request.url} -> {response.status_code}: " \
              f"{response.text[:2000]}"
    assert response.status_code == status, f"want {status}; {context}"
    content_type = response.headers.get("Content-Type", "")
    assert content_type.split(";")[0].strip() == "application/json", \
        f"Content-Type {content_type!r}; {context}"
    return response.json()


# --- Prometheus text format ----------------------------------------------------------------------

_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})?'
    r' ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))(?: -?[0-9]+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_metrics(text, types=None):
    """Parses exposition format 0.0.4 strictly (every line must be a HELP, TYPE, comment or
    sample line) into {(name, ((label, value), ...sorted)): float}. types, when a dict, gets
    {family: type} from the TYPE lines."""
    samples = {}
    assert text.endswith("\n"), "the exposition must end with a newline"
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            assert len(parts) == 4 and parts[3] in (
                "counter", "gauge", "histogram", "summary", "untyped"), line
            if types is not None:
                types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        key = (m.group(1), labels)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(m.group(3))
    return samples


def sample(samples, name, **labels):
    """A sample's value, 0 when the series is absent."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# --- the tiers most modules use ------------------------------------------------------------------

# issue 3's example tier, with a CPU budget too large to matter outside the budget tests.
FREE_TIER = {
    "max_memory_mb": 256,
    "max_wall_ms": 10000,
    "max_concurrency": 2,
    "cpu_budget_ms": 600000,
    "cpu_window_s": 60,
    "languages": "python, bash, sh",
}
# Higher ceilings, and a tier default below the built-in one (applied before clamping).
PRO_TIER = {
    "max_memory_mb": 1024,
    "max_wall_ms": 30000,
    "max_concurrency": 8,
    "default_wall_ms": 5000,
    "cpu_budget_ms": 600000,
    "cpu_window_s": 60,
    "languages": "python, bash, sh",
    "backends": "native",
}
STANDARD_TIERS = {"free": FREE_TIER, "pro": PRO_TIER}
STANDARD_TENANTS = {"acme": "free", "globex": "pro"}


# [pool.python] that turns the warm pool off: every execution runs cold.
NO_POOL = {"python": {"min_idle": 0}}


class Receiver:
    """An HTTP receiver on loopback: answers each POST with the next of statuses (the last one
    repeats), or never answers while hang is set; records every request."""

    def __init__(self, statuses=(200,)):
        self.statuses = list(statuses)
        self.requests = []
        self.hang = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if receiver.hang.is_set():
                    receiver.release.wait(30)
                    return
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 \
                    else receiver.statuses[0]
                self.send_response(status)
                if status in (301, 302):
                    self.send_header("Location", "http://169.254.169.254/")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hook"

    def wait_for(self, n, timeout=30 * SLOW):
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            assert time.monotonic() < deadline, f"{len(self.requests)} of {n} requests came"
            time.sleep(0.02)
        return self.requests


# The real clients the tests drive (npm packages, installed by `make test` from the lock file).
COMPAT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat")


def run_node_client(script, args, *, package, input=None, env=None, timeout):
    """Runs tests/compat/SCRIPT under node with args; returns the completed process (rc 0
    required). package: the npm package it needs (under tests/compat/node_modules): missing, it
    fails the test under `make test` (which installs it) and skips it otherwise, saying how to
    install it."""
    if not os.path.isdir(os.path.join(COMPAT_DIR, "node_modules", package)):
        if os.environ.get("SANDBOXD_TEST_RUN"):
            pytest.fail(f"npm package {package} is missing: `make test` installs it (npm ci)")
        pytest.skip(f"npm package {package} is not installed: run `npm ci --prefix tests/compat`")
    node = shutil.which("node")
    assert node, "node is installed by scripts/install-deps.sh"
    proc = subprocess.run([node, os.path.join(COMPAT_DIR, script), *args], input=input,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def sse_events(response):
    """(event, data, seconds since start) from a streamed response, as they arrive."""
    started = time.monotonic()
    response.encoding = "utf-8"  # an event stream is always UTF-8 (it names no charset)
    event, data = None, []
    for raw in response.iter_lines(decode_unicode=True):
        if raw is None:
            continue
        if raw == "":
            if event is not None:
                yield event, json.loads("\n".join(data)), time.monotonic() - started
            event, data = None, []
        elif raw.startswith("event: "):
            event = raw[len("event: "):]
        elif raw.startswith("data: "):
            data.append(raw[len("data: "):])
