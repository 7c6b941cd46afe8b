"""Judge0 CE on sandboxd (src/api/compat_judge0.c), checked against Judge0's documented requests
and responses (judge0/judge0 v1.13.1, docs/api/**.md), field by field: the shapes, key orders,
types and status ids a Judge0 client reads; its validation errors (422 {"field": [messages]}),
refusals ({"error": ...} in a problem body), authentication (X-Auth-Token), base64, ?fields=,
?wait=, batches, and the verdicts (Wrong Answer under Judge0's comparison). Where sandboxd's
answer must differ from the docs' (the toolchains' names and versions, tokens, timings), the test
checks the type and form instead of the value."""

import base64
import json
import re
import time

import pytest
import requests

from serve_helpers import SLOW, Receiver, expect_json, no_new_leaks, running_server

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

TIERS = {"free": {"max_concurrency": 8, "max_memory_mb": 512}, "piston_only": {"compat_apis": "piston"}}
TENANTS = {"acme": "free", "other": "piston_only"}

# The docs' C program (docs/api/submissions/create_a_submission.md).
SRC = ('#include <stdio.h>\n\nint main(void) {\n  char name[10];\n  scanf("%s", name);\n'
       '  printf("hello, %s\\n", name);\n  return 0;\n}')
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DECIMAL = re.compile(r"^[0-9]+\.[0-9]+$")
ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
DEFAULT_KEYS = ["stdout", "time", "memory", "stderr", "token", "compile_output", "message",
                "status"]
ALL_KEYS = ["source_code", "language_id", "stdin", "expected_output", "stdout", "status_id",
            "created_at", "finished_at", "time", "memory", "stderr", "token", "number_of_runs",
            "cpu_time_limit", "cpu_extra_time", "wall_time_limit", "memory_limit", "stack_limit",
            "max_processes_and_or_threads", "enable_per_process_and_thread_time_limit",
            "enable_per_process_and_thread_memory_limit", "max_file_size", "compile_output",
            "exit_code", "exit_signal", "message", "wall_time", "compiler_options",
            "command_line_arguments", "redirect_stderr_to_stdout", "callback_url",
            "additional_files", "enable_network", "status", "language"]
STATUSES = [(1, "In Queue"), (2, "Processing"), (3, "Accepted"), (4, "Wrong Answer"),
            (5, "Time Limit Exceeded"), (6, "Compilation Error"), (7, "Runtime Error (SIGSEGV)"),
            (8, "Runtime Error (SIGXFSZ)"), (9, "Runtime Error (SIGFPE)"),
            (10, "Runtime Error (SIGABRT)"), (11, "Runtime Error (NZEC)"),
            (12, "Runtime Error (Other)"), (13, "Internal Error"), (14, "Exec Format Error")]


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers=TIERS, tenants=TENANTS) as server:
        yield server


def call(srv, method, path, body=None, *, tenant="acme", headers=None):
    h = {"X-Auth-Token": srv.tokens[tenant]} if tenant else {}
    if body is not None:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    return requests.request(method, srv.url(path), headers=h, timeout=(5, 120 * SLOW),
                            data=json.dumps(body) if body is not None else None)


def ordered_keys(response):
    """The keys of a JSON object answer in the order they were written."""
    return list(json.loads(response.text, object_pairs_hook=lambda pairs: dict(pairs)))


def expect_judge0_error(response, status, error):
    """A refusal: a problem body that carries its detail in Judge0's "error" member."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["error"] == body["detail"], body
    assert error in body["error"], body
    return body


def expect_validation(response, errors):
    """Judge0's 422: its {"field": ["message"]} members (in a problem body naming each)."""
    assert response.status_code == 422, response.text
    body = response.json()
    for field, messages in errors.items():
        assert body[field] == messages, body
        assert {"field": field, "message": messages[0]} in body["errors"], body
    return body


def wait_done(srv, token, fields="status_id", timeout_s=60):
    deadline = time.monotonic() + timeout_s * SLOW
    while True:
        got = expect_json(call(srv, "GET", f"/submissions/{token}?fields={fields},status"))
        if got["status"]["id"] > 2 or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_statuses_exactly(srv):
    r = call(srv, "GET", "/statuses")
    assert expect_json(r) == [{"id": i, "description": d} for i, d in STATUSES]


def test_languages(srv):
    languages = expect_json(call(srv, "GET", "/languages"))
    by_id = {entry["id"]: entry["name"] for entry in languages}
    for entry in languages:
        assert list(entry) == ["id", "name"], entry
    # The ids Judge0 CE gives these languages; names carry sandboxd's toolchains' versions.
    for language_id, prefix in [(46, "Bash ("), (50, "C (GCC "), (54, "C++ (GCC "), (60, "Go ("),
                                (62, "Java (OpenJDK "), (63, "JavaScript (Node.js "),
                                (71, "Python ("), (73, "Rust ("), (74, "TypeScript (")]:
        assert re.match(re.escape(prefix) + r"\d+\.\d+\.\d+\)$", by_id[language_id]), by_id
    assert [entry["name"] for entry in languages] == sorted(by_id.values(),
                                                            key=lambda n: n.lower()), languages
    everything = expect_json(call(srv, "GET", "/languages/all"))
    assert everything == [{**entry, "is_archived": False} for entry in languages]
    r = call(srv, "GET", "/languages/71")
    detail = expect_json(r)
    assert ordered_keys(r) == ["id", "name", "is_archived", "source_file", "compile_cmd",
                               "run_cmd"]
    assert detail["id"] == 71 and detail["compile_cmd"] is None
    assert detail["source_file"] == "main.py"
    assert expect_json(call(srv, "GET", "/languages/50"))["compile_cmd"].startswith("/usr/bin/gcc")
    # An older or newer CE id of the same language finds it too; an unknown one is 404.
    assert expect_json(call(srv, "GET", "/languages/92"))["id"] == 71
    expect_judge0_error(call(srv, "GET", "/languages/4"), 404, "Not Found")


def test_create_wait_false_then_get(srv):
    """docs 10.1 and 10.6: 201 {"token"}; GET with ?fields= and the default fields."""
    r = call(srv, "POST", "/submissions?base64_encoded=false&wait=false",
             {"source_code": SRC, "language_id": 50, "stdin": "world"})
    assert r.status_code == 201, r.text
    assert list(r.json()) == ["token"] and UUID.match(r.json()["token"]), r.text
    token = r.json()["token"]
    wait_done(srv, token)
    r = call(srv, "GET", f"/submissions/{token}?fields=stdout,stderr,status_id,language_id")
    assert expect_json(r) == {"language_id": 50, "stdout": "hello, world\n", "status_id": 3,
                              "stderr": None}
    # Judge0 writes its table's order, whatever the order of ?fields=.
    assert ordered_keys(r) == ["language_id", "stdout", "status_id", "stderr"]
    r = call(srv, "GET", f"/submissions/{token}")
    got = expect_json(r)
    assert ordered_keys(r) == DEFAULT_KEYS
    assert got["stdout"] == "hello, world\n" and got["stderr"] is None
    assert got["token"] == token and got["compile_output"] is None and got["message"] is None
    assert got["status"] == {"id": 3, "description": "Accepted"}
    assert DECIMAL.match(got["time"]) and isinstance(got["memory"], int) and got["memory"] > 0


def test_create_wait_true_with_expected_output(srv):
    """docs 10.2 (language 50 for the archived 4, which Judge0 itself now refuses)."""
    r = call(srv, "POST", "/submissions?wait=true",
             {"source_code": SRC, "language_id": "50", "stdin": "Judge0",
              "expected_output": "hello, Judge0"})
    assert r.status_code == 201, r.text
    assert ordered_keys(r) == DEFAULT_KEYS
    got = r.json()
    assert got["stdout"] == "hello, Judge0\n" and got["stderr"] is None
    assert got["status"] == {"id": 3, "description": "Accepted"}
    assert UUID.match(got["token"]) and DECIMAL.match(got["time"])
    # The same, read back: the verdict is the store's.
    assert expect_json(call(srv, "GET", f"/submissions/{got['token']}"))["status"]["id"] == 3


def test_base64(srv):
    """docs 10.3 and 10.6: base64_encoded=true decodes the inputs and encodes the outputs as
    Ruby's encode64 does (lines of 60 and a final newline)."""
    encoded = base64.b64encode(SRC.encode()).decode()
    r = call(srv, "POST", "/submissions?base64_encoded=true",
             {"source_code": encoded, "language_id": 50,
              "stdin": base64.b64encode(b"Judge0").decode()})
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    wait_done(srv, token)
    got = expect_json(call(srv, "GET", f"/submissions/{token}?base64_encoded=true"))
    assert got["stdout"] == "aGVsbG8sIEp1ZGdlMAo=\n", got
    got = expect_json(call(srv, "GET", f"/submissions/{token}"))
    assert got["stdout"] == "hello, Judge0\n"
    long_output = "x" * 100
    got = expect_json(call(srv, "POST", "/submissions?wait=true&base64_encoded=true", {
        "source_code": base64.b64encode(f"print('{long_output}')".encode()).decode(),
        "language_id": 71}), 201)
    # A source that is not UTF-8 (base64_encoded: any bytes) runs as it was sent.
    raw = expect_json(call(srv, "POST", "/submissions?wait=true&base64_encoded=true", {
        "source_code": base64.b64encode(b"echo ok # \xff\xfe\n").decode(),
        "language_id": 46}), 201)
    assert raw["status"]["id"] == 3 and base64.b64decode(raw["stdout"]) == b"ok\n", raw
    lines = got["stdout"].split("\n")
    assert [len(line) for line in lines] == [60, 60, 16, 0], got["stdout"]
    assert base64.b64decode(got["stdout"]) == (long_output + "\n").encode()


def test_verdicts_and_statuses(srv):
    def run(body):
        r = call(srv, "POST", "/submissions?wait=true&fields=*", body)
        assert r.status_code == 201, r.text
        assert ordered_keys(r) == ALL_KEYS
        return r.json()

    wrong = run({"source_code": "print('hello')", "language_id": 71, "expected_output": "world"})
    assert wrong["status"] == {"id": 4, "description": "Wrong Answer"}
    assert wrong["stdout"] == "hello\n" and wrong["status_id"] == 4
    # Judge0's comparison: trailing white space of lines and trailing blank lines aside.
    right = run({"source_code": "print('hello')", "language_id": 71,
                 "expected_output": "hello   \n\n"})
    assert right["status"]["id"] == 3
    assert run({"source_code": "print(' hello')", "language_id": 71,
                "expected_output": "hello"})["status"]["id"] == 4
    compile_error = run({"source_code": "int main( {", "language_id": 50})
    assert compile_error["status"] == {"id": 6, "description": "Compilation Error"}
    assert "error" in compile_error["compile_output"]
    for field in ["time", "memory", "stdout", "stderr", "exit_code", "exit_signal", "message"]:
        assert compile_error[field] is None, (field, compile_error)
    nzec = run({"source_code": "import sys; sys.exit(3)", "language_id": 71})
    assert nzec["status"] == {"id": 11, "description": "Runtime Error (NZEC)"}
    assert nzec["message"] == "Exited with error status 3" and nzec["exit_code"] == 3
    segv = run({"source_code": "import os; os.kill(os.getpid(), 11)", "language_id": 71})
    assert segv["status"] == {"id": 7, "description": "Runtime Error (SIGSEGV)"}
    assert segv["exit_signal"] == 11 and segv["exit_code"] == 0
    fpe = run({"source_code": "import os; os.kill(os.getpid(), 8)", "language_id": 71})
    assert fpe["status"]["id"] == 9
    abrt = run({"source_code": "import os; os.abort()", "language_id": 71})
    assert abrt["status"]["id"] == 10
    tle = run({"source_code": "while True: pass", "language_id": 71, "cpu_time_limit": 0.5,
               "wall_time_limit": 5})
    assert tle["status"] == {"id": 5, "description": "Time Limit Exceeded"}
    assert tle["message"] == "Time limit exceeded"
    assert tle["cpu_time_limit"] == "0.5" and tle["wall_time_limit"] == "5.0"
    assert float(tle["time"]) >= 0.4
    # Judge0 has no memory status: the OOM kill is a SIGKILL, Runtime Error (Other).
    oom = run({"source_code": "x = bytearray(400 * 1024 * 1024)", "language_id": 71,
               "memory_limit": 65536})
    assert oom["status"] == {"id": 12, "description": "Runtime Error (Other)"}, oom
    assert oom["memory_limit"] == 65536
    # The rest of the record: its times, limits, language and arguments.
    args = run({"source_code": "import sys; print(sys.argv[1:])", "language_id": 71,
                "command_line_arguments": "a  b c", "max_processes_and_or_threads": 10,
                "max_file_size": 512})
    assert args["stdout"] == "['a', 'b', 'c']\n"
    assert args["command_line_arguments"] == "a b c"
    assert args["max_processes_and_or_threads"] == 11 and args["max_file_size"] == 512
    assert args["language"]["id"] == 71 and args["language_id"] == 71
    assert ISO_TIME.match(args["created_at"]) and ISO_TIME.match(args["finished_at"])
    assert args["source_code"] is None and args["stdin"] is None  # the log keeps digests only
    assert DECIMAL.match(args["wall_time"]) and args["number_of_runs"] == 1


def test_validation_errors(srv):
    """docs 10.5, and Judge0's messages for the options sandboxd does not have."""
    expect_validation(call(srv, "POST", "/submissions", {"source_code": SRC}),
                      {"language_id": ["can't be blank"]})
    expect_validation(call(srv, "POST", "/submissions",
                           {"source_code": SRC, "language_id": 150000, "stdin": "world",
                            "expected_output": "hello, world"}),
                      {"language_id": ["language with id 150000 doesn't exist"]})
    expect_validation(call(srv, "POST", "/submissions", {"source_code": "", "language_id": 71}),
                      {"source_code": ["can't be blank"]})
    expect_validation(call(srv, "POST", "/submissions",
                           {"source_code": "1", "language_id": 71, "cpu_time_limit": "fast",
                            "memory_limit": 100}),
                      {"cpu_time_limit": ["is not a number"],
                       "memory_limit": ["must be greater than or equal to 2048"]})
    for field, value, message in [
            ("compiler_options", "-O3", "setting compiler options is not allowed"),
            ("enable_network", True, "enabling network is not allowed"),
            ("additional_files", "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==",
             "setting additional files is not allowed"),
            ("redirect_stderr_to_stdout", True, "this option cannot be enabled"),
            ("number_of_runs", 3, "must be less than or equal to 1")]:
        expect_validation(call(srv, "POST", "/submissions",
                               {"source_code": "print(1)", "language_id": 71, field: value}),
                          {field: [message]})
    # A callback needs the tenant's webhook_secret and an address its tier allows (Webhooks).
    body = expect_validation(call(srv, "POST", "/submissions", {
        "source_code": "print(1)", "language_id": 71, "callback_url": "http://127.0.0.1:9/x"}),
        {})
    assert "webhook_secret" in body["callback_url"][0], body
    # Switches left off are fine.
    r = call(srv, "POST", "/submissions", {"source_code": "print(1)", "language_id": 71,
                                           "enable_network": False, "compiler_options": "",
                                           "number_of_runs": 1, "stack_limit": 64000})
    assert r.status_code == 201, r.text
    expect_judge0_error(call(srv, "GET", "/submissions/x?fields=stdout,colour,shape"), 400,
                        "invalid fields: [colour, shape]")
    expect_judge0_error(call(srv, "POST", "/submissions", None, headers={
        "Content-Type": "application/json"}), 400, "the body is empty")


def test_batches(srv):
    """docs 10.7."""
    r = call(srv, "POST", "/submissions/batch?base64_encoded=false", {"submissions": [
        {"language_id": 46, "source_code": "echo hello from Bash"},
        {"language_id": 71, "source_code": 'print("hello from Python")'},
        {"language_id": 63, "source_code": 'console.log("hello from JavaScript")'}]})
    assert r.status_code == 201, r.text
    tokens = [entry["token"] for entry in r.json()]
    assert all(UUID.match(t) for t in tokens) and len(set(tokens)) == 3
    for token in tokens:
        wait_done(srv, token)
    r = call(srv, "GET", f"/submissions/batch?tokens={','.join(tokens)},"
                         f"00000000-0000-0000-0000-000000000000&base64_encoded=false"
                         f"&fields=token,stdout,stderr,status_id,language_id")
    got = expect_json(r)
    assert got == {"submissions": [
        {"language_id": 46, "stdout": "hello from Bash\n", "status_id": 3, "stderr": None,
         "token": tokens[0]},
        {"language_id": 71, "stdout": "hello from Python\n", "status_id": 3, "stderr": None,
         "token": tokens[1]},
        {"language_id": 63, "stdout": "hello from JavaScript\n", "status_id": 3,
         "stderr": None, "token": tokens[2]},
        None]}, got
    assert list(got["submissions"][0]) == ["language_id", "stdout", "status_id", "stderr",
                                           "token"]
    # Items are judged one by one: 201 when one is valid, each bad one its errors.
    r = call(srv, "POST", "/submissions/batch", {"submissions": [
        {"language_id": 46, "source_code": "echo hello from Bash"},
        {"language_id": 123456789, "source_code": 'print("hello from Python")'},
        {"language_id": 71, "source_code": ""}]})
    assert r.status_code == 201, r.text
    got = r.json()
    assert UUID.match(got[0]["token"])
    assert got[1:] == [{"language_id": ["language with id 123456789 doesn't exist"]},
                       {"source_code": ["can't be blank"]}]
    r = call(srv, "POST", "/submissions/batch", {"submissions": [{"language_id": 71}]})
    assert r.status_code == 422 and r.json() == [{"source_code": ["can't be blank"]}], r.text
    expect_judge0_error(call(srv, "POST", "/submissions/batch", {"submissions": []}), 400,
                        "there should be at least one submission in a batch")
    expect_judge0_error(call(srv, "GET", "/submissions/batch"), 400,
                        "there should be at least one submission in a batch")


def test_authentication_and_isolation(srv):
    r = call(srv, "POST", "/submissions", {"source_code": "print(1)", "language_id": 71})
    token = r.json()["token"]
    # Authorization: Bearer works as well as X-Auth-Token.
    r = requests.get(srv.url(f"/submissions/{token}"), timeout=10,
                     headers={"Authorization": f"Bearer {srv.tokens['acme']}"})
    assert r.status_code == 200 and r.json()["token"] == token
    for headers in [{}, {"X-Auth-Token": "wrong"}]:
        r = requests.get(srv.url(f"/submissions/{token}"), headers=headers, timeout=10)
        expect_judge0_error(r, 401, "X-Auth-Token")
        r = requests.post(srv.url("/submissions"), headers=headers, timeout=10,
                          data=json.dumps({"source_code": "print(1)", "language_id": 71}))
        expect_judge0_error(r, 401, "X-Auth-Token")
    # Another tenant does not see it; a tier without judge0 in compat_apis may not use the API.
    expect_judge0_error(call(srv, "GET", f"/submissions/{token}", tenant="other"), 403,
                        "does not allow the Judge0 API")
    expect_judge0_error(call(srv, "GET", "/languages", tenant="other"), 403, "compat_apis")
    expect_judge0_error(call(srv, "GET", "/submissions/not-a-token"), 404, "Not Found")
    expect_judge0_error(call(srv, "DELETE", f"/submissions/{token}"), 405, "use GET")
    # The submission is an ordinary execution of the tenant: its audit record.
    record = expect_json(srv.get_execution(token.replace("-", "")))
    assert record["language"] == "python" and record["status"] in {"ok", "queued", "running"}


def test_other_tenant_cannot_read(srv):
    with running_server(tiers=TIERS, tenants={"acme": "free", "beta": "free"}) as server:
        r = call(server, "POST", "/submissions?wait=true",
                 {"source_code": "print(1)", "language_id": 71})
        token = r.json()["token"]
        expect_judge0_error(call(server, "GET", f"/submissions/{token}", tenant="beta"), 404,
                            "Not Found")
        got = expect_json(call(server, "GET", f"/submissions/batch?tokens={token}",
                               tenant="beta"))
        assert got == {"submissions": [None]}


def test_callback_is_a_put_of_the_submission():
    """callback_url: Judge0's callback, a PUT of the submission's default fields base64_encoded,
    once it has ended; signed as every sandboxd webhook (the tenant's webhook_secret)."""
    import hashlib
    import hmac
    from test_serve_webhooks import SECRET

    with Receiver() as receiver:
        receiver_put = []

        def do_put(handler):
            body = handler.rfile.read(int(handler.headers["Content-Length"]))
            receiver_put.append(({k.lower(): v for k, v in handler.headers.items()}, body))
            handler.send_response(200)
            handler.end_headers()

        receiver.server.RequestHandlerClass.do_PUT = do_put
        tier = {"languages": "python", "webhook_allow": f"127.0.0.1:{receiver.port}"}
        with running_server(tiers={"t": tier},
                            tenants={"acme": {"tier": "t", "webhook_secret": SECRET}},
                            server={"webhook_backoff_ms": 50}) as server:
            r = call(server, "POST", "/submissions", {
                "source_code": "print('called back')", "language_id": 71,
                "expected_output": "called back", "callback_url": receiver.url})
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            deadline = time.monotonic() + 30 * SLOW
            while not receiver_put and time.monotonic() < deadline:
                time.sleep(0.05)
            assert receiver_put and not receiver.requests, "no PUT came (or a POST did)"
            headers, body = receiver_put[0]
            assert headers["content-type"] == "application/json"
            got = json.loads(body, object_pairs_hook=lambda pairs: dict(pairs))
            assert list(got) == DEFAULT_KEYS
            assert got["token"] == token and got["status"] == {"id": 3, "description": "Accepted"}
            assert base64.b64decode(got["stdout"]) == b"called back\n"
            # Standard Webhooks' signature over id.timestamp.body, as sandboxd signs them all.
            key = base64.b64decode(SECRET.removeprefix("whsec_"))
            signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
            expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            assert f"v1,{expected}" in headers["webhook-signature"].split(), headers
            got = expect_json(call(server, "GET", f"/submissions/{token}?fields=callback_url"))
            assert got == {"callback_url": receiver.url}
