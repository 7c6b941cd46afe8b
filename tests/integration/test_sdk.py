"""The Python SDK and CLI (clients/python, issue 19) against a real `sandboxd serve`.

The package is installed the way a user would, `pip install --no-index ./clients/python` into a
fresh venv (made with /usr/bin/python3 -m venv; --no-index proves the build needs no network),
and every test uses that installed copy: the SDK's tests import it from the venv's
site-packages (the venv is this interpreter's version), the CLI and the README's examples run
under the venv's own python. One server for the module."""

import base64
import hashlib
import hmac
import http.server
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import pytest

from serve_helpers import SLOW, Receiver, no_new_leaks, running_server

# What these tests judge is the SDK's and the CLI's own Python; the server's routes they call run
# under the sanitizers in the test_serve_* modules. 47 s of the sanitizer stage, which is the
# longer of the two that `make test` runs side by side.
pytestmark = pytest.mark.skipif(os.environ.get("SANDBOXD_SANITIZED") == "1",
                                reason="the SDK's Python: run once, by the normal build's stage")

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "clients" / "python"
SECRET = "whsec_" + base64.b64encode(b"sandboxd-sdk-test-webhook-key-32").decode()

TIER = {"max_concurrency": 4, "max_wall_ms": 30000, "cpu_budget_ms": 6000000,
        "cpu_window_s": 60, "languages": "python, bash, sh", "max_sessions": 3,
        "max_episodes": 3}
# One execution at a time: the second is refused with 429 while the first runs.
TINY_TIER = {**TIER, "max_concurrency": 1}
CLI_TIMEOUT = 60 * SLOW


# --- fixtures -------------------------------------------------------------------------------------


def package_files():
    """The package's source tree, caches aside: an install must leave it as it was."""
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*")
                  if "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def venv():
    before = package_files()
    with tempfile.TemporaryDirectory(prefix="sdk-venv-") as tmp:
        path = Path(tmp) / "venv"
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(path)], check=True, timeout=120)
        install = subprocess.run([str(path / "bin" / "pip"), "install", "--no-index",
                                  "--disable-pip-version-check", str(PACKAGE)],
                                 capture_output=True, text=True, timeout=120)
        assert install.returncode == 0, install.stdout + install.stderr
        assert package_files() == before, "the install wrote into clients/python"
        yield path


@pytest.fixture(scope="module")
def sdk(venv):
    """The installed package, imported into this process from the venv (appended to sys.path,
    so that nothing else of the venv's shadows this interpreter's own packages)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    sys.path.append(str(site))
    try:
        import sandboxd
        assert Path(sandboxd.__file__).resolve().is_relative_to(site.resolve()), \
            sandboxd.__file__
        yield sandboxd
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m == "sandboxd" or m.startswith("sandboxd.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def receiver():
    """A webhook receiver on loopback (serve_helpers.Receiver), answering 200."""
    with Receiver() as r:
        yield r


@pytest.fixture(scope="module")
def srv(receiver):
    tiers = {"t": {**TIER, "webhook_allow": f"127.0.0.1:{receiver.port}"}, "tiny": TINY_TIER}
    tenants = {"acme": {"tier": "t", "webhook_secret": SECRET}, "tinyco": "tiny"}
    with running_server(tiers=tiers, tenants=tenants, server={"webhook_backoff_ms": 50}) as s:
        yield s


@pytest.fixture(autouse=True)
def between_tests(srv):
    yield
    srv.check_between_tests()


@pytest.fixture
def client(sdk, srv):
    c = sdk.Client(srv.base, srv.tokens["acme"])
    yield c
    c.close()


def cli(venv, srv, *argv, input=None, tenant="acme", module=False, cwd=None):
    """Runs the installed sandboxd-cli (or python -m sandboxd) with the server in its
    environment; returns the CompletedProcess (text)."""
    command = [str(venv / "bin" / "python"), "-m", "sandboxd"] if module else \
        [str(venv / "bin" / "sandboxd-cli")]
    env = dict(os.environ, SANDBOXD_URL=srv.base, SANDBOXD_TOKEN=srv.tokens[tenant],
               HOME=str(cwd or venv.parent))
    return subprocess.run(command + list(argv), input=input, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=CLI_TIMEOUT)


def wait_until(predicate, what, timeout=30 * SLOW):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


# --- the package ----------------------------------------------------------------------------------


def test_the_wheel_has_its_metadata_entry_point_and_a_true_record(venv, sdk):
    site = Path(sdk.__file__).parent.parent
    dist_info = site / "sandboxd-0.1.0.dist-info"
    metadata = (dist_info / "METADATA").read_text()
    assert re.search(r"^Name: sandboxd$", metadata, re.M)
    assert re.search(rf"^Version: {re.escape(sdk.__version__)}$", metadata, re.M)
    assert re.search(r"^Requires-Python: >=3.11$", metadata, re.M)
    assert "## Running code" in metadata  # the README is the long description
    assert "Tag: py3-none-any" in (dist_info / "WHEEL").read_text()
    assert "sandboxd-cli = sandboxd.cli:main" in (dist_info / "entry_points.txt").read_text()
    assert (site / "sandboxd" / "py.typed").exists()
    # Every file the wheel installed is in RECORD with its true hash and size.
    checked = 0
    for line in (dist_info / "RECORD").read_text().splitlines():
        path, digest, size = line.rsplit(",", 2)
        if not digest:
            continue
        data = (site / path).read_bytes()
        want = "sha256=" + base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (want, len(data)), path
        checked += 1
    modules = {p.name for p in (site / "sandboxd").glob("*.py")}
    assert {"client.py", "execution.py", "errors.py", "sse.py", "session.py", "episode.py",
            "batch.py", "webhooks.py", "cli.py", "__main__.py"} <= modules
    assert checked >= len(modules)
    version = subprocess.run([str(venv / "bin" / "sandboxd-cli"), "--version"],
                             capture_output=True, text=True, timeout=CLI_TIMEOUT)
    assert version.stdout.strip() == f"sandboxd-cli {sdk.__version__}", version


def test_the_backend_builds_an_sdist_too(venv, tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1] + '/_build'); import sandboxd_build; "
            "print(sandboxd_build.build_sdist(sys.argv[2]))")
    built = subprocess.run([str(venv / "bin" / "python"), "-B", "-c", code, str(PACKAGE),
                            str(tmp_path)], capture_output=True, text=True, timeout=60,
                           check=True)
    with tarfile.open(tmp_path / built.stdout.strip()) as archive:
        names = set(archive.getnames())
    assert {"sandboxd-0.1.0/PKG-INFO", "sandboxd-0.1.0/pyproject.toml",
            "sandboxd-0.1.0/README.md", "sandboxd-0.1.0/_build/sandboxd_build.py",
            "sandboxd-0.1.0/src/sandboxd/client.py",
            "sandboxd-0.1.0/src/sandboxd/py.typed"} <= names, names


# --- executions -----------------------------------------------------------------------------------


def test_run_ok_error_status_and_raise_for_status(sdk, client, srv):
    ok = client.run("print(2 + 2)")
    assert (ok.status, ok.stdout, ok.stderr, ok.exit_code, ok.ok) == ("ok", "4\n", "", 0, True)
    assert re.fullmatch(r"[0-9a-f]{32}", ok.id)
    assert ok.usage["cpu_ms"] >= 0 and ok.timing["total_us"] > 0
    assert ok.evidence["oom_kills"] == 0 and ok.limits["wall_ms"] == 10000
    assert ok.results == [] and ok.raw["backend"] == "native"
    assert ok.raise_for_status() is ok

    failed = client.run("import sys\nprint('out')\nprint('bad', file=sys.stderr)\nsys.exit(3)")
    assert (failed.status, failed.exit_code, failed.stdout, failed.stderr) == \
        ("exit_nonzero", 3, "out\n", "bad\n")
    with pytest.raises(sdk.ExecutionFailed) as raised:
        failed.raise_for_status()
    assert raised.value.execution is failed and "exit_nonzero" in str(raised.value)

    # bash, and the record of the execution read back.
    shell = client.run("echo $((6 * 7)); exit 4", language="bash")
    assert (shell.status, shell.stdout, shell.exit_code) == ("exit_nonzero", "42\n", 4)
    record = client.get(shell.id)
    assert (record.id, record.status, record.exit_code) == (shell.id, "exit_nonzero", 4)
    assert record.limits == shell.limits  # a record's "effective" limits


def test_timeout_is_a_status_with_the_kernels_evidence(sdk, client):
    result = client.run("import time\ntime.sleep(20)", limits={"wall_ms": 300})
    assert result.status == "timeout" and result.exit_code is None
    assert result.evidence["wall_timeout"] is True and result.limits["wall_ms"] == 300
    with pytest.raises(sdk.ExecutionFailed):
        result.raise_for_status()


def test_files_stdin_args_and_env(client):
    result = client.run(
        "import os, sys\n"
        "print(open('data/in.txt').read(), open('raw.bin', 'rb').read(), sys.stdin.read(),\n"
        "      sys.argv[1:], os.environ['GREETING'])",
        files={"data/in.txt": "text", "raw.bin": bytes([0, 255, 10])}, stdin="from stdin",
        args=["a", "b"], env={"GREETING": "hi"})
    assert result.stdout == "text b'\\x00\\xff\\n' from stdin ['a', 'b'] hi\n", result.raw
    # Files and an entrypoint of the caller's, in the API's own form.
    result = client.run(files=[{"path": "run.sh", "content": "echo from $0", "executable": True}],
                        entrypoint="run.sh", language="bash")
    assert result.stdout == "from /workspace/run.sh\n", result.raw


def test_streaming_callbacks_get_the_output_in_order_before_the_end(client):
    events = []
    code = ("import sys, time\n"
            "print('out 1', flush=True)\ntime.sleep(0.3)\n"
            "print('err 1', file=sys.stderr, flush=True)\ntime.sleep(0.3)\n"
            "print('out 2', flush=True)\ntime.sleep(0.3)\nsys.exit(5)")
    started = time.monotonic()
    result = client.run(code,
                        on_stdout=lambda t: events.append(("out", t, time.monotonic())),
                        on_stderr=lambda t: events.append(("err", t, time.monotonic())))
    ended = time.monotonic()
    assert [(k, t) for k, t, _ in events] == [("out", "out 1\n"), ("err", "err 1\n"),
                                             ("out", "out 2\n")], events
    # The first piece came as it was written, long before the run (0.9 s of sleeps) ended.
    assert events[0][2] - started < ended - started - 0.5, (events, ended - started)
    assert (result.status, result.exit_code) == ("exit_nonzero", 5)
    assert result.stdout == "out 1\nout 2\n" and result.stderr == "err 1\n"


def test_a_callback_that_raises_cancels_the_run(client, srv):
    class Enough(Exception):
        pass

    def stop(text):
        raise Enough(text)

    started = time.monotonic()
    with pytest.raises(Enough):
        client.run("import time\nprint('go', flush=True)\ntime.sleep(30)",
                   limits={"wall_ms": 30000}, on_stdout=stop)
    # The stream was closed, which the server takes as a hang-up: the run is canceled.
    srv.wait_idle(timeout=10 * SLOW)
    assert time.monotonic() - started < 15 * SLOW
    assert client.run("print('after')").stdout == "after\n"  # the client still works


def test_problems_are_exceptions_with_their_fields(sdk, client, srv):
    with pytest.raises(sdk.BadRequest) as raised:
        client.run("x", language="cobol")
    e = raised.value
    assert isinstance(e, sdk.APIError) and isinstance(e, sdk.SandboxdError)
    assert (e.status, e.slug, e.fields) == (400, "invalid-request", ["language"])
    assert e.type == "https://sandboxd.dev/problems/invalid-request"
    assert e.title == "Invalid request" and "cobol" in e.detail
    assert e.errors[0]["field"] == "language" and "cobol" in e.errors[0]["message"]

    nobody = sdk.Client(srv.base, "sbx_not_a_token")
    with pytest.raises(sdk.Unauthorized) as raised:
        nobody.run("print(1)")
    assert raised.value.status == 401 and raised.value.errors == []
    nobody.close()

    with pytest.raises(sdk.NotFound) as raised:
        client.get("0" * 32)
    assert raised.value.status == 404

    # The environment variables, when url and token are not given.
    os.environ["SANDBOXD_URL"], os.environ["SANDBOXD_TOKEN"] = srv.base, srv.tokens["acme"]
    try:
        with sdk.Client() as from_env:
            assert from_env.run("print(1)").stdout == "1\n"
    finally:
        del os.environ["SANDBOXD_URL"], os.environ["SANDBOXD_TOKEN"]
    with pytest.raises(ValueError):
        sdk.Client()


def test_one_connection_is_kept_and_threads_get_their_own(sdk, client):
    client.run("print(1)")
    first = client._transport._connection().sock
    assert first is not None  # kept alive after the answer
    client.run("print(2)")
    assert client._transport._connection().sock is first  # and reused

    # Threads share the client; each has its own connection, so the runs overlap.
    results, errors = [], []

    def worker():
        try:
            results.append(client.run("import time\ntime.sleep(1)\nprint('slept')"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    elapsed = time.monotonic() - started
    assert not errors, errors
    assert [r.stdout for r in results] == ["slept\n"] * 3
    assert elapsed < 2.5 * SLOW, f"the runs did not overlap: {elapsed:.2f} s"


def test_a_connection_the_server_closed_while_idle_is_replaced(sdk):
    """A server may close a kept-alive connection between requests (sandboxd does after 10 s
    idle) without saying so; the next request must go out on a new connection, not fail."""
    connections = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.connection not in connections:
                connections.append(self.connection)
            body = b'{"status": "ok", "engine": "up"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True  # closed after the answer, which did not say so

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with sdk.Client(f"http://127.0.0.1:{server.server_address[1]}", "t") as c:
            assert c.health() == {"status": "ok", "engine": "up"}
            wait_until(lambda: connections and connections[0].fileno() == -1,
                       "the server to close the connection", timeout=5)
            assert c.health() == {"status": "ok", "engine": "up"}
        assert len(connections) == 2
    finally:
        server.shutdown()
        server.server_close()


# --- sessions -------------------------------------------------------------------------------------


def test_a_session_keeps_state_and_files_and_is_deleted_on_exit(sdk, client, srv):
    with client.session("python", env={"WHO": "tester"}) as session:
        sid = session.id
        assert session.language == "python" and session.info["state"] == "idle"
        assert session.run("import os\ncount = 40").status == "ok"
        assert session.run("count += 2\ncount").results == [{"text/plain": "42"}]

        assert session.files.write("in/data.bin", bytes(range(256))) == 256
        assert session.files.write("note.txt", "héllo") == len("héllo".encode())
        listed = session.files.list("in")
        assert [(e["name"], e["size"], e["type"]) for e in listed] == [("data.bin", 256, "file")]
        seen = session.run("len(open('in/data.bin', 'rb').read()), open('note.txt').read()")
        assert seen.results == [{"text/plain": "(256, 'héllo')"}]
        session.run("open('made.txt', 'w').write(os.environ['WHO'])")
        assert session.files.read("made.txt") == b"tester"
        assert session.files.read_text("note.txt") == "héllo"
        session.files.delete("note.txt")
        with pytest.raises(sdk.NotFound):
            session.files.read("note.txt")

        # Streamed: output and results arrive through the callbacks, each kind in order (the
        # two are separate channels: a result is not ordered against unflushed output).
        outs, results = [], []
        run = session.run("print('a')\ndisplay(7)\nprint('b')\ncount",
                          on_stdout=outs.append,
                          on_result=lambda r: results.append(r["text/plain"]))
        assert "".join(outs) == "a\nb\n" and results == ["7", "42"], (outs, results)
        assert run.stdout == "a\nb\n" and run.session_id == sid
        assert run.results == [{"text/plain": "7"}, {"text/plain": "42"}]

        failed = session.run("def f():\n    raise KeyError('k')\nf()")
        assert failed.status == "error" and not failed.ok
        assert failed.exception.name == "KeyError" and "KeyError: 'k'" in failed.exception.traceback
        assert failed.error == "KeyError: 'k'"
        assert [s["id"] for s in client.sessions()] == [sid]
    assert session.closed and client.sessions() == []
    gone = srv.get(f"/v1/sessions/{sid}", headers=srv.headers(content_type=None))
    assert gone.status_code == 404 and gone.json()["end_reason"] == "deleted"
    with pytest.raises(sdk.NotFound) as raised:
        session.run("count")
    assert raised.value.problem["end_reason"] == "deleted"


# --- asynchronous executions and batches ----------------------------------------------------------


def test_async_execution_wait_and_cancel(sdk, client):
    queued = client.run("print(6 * 7)", wait=False)
    assert queued.status == "queued" and queued.queue_position >= 1 and not queued.done
    done = client.wait(queued, timeout=60)
    assert (done.id, done.status, done.stdout, done.done) == (queued.id, "ok", "42\n", True)

    slow = client.run("import time\ntime.sleep(30)", wait=False, limits={"wall_ms": 30000})
    wait_until(lambda: client.get(slow).status == "running", "the slow one to start")
    started = time.monotonic()
    canceled = client.cancel(slow)
    assert canceled.status == "canceled" and time.monotonic() - started < 10 * SLOW
    assert canceled.error  # says why
    with pytest.raises(sdk.Conflict):
        client.cancel(slow)
    with pytest.raises(ValueError):
        client.run("print(1)", wait=False, on_stdout=print)


def test_batches_of_cases_and_of_executions(sdk, client):
    batch = client.batch(program={"language": "python", "code": "print(int(input()) ** 2)"},
                         cases=[{"stdin": str(i), "expected_stdout": str(i * i)}
                                for i in range(4)] + [{"stdin": "9", "expected_stdout": "80"},
                                                      {"stdin": "oops"}],
                         compare="tokens")
    assert batch.cases == 6 and not batch.done
    batch = client.wait_batch(batch, timeout=120 * SLOW)
    assert batch.done and batch.summary == {"accepted": 4, "wrong_answer": 1,
                                            "exit_nonzero": 1}, batch.summary
    assert [r["verdict"] for r in batch.results] == ["accepted"] * 4 + ["wrong_answer",
                                                                        "exit_nonzero"]
    assert batch.results[4]["stdout"] == "81\n" and not batch.accepted
    trimmed = client.get_batch(batch, fields=["verdict"])
    assert trimmed.results[0] == {"index": 0, "verdict": "accepted"}

    mixed = client.batch([{"language": "bash", "code": "echo one"},
                          {"language": "cobol", "code": "x"},
                          {"language": "python", "code": "print('three')"}])
    assert mixed.cases == 2 and [r["index"] for r in mixed.rejected] == [1]
    assert mixed.rejected[0]["problem"]["errors"][0]["field"] == "language"
    mixed = client.wait_batch(mixed, timeout=120 * SLOW)
    assert [(r["index"], r["stdout"]) for r in mixed.results] == [(0, "one\n"), (2, "three\n")]
    assert mixed.accepted and [r["index"] for r in mixed.rejected] == [1]  # kept from the POST
    with pytest.raises(sdk.BadRequest) as raised:
        client.batch([{"language": "cobol", "code": "x"}])
    assert len(raised.value.problem["rejected"]) == 1


# --- episodes -------------------------------------------------------------------------------------

COUNTER = '''
class Counter:
    def reset(self, seed=None, options=None):
        self.n = seed or 0
        self.limit = (options or {}).get("limit", 3)
        return self.n, {"blob": b"\\x00\\x01", "options": options}

    def step(self, action):
        if action == "boom":
            raise RuntimeError("boom requested")
        self.n += action
        print("n is", self.n)
        info = {"raw": bytes([self.n % 256])}
        if self.n == 99:
            info["level"] = float("inf")
        return self.n, 1.0, self.n >= self.limit, False, info
'''


def test_an_episode_is_a_gymnasium_env(sdk, client, srv, request):
    env = client.env(COUNTER, env_class="Counter", action_space="my space")
    request.addfinalizer(env.close)  # on a failure too: an open episode holds a sandbox
    assert env.id is None and env.action_space == "my space" and env.unwrapped is env
    with pytest.raises(RuntimeError):
        env.step(1)  # Gymnasium's order: reset first
    observation, info = env.reset(seed=1, options={"limit": 3})
    assert observation == 1 and info == {"blob": b"\x00\x01", "options": {"limit": 3}}
    eid = env.id
    assert env.step(1) == (2, 1.0, False, False, {"raw": b"\x02"})
    assert env.last["stdout"] == "n is 2\n" and env.last["step"] == 1
    assert env.step(1) == (3, 1.0, True, False, {"raw": b"\x03"})
    with pytest.raises(sdk.Conflict):
        env.step(1)  # done: it needs a reset
    assert env.reset(seed=0)[0] == 0
    with pytest.raises(sdk.EpisodeError) as raised:
        env.step("boom")
    assert (raised.value.status, raised.value.name) == ("error", "RuntimeError")
    assert any("boom requested" in line for line in raised.value.traceback)
    assert env.reset(options={"limit": 1000})[0] == 0  # a reset revives it
    observation, reward, terminated, _, info = env.step(99)
    assert (observation, reward, terminated) == (99, 1.0, False)
    assert info == {"raw": b"\x63", "level": math.inf}
    state = env.state()
    assert (state["resets"], state["state"]) == (3, "ready"), state
    env.close()
    assert env.closed
    assert srv.get(f"/v1/episodes/{eid}", headers=srv.headers(content_type=None)).status_code \
        == 404
    with pytest.raises(RuntimeError):
        env.reset()

    # An environment whose first reset raises: 422 with its error, nothing left open.
    broken = client.env("def reset(seed=None, options=None):\n    raise ValueError('nope')\n"
                        "def step(action):\n    pass\n")
    with pytest.raises(sdk.EnvironmentFailed) as raised:
        broken.reset()
    assert raised.value.status == 422 and raised.value.problem["error"]["name"] == "ValueError"
    assert srv.get("/v1/episodes", headers=srv.headers(content_type=None)).json() == \
        {"episodes": []}


# --- quotas ---------------------------------------------------------------------------------------


def test_429_raises_by_default_and_is_retried_after_retry_after_when_asked(sdk, srv):
    with sdk.Client(srv.base, srv.tokens["tinyco"]) as plain, \
            sdk.Client(srv.base, srv.tokens["tinyco"], retries=5) as patient:
        # A short deadline: Retry-After is at most the time to the running one's deadline.
        sleeper = plain.run("import time\ntime.sleep(1.5)", wait=False,
                            limits={"wall_ms": 2500})
        wait_until(lambda: plain.get(sleeper).status == "running", "the sleeper to start")
        with pytest.raises(sdk.QuotaExceeded) as raised:
            plain.run("print('refused')")
        assert raised.value.status == 429 and raised.value.slug == "quota-exceeded"
        assert raised.value.retry_after >= 1
        assert plain.get(sleeper).status == "running"  # still holding the one slot
        started = time.monotonic()
        result = patient.run("print('after the wait')")
        assert result.stdout == "after the wait\n" and time.monotonic() - started >= 0.9
        # It ran only once the sleeper had ended: it was refused, waited and sent again.
        slept = plain.get(sleeper)
        assert slept.status == "ok"
        assert plain.get(result).raw["created_at"] >= slept.raw["finished_at"]


# --- webhooks -------------------------------------------------------------------------------------


def test_webhook_signatures_are_verified(sdk, client, receiver):
    queued = client.run("print('hooked')", wait=False, callback_url=receiver.url)
    headers, body = wait_until(lambda: receiver.requests and receiver.requests[0],
                               "the webhook")
    payload = sdk.verify_webhook(SECRET, headers, body)
    assert payload["type"] == "execution.completed"
    assert (payload["data"]["id"], payload["data"]["stdout"]) == (queued.id, "hooked\n")
    delivered = wait_until(lambda: client.webhook_deliveries("delivered"), "the delivery record")
    assert delivered[0]["id"] == {k.lower(): v for k, v in headers.items()}["webhook-id"]

    with pytest.raises(sdk.WebhookVerificationError, match="no signature"):
        sdk.verify_webhook(SECRET, headers, body.replace(b"hooked", b"hacked"))
    other = "whsec_" + base64.b64encode(b"another key of 32 bytes, really").decode()
    with pytest.raises(sdk.WebhookVerificationError, match="no signature"):
        sdk.verify_webhook(other, headers, body)
    stamp = int({k.lower(): v for k, v in headers.items()}["webhook-timestamp"])
    with pytest.raises(sdk.WebhookVerificationError, match="timestamp"):
        sdk.verify_webhook(SECRET, headers, body, now=stamp + 301)  # a replay, later
    assert sdk.verify_webhook(SECRET, headers, body, now=stamp + 299)["type"] == \
        "execution.completed"
    with pytest.raises(sdk.WebhookVerificationError, match="webhook-signature"):
        sdk.verify_webhook(SECRET, {k: v for k, v in headers.items()
                                    if k.lower() != "webhook-signature"}, body)

    # A plain-string secret is its bytes; a rotated key's signatures come space-separated.
    now = int(time.time())
    signature = sdk.sign_webhook("a plain secret, 16+ chars", "msg_1", now, b"{}")
    hand = base64.b64encode(hmac.new(b"a plain secret, 16+ chars", f"msg_1.{now}.{{}}".encode(),
                                     hashlib.sha256).digest()).decode()
    assert signature == "v1," + hand
    both = {"webhook-id": "msg_1", "webhook-timestamp": str(now),
            "webhook-signature": "v1,bm90IGl0 " + signature}
    assert sdk.verify_webhook("a plain secret, 16+ chars", both, "{}") == {}


# --- the CLI --------------------------------------------------------------------------------------


def test_cli_run_streams_and_passes_the_exit_code_through(venv, srv, tmp_path):
    program = tmp_path / "prog.py"
    program.write_text("import sys, time\nprint('first', flush=True)\ntime.sleep(1.5)\n"
                       "print('args', sys.argv[1:], file=sys.stderr)\nprint('last')\n"
                       "sys.exit(7)\n")
    env = dict(os.environ, SANDBOXD_URL=srv.base, SANDBOXD_TOKEN=srv.tokens["acme"])
    proc = subprocess.Popen([str(venv / "bin" / "sandboxd-cli"), "run", str(program), "--",
                             "x", "-y"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    watchdog = threading.Timer(CLI_TIMEOUT, proc.kill)  # a CLI that never prints must not hang
    watchdog.start()
    try:
        assert proc.stdout.readline() == "first\n"
        # It came while the program still ran (1.5 s to go): streamed, not at the end.
        assert proc.poll() is None
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out, err) == (7, "last\n", "args ['x', '-y']\n")

    shell = tmp_path / "hello.sh"
    shell.write_text("read name; echo \"hello $name\"; exit 0\n")
    (tmp_path / "name.txt").write_text("world\n")
    ran = cli(venv, srv, "run", "--stdin", str(tmp_path / "name.txt"), str(shell), module=True)
    assert (ran.returncode, ran.stdout) == (0, "hello world\n"), ran.stderr

    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(20)\n")
    timed_out = cli(venv, srv, "run", "--limit", "wall_ms=300", str(slow))
    assert timed_out.returncode == 124 and "timeout" in timed_out.stderr, timed_out

    failing = tmp_path / "fail.sh"
    failing.write_text("echo nope; exit 9\n")
    as_json = cli(venv, srv, "run", "--json", str(failing))
    assert as_json.returncode == 9 and json.loads(as_json.stdout)["stdout"] == "nope\n"

    unknown = tmp_path / "notes.txt"
    unknown.write_text("hi")
    refused = cli(venv, srv, "run", str(unknown))
    assert refused.returncode == 64 and "--language" in refused.stderr
    assert cli(venv, srv, "run", str(tmp_path / "missing.py")).returncode == 66
    assert cli(venv, srv, "--token", "sbx_wrong", "run", str(shell)).returncode == 77
    bad_language = cli(venv, srv, "run", "-l", "cobol", str(shell))
    assert bad_language.returncode == 64 and "language" in bad_language.stderr


def test_cli_batch(venv, srv, tmp_path):
    (tmp_path / "good.py").write_text("print('good')\n")
    (tmp_path / "bad.sh").write_text("echo bad; exit 3\n")
    mixed = cli(venv, srv, "batch", "good.py", "bad.sh", cwd=tmp_path)
    assert mixed.returncode == 1, mixed
    assert mixed.stdout == ("==> good.py: accepted (ok, exit 0)\ngood\n"
                            "==> bad.sh: exit_nonzero (exit_nonzero, exit 3)\nbad\n"), mixed
    assert "accepted 1, exit_nonzero 1" in mixed.stderr
    good = cli(venv, srv, "batch", "--json", "good.py", cwd=tmp_path)
    assert good.returncode == 0, good
    answer = json.loads(good.stdout)
    assert answer["summary"] == {"accepted": 1}
    assert [(r["file"], r["stdout"]) for r in answer["results"]] == [("good.py", "good\n")]


def test_cli_session_repl_driven_through_stdin(sdk, client, venv, srv, tmp_path):
    (tmp_path / "local.txt").write_text("local content")
    script = "\n".join([
        "x = 21",
        "def double(a):",
        "    return a * 2",
        "",
        "double(x)",
        "print('printed')",
        "import sys; print('to stderr', file=sys.stderr)",
        "1/0",
        "%put local.txt remote.txt",
        "%ls",
        "open('remote.txt').read().upper()",
        "open('made.txt', 'w').write('made remotely')",
        "%get made.txt copy.txt",
        "for i in range(2):",
        "    print('loop', i)",
    ]) + "\n"
    done = cli(venv, srv, "session", input=script, cwd=tmp_path)
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == ["42", "printed", "        13  remote.txt",
                                        "'LOCAL CONTENT'", "13", "loop 0", "loop 1"], done.stdout
    assert "to stderr" in done.stderr and "ZeroDivisionError: division by zero" in done.stderr
    assert (tmp_path / "copy.txt").read_text() == "made remotely"
    assert client.sessions() == []  # the end of the input ended the session

    shell = cli(venv, srv, "session", "--language", "bash",
                input="cd /tmp && export V=kept\necho \"$V in $PWD\"\n", cwd=tmp_path)
    assert (shell.returncode, shell.stdout) == (0, "kept in /tmp\n"), shell


# --- the README -----------------------------------------------------------------------------------


def test_the_readmes_examples_run(venv, srv):
    text = (PACKAGE / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
    assert len(blocks) >= 9, "the README lost its examples"
    env = dict(os.environ, SANDBOXD_URL=srv.base, SANDBOXD_TOKEN=srv.tokens["acme"])
    for number, block in enumerate(blocks, 1):
        ran = subprocess.run([str(venv / "bin" / "python"), "-c", block], capture_output=True,
                             text=True, env=env, timeout=CLI_TIMEOUT)
        assert ran.returncode == 0, f"README example {number}:\n{block}\n{ran.stderr}"
        try:
            srv.wait_idle()  # what an example started has ended before the next one starts
        except AssertionError as e:
            raise AssertionError(f"after README example {number}: {e}\n{block}") from None
