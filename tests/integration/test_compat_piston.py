"""Piston v2 on sandboxd (src/api/compat_piston.c): the real `piston-client` package from the
npm registry (tests/compat, installed by `make test` from its lock file), unchanged but for its
base URL, against a real server; then the API's mapping field by field over plain HTTP: runtimes,
versions, files and encodings, stdin and args, limits clamped to the tier, the stages and their
statuses, refusals in Piston's words (a problem body with "message"), authentication, the tier's
switch and the audit record behind every answer."""

import base64
import json
import re

import pytest
import requests

from serve_helpers import (SLOW, expect_json, expect_problem, no_new_leaks, run_node_client,
                           running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module


TIERS = {
    # A ceiling below what the requests ask, to see clamping; max_concurrency for the parallel
    # piston-client calls.
    "free": {"max_memory_mb": 128, "max_wall_ms": 5000, "max_concurrency": 8},
    "judge0_only": {"compat_apis": "judge0"},
    "narrow": {"languages": "python"},
}
TENANTS = {
    "acme": {"tier": "free", "anonymous_apis": "piston"},
    "other": "judge0_only",
    "slim": "narrow",
}


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers=TIERS, tenants=TENANTS) as server:
        yield server


def execute(srv, body, *, headers=None):
    return requests.post(srv.url("/api/v2/execute"), data=json.dumps(body), timeout=(5, 60 * SLOW),
                         headers={"Content-Type": "application/json", **(headers or {})})


def expect_piston_error(response, status, message_part, field=None):
    """A refusal: a problem body (RFC 9457) that carries its detail as Piston's "message"."""
    body = expect_problem(response, status, field=field)
    assert body["message"] == body["detail"], body
    assert message_part in body["message"], body
    return body


def run_ok(srv, body):
    r = execute(srv, body)
    answer = expect_json(r)
    assert set(answer) >= {"language", "version", "run"}, answer
    assert set(answer["run"]) == {"stdout", "stderr", "output", "code", "signal", "status",
                                  "message", "cpu_time", "wall_time", "memory"}, answer
    return r, answer


# --- the real client ---------------------------------------------------------------------------


def piston_client(srv, calls):
    """What piston-client's calls return, run by node in tests/compat."""
    proc = run_node_client("piston_client.mjs", [srv.base], package="piston-client",
                           input=json.dumps(calls), timeout=120 * SLOW)
    return json.loads(proc.stdout)


def test_piston_client_unchanged(srv):
    runtimes, hello, c_program, broken, with_input = piston_client(srv, [
        ["runtimes"],
        ["execute", "python", "print('hello from piston-client')"],
        ["execute", "c", '#include <stdio.h>\nint main(int c, char **v)'
                         '{printf("%d %s\\n", c - 1, v[3]); return 4;}'],
        ["execute", "cpp", "int main() { return undefined_name; }"],
        ["execute", "py", "import sys\nprint(sys.stdin.read().upper(), sys.argv[1:])",
         {"language": "python", "stdin": "from stdin", "args": ["a", "b"]}],
    ])
    names = {r["language"]: r for r in runtimes}
    assert {"python", "c", "cpp", "javascript", "bash"} <= set(names), runtimes
    assert names["python"]["aliases"] == ["py", "python3"]
    for runtime in runtimes:
        assert set(runtime) == {"language", "version", "aliases"}, runtime
        assert re.fullmatch(r"\d+\.\d+\.\d+", runtime["version"]), runtime

    assert hello["language"] == "python"
    assert hello["version"] == names["python"]["version"]
    assert hello["run"]["stdout"] == "hello from piston-client\n"
    assert hello["run"]["output"] == hello["run"]["stdout"]
    assert hello["run"]["code"] == 0 and hello["run"]["signal"] is None
    assert "compile" not in hello

    # piston-client sends args ["1", "2", "3"] unless told otherwise.
    assert c_program["compile"]["code"] == 0, c_program
    assert c_program["run"]["stdout"] == "3 3\n"
    assert c_program["run"]["code"] == 4
    assert c_program["run"]["status"] == "RE"
    assert c_program["run"]["message"] == "Exited with error status 4"

    # Piston answers a failed compile with it as the run stage too.
    assert broken["compile"]["code"] != 0, broken
    assert "undefined_name" in broken["compile"]["stderr"]
    assert broken["run"] == broken["compile"]

    assert with_input["run"]["stdout"] == "FROM STDIN ['a', 'b']\n", with_input


# --- the API, field by field -------------------------------------------------------------------


def test_runtimes_and_packages_follow_the_tier(srv):
    everything = expect_json(requests.get(srv.url("/api/v2/runtimes"), timeout=10))
    slim = expect_json(requests.get(srv.url("/api/v2/runtimes"), timeout=10,
                                    headers=srv.headers("slim", content_type=None)))
    assert [r["language"] for r in slim] == ["python"]
    assert len(everything) > 1
    packages = expect_json(requests.get(srv.url("/api/v2/packages"), timeout=10))
    assert packages == [{"language": r["language"], "language_version": r["version"],
                         "installed": True} for r in everything]
    r = requests.post(srv.url("/api/v2/runtimes"), timeout=10)
    expect_piston_error(r, 405, "use GET")
    assert r.headers["Allow"] == "GET, HEAD"
    expect_piston_error(requests.get(srv.url("/api/v2/connect"), timeout=10), 404,
                        "no such resource")


def test_version_selectors(srv):
    version = {r["language"]: r["version"] for r in
               expect_json(requests.get(srv.url("/api/v2/runtimes"), timeout=10))}["python"]
    major, minor, _ = version.split(".")
    code = [{"content": "print(1)"}]
    for selector in [version, "*", f"{major}.x", f"{major}.{minor}", f"^{major}.0"]:
        _, answer = run_ok(srv, {"language": "python", "version": selector, "files": code})
        assert answer["version"] == version and answer["run"]["stdout"] == "1\n", selector
    for selector in ["2", f"{major}.{int(minor) + 1}", "^99", "three"]:
        expect_piston_error(execute(srv, {"language": "python", "version": selector,
                                          "files": code}),
                            400, f"python-{selector} runtime is unknown")
    expect_piston_error(execute(srv, {"language": "cobol", "version": "*", "files": code}), 400,
                        "cobol-* runtime is unknown")


def test_files_encodings_stdin_and_args(srv):
    helper = "def shout(s):\n    return s.upper()\n"
    _, answer = run_ok(srv, {
        "language": "python", "version": "*",
        "files": [
            {"name": "main.py", "content": "import sys, helper\n"
                                           "print(helper.shout(input()), sys.argv[1:])\n"
                                           "print(open('blob.bin', 'rb').read().hex())\n"
                                           "print(open('data.bin', 'rb').read())\n"},
            {"name": "helper.py", "content": helper},
            {"name": "blob.bin", "content": base64.b64encode(b"\x00\xff\x10").decode(),
             "encoding": "base64"},
            {"name": "data.bin", "content": "6869", "encoding": "hex"},
        ],
        "stdin": "quiet\n", "args": ["x", "y z"]})
    assert answer["run"]["stdout"] == "QUIET ['x', 'y z']\n00ff10\nb'hi'\n", answer
    # The entrypoint is the first utf8 file, wherever it is in the list.
    _, answer = run_ok(srv, {"language": "python", "version": "*", "files": [
        {"name": "data.txt", "content": "aGk=", "encoding": "base64"},
        {"name": "run_me.py", "content": "print(open('data.txt').read())"}]})
    assert answer["run"]["stdout"] == "hi\n", answer
    expect_piston_error(execute(srv, {"language": "python", "version": "*", "files": [
        {"content": "aGk=", "encoding": "base64"}]}), 400,
        "files must include at least one utf8 encoded file")
    expect_piston_error(execute(srv, {"language": "python", "version": "*", "files": [
        {"content": "zz", "encoding": "hex"}]}), 400, "files[0].content is not hex")
    expect_piston_error(execute(srv, {"language": "python", "version": "*", "files": [
        {"content": "x", "encoding": "utf16"}]}), 400,
        "files[0].encoding must be one of base64, hex or utf8")


def test_stage_statuses(srv):
    _, answer = run_ok(srv, {"language": "python", "version": "*", "run_timeout": 300,
                             "files": [{"content": "while True: pass"}]})
    run = answer["run"]
    assert (run["status"], run["signal"], run["code"]) == ("TO", "SIGKILL", None), run
    assert run["message"] == "Time limit exceeded"
    assert 300 <= run["wall_time"] < 3000, run
    _, answer = run_ok(srv, {"language": "python", "version": "*", "files": [
        {"content": "import os, sys\nprint('out'); print('err', file=sys.stderr)\n"
                    "sys.stdout.flush(); os.kill(os.getpid(), 11)"}]})
    run = answer["run"]
    assert (run["status"], run["signal"], run["code"]) == ("SG", "SIGSEGV", None), run
    assert run["message"] == "Caught fatal signal 11"
    assert run["stdout"] == "out\n" and run["stderr"] == "err\n"
    assert run["output"] == "out\nerr\n"
    assert run["cpu_time"] >= 0 and run["memory"] > 0
    _, answer = run_ok(srv, {"language": "bash", "version": "*", "files": [
        {"content": "echo ok; exit 0"}]})
    assert (answer["run"]["status"], answer["run"]["message"]) == (None, None), answer


def test_limits_are_clamped_and_audited(srv):
    r, answer = run_ok(srv, {"language": "python", "version": "*",
                             "run_memory_limit": 512 * 1024 * 1024, "run_timeout": 60000,
                             "run_cpu_time": 2500, "compile_timeout": 10000,
                             "files": [{"content": "print('audited')"}]})
    assert answer["run"]["stdout"] == "audited\n"
    execution_id = r.headers["X-Sandboxd-Execution-Id"]
    record = expect_json(srv.get_execution(execution_id))
    assert record["status"] == "ok" and record["language"] == "python", record
    assert set(record["clamped"]) == {"memory_mb", "wall_ms"}, record
    assert record["effective"]["memory_mb"] == 128 and record["effective"]["wall_ms"] == 5000
    assert record["effective"]["cpu_ms"] == 2500
    for field, value in [("run_timeout", "3000"), ("run_memory_limit", -5)]:
        expect_piston_error(execute(srv, {"language": "python", "version": "*",
                                          "files": [{"content": "1"}], field: value}), 400, field)


def test_malformed_requests(srv):
    expect_piston_error(execute(srv, {"version": "*", "files": []}), 400,
                        "language is required as a string", field="language")
    expect_piston_error(execute(srv, {"language": "python", "version": 3, "files": []}), 400,
                        "version is required as a string", field="version")
    expect_piston_error(execute(srv, {"language": "python", "version": "*"}), 400,
                        "files is required as an array", field="files")
    expect_piston_error(execute(srv, {"language": "python", "version": "*",
                                      "files": [{"name": "a.py"}]}), 400,
                        "files[0].content is required as a string")
    r = requests.post(srv.url("/api/v2/execute"), data="{not json", timeout=10)
    expect_piston_error(r, 400, "malformed JSON")
    expect_piston_error(requests.get(srv.url("/api/v2/execute"), timeout=10), 405, "use POST")


def test_authentication_and_the_tiers_switch(srv):
    body = {"language": "python", "version": "*", "files": [{"content": "print(7)"}]}
    # Without a token: the tenant taking token-less requests (acme); with one: its tenant.
    _, answer = run_ok(srv, body)
    assert answer["run"]["stdout"] == "7\n"
    r = execute(srv, body, headers=srv.headers("slim"))
    assert expect_json(r)["run"]["stdout"] == "7\n"
    assert expect_json(srv.get_execution(r.headers["X-Sandboxd-Execution-Id"], tenant="slim"))
    # A wrong token is never anonymous.
    r = execute(srv, body, headers={"Authorization": "Bearer not-a-token"})
    expect_piston_error(r, 401, "a valid token is required")
    # A tier without piston in compat_apis.
    expect_piston_error(execute(srv, body, headers=srv.headers("other")), 403,
                        "does not allow the Piston API")
    expect_piston_error(requests.get(srv.url("/api/v2/runtimes"), timeout=10,
                                     headers=srv.headers("other")), 403, "compat_apis")
    # A language the tier does not allow: the settings pipeline's 403.
    expect_problem(execute(srv, {"language": "bash", "version": "*",
                                 "files": [{"content": "echo"}]}, headers=srv.headers("slim")),
                   403)


def test_no_anonymous_tenant_means_401():
    with running_server(tiers={"free": {}}, tenants={"acme": "free"}) as server:
        r = requests.get(server.url("/api/v2/runtimes"), timeout=10)
        expect_piston_error(r, 401, "a valid token is required")
        r = requests.post(server.url("/api/v2/execute"), timeout=10, data=json.dumps(
            {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}))
        expect_piston_error(r, 401, "a valid token is required")
        r = execute(server, {"language": "python", "version": "*",
                             "files": [{"content": "print(1)"}]}, headers=server.headers("acme"))
        assert expect_json(r)["run"]["stdout"] == "1\n"
