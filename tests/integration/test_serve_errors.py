"""Every error class of issue 3, with its status code, headers and RFC 9457 problem body naming
the field: malformed JSON, wrong types, unknown fields, oversize bodies, unknown language, bad
limits, bad file paths, refused environment variables, missing or bad tokens, a language the
tier does not allow, unknown ids and paths, wrong methods and content types. After each class the
server must still be healthy: no request may crash or hang it. (429 is in test_serve_quota.py,
503 in test_serve_lifecycle.py.)"""

import json
import socket
import time

import pytest
import requests

from serve_helpers import (FREE_TIER, HTTP_TIMEOUT, expect_json, expect_problem, no_new_leaks,
                           running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

MAX_BODY = 65536
PY = {"language": "python", "code": "print(2+2)"}


@pytest.fixture(scope="module")
def srv():
    tiers = {
        "free": FREE_TIER,
        "pyonly": {**FREE_TIER, "languages": "python"},
    }
    with running_server(tiers=tiers, tenants={"acme": "free", "pyco": "pyonly"},
                        server={"max_body_bytes": MAX_BODY}) as server:
        yield server


@pytest.fixture(autouse=True)
def still_healthy(srv):
    """After every test here the server must still answer, and still run code."""
    yield
    r = srv.get("/health")
    assert r.status_code == 200, f"/health after the test: {r.status_code} {r.text[:500]}"


def with_fields(**fields):
    body = dict(PY)
    for key, value in fields.items():
        if value is DROP:
            body.pop(key, None)
        else:
            body[key] = value
    return body


DROP = object()


# --- malformed bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b'{"language": "python", "code": ',
    b"{'language': 'python'}",
    b'{"language": "python", "code": "print(1)"} trailing',
    b"",
    b"   ",
    b"\xff\xfe{}",
    b'{"language": "python", "code": "\xc3\x28"}',          # invalid UTF-8 inside a string
    b'{"language": "python", "language": "bash", "code": "x"}',  # duplicate key: ambiguous
    b"[" * 20000 + b"]" * 20000,                            # nesting deeper than any parser allows
    b'{"language": "python", "code": "x", "limits": {"wall_ms": 1e999999}}',
], ids=["truncated", "single-quotes", "trailing-garbage", "empty", "blank", "bom-garbage",
        "invalid-utf8", "duplicate-key", "deep-nesting", "huge-number"])
def test_malformed_json_is_400_naming_the_body(srv, raw):
    body = expect_problem(srv.post_execution(raw), 400, field="body")
    assert "JSON" in body["detail"], body
    # Said in words, not as jansson's "line -1, column -1: wrong arguments".
    assert "-1" not in body["detail"] and "wrong arguments" not in body["detail"], body


@pytest.mark.parametrize("doc", [[1, 2], "python", 42, None, True],
                         ids=["array", "string", "number", "null", "true"])
def test_body_that_is_not_an_object_is_400(srv, doc):
    expect_problem(srv.post_execution(json.dumps(doc)), 400)


@pytest.mark.parametrize("raw", [
    '{"language":"python","code":"1","' + "\u00e9" * 200 + '":1}',
    '{"language":"python","code":"1","x' + "\u00e9" * 200 + '":1}',
    '{"language":"python","code":"1","' + "\U0001F600" * 100 + '":1}',
    '{"language":"python","code":"1","limits":{"' + "\u00e9" * 200 + '":1}}',
    '{"language":"python","code":"1","env":{"x' + "\u00e9" * 3000 + '":"x"}}',
    '{"language":"python","files":[{"path":"a","content":"","' + "\u00e9" * 200 +
    '":1}],"entrypoint":"a"}',
    '{"language":"x' + "\u00e9" * 40 + '","code":"1"}',
    '{"lang\\u0000uage":"python","code":"1"}',
    '{"language":"python","code":"1","env":{"A\\u0000B":"x"}}',
    '{"language":"python","code":"\\ud800"}',
    json.dumps({f"k{i}": i for i in range(100)}),
], ids=["long-key", "long-key-odd", "long-key-4-byte-chars", "long-limits-key", "long-env-name",
        "long-file-key", "long-language", "nul-in-key", "nul-in-env-name", "lone-surrogate",
        "100-unknown-fields"])
def test_hostile_field_names_get_a_valid_problem(srv, raw):
    """Names the problem body echoes (cut to a bounded length) must stay valid UTF-8 JSON."""
    r = srv.post_execution(raw.encode())
    body = expect_problem(r, 400)
    json.loads(r.content.decode("utf-8"))  # strict: no broken UTF-8 sequence
    assert len(r.content) < 64 * 1024, len(r.content)
    assert body["errors"] or "JSON" in body["detail"], body


# --- wrong types ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, field", [
    ({"language": 5}, "language"),
    ({"language": None}, "language"),
    ({"code": 123}, "code"),
    ({"code": ["print(1)"]}, "code"),
    ({"stdin": 5}, "stdin"),
    ({"args": "one two"}, "args"),
    ({"args": [1]}, "args[0]"),
    ({"args": ["ok", None]}, "args[1]"),
    ({"env": ["A=1"]}, "env"),
    ({"env": {"NAME": 1}}, "env.NAME"),
    ({"limits": [1000]}, "limits"),
    ({"limits": "big"}, "limits"),
    ({"network": 0}, "network"),
    ({"backend": True}, "backend"),
    ({"code": DROP, "files": {"path": "a.py"}, "entrypoint": "a.py"}, "files"),
    ({"code": DROP, "files": ["a.py"], "entrypoint": "a.py"}, "files[0]"),
    ({"code": DROP, "files": [{"path": "a.py", "content": 1}], "entrypoint": "a.py"},
     "files[0].content"),
    ({"code": DROP, "files": [{"path": 7, "content": ""}], "entrypoint": "a.py"},
     "files[0].path"),
    ({"code": DROP, "files": [{"path": "a.py", "content": "", "executable": "yes"}],
      "entrypoint": "a.py"}, "files[0].executable"),
    ({"code": DROP, "files": [{"path": "a.py", "content": ""}], "entrypoint": 1}, "entrypoint"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_wrong_type_is_400_naming_the_field(srv, fields, field):
    body = expect_problem(srv.post_execution(with_fields(**fields)), 400, field=field)
    assert body["title"], body


def test_several_problems_are_all_listed(srv):
    body = expect_problem(srv.post_execution({"language": 1, "code": 2, "stdin": 3, "args": 4}),
                          400, fields=["language", "code", "stdin", "args"])
    assert len(body["errors"]) >= 4


# --- unknown fields -------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, field", [
    ({"timeout": 5}, "timeout"),
    ({"Language": "python"}, "Language"),
    ({"limits": {"gpus": 1}}, "limits.gpus"),
    ({"limits": {"memory_mb": 64, "memory": 64}}, "limits.memory"),
    ({"code": DROP, "files": [{"path": "a.py", "content": "", "mode": 755}], "entrypoint": "a.py"},
     "files[0].mode"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_unknown_field_is_400_naming_it(srv, fields, field):
    body = expect_problem(srv.post_execution(with_fields(**fields)), 400, field=field)
    message = next(e["message"] for e in body["errors"] if e["field"] == field)
    assert "unknown" in message.lower(), body


# --- required fields and combinations -------------------------------------------------------------


@pytest.mark.parametrize("fields, field", [
    ({"language": DROP}, "language"),
    ({"code": DROP}, "code"),
    ({"files": [{"path": "a.py", "content": ""}], "entrypoint": "a.py"}, "code"),
    ({"entrypoint": "main.py"}, "entrypoint"),
    ({"code": DROP, "files": [{"path": "a.py", "content": ""}]}, "entrypoint"),
    ({"code": DROP, "files": [{"path": "a.py", "content": ""}], "entrypoint": "b.py"},
     "entrypoint"),
    ({"code": DROP, "files": [], "entrypoint": "a.py"}, "files"),
    ({"code": DROP, "files": [{"content": ""}], "entrypoint": "a.py"}, "files[0].path"),
    ({"code": DROP, "files": [{"path": "a.py"}], "entrypoint": "a.py"}, "files[0].content"),
    ({"code": DROP, "files": [{"path": "a.py", "content": ""}, {"path": "a.py", "content": ""}],
      "entrypoint": "a.py"}, "files[1].path"),
    ({"code": DROP, "files": [{"path": "a", "content": ""}, {"path": "a/b.py", "content": ""}],
      "entrypoint": "a/b.py"}, "files[1].path"),
    ({"network": "host"}, "network"),
    ({"backend": "docker"}, "backend"),
], ids=["no-language", "no-code", "code-and-files", "entrypoint-without-files",
        "files-without-entrypoint", "entrypoint-not-a-file", "no-files", "file-without-path",
        "file-without-content", "same-path-twice", "file-and-directory", "network-host",
        "unknown-backend"])
def test_missing_or_conflicting_fields_are_400(srv, fields, field):
    expect_problem(srv.post_execution(with_fields(**fields)), 400, field=field)


# --- counts and sizes -----------------------------------------------------------------------------


@pytest.mark.parametrize("fields, field", [
    ({"code": DROP, "files": [{"path": f"f{i}.py", "content": ""} for i in range(65)],
      "entrypoint": "f0.py"}, "files"),
    ({"code": DROP, "files": [{"path": "p" * 256, "content": ""}], "entrypoint": "p" * 256},
     "files[0].path"),
    ({"args": ["a"] * 65}, "args"),
    ({"args": ["ok", "a" * 4097]}, "args[1]"),
    ({"env": {f"V{i}": "" for i in range(65)}}, "env"),
    ({"env": {"BIG": "v" * 4096}}, "env.BIG"),
], ids=["65-files", "path-256", "65-args", "arg-4097", "65-env", "env-entry-too-long"])
def test_over_the_count_and_size_bounds_is_400(srv, fields, field):
    expect_problem(srv.post_execution(with_fields(**fields)), 400, field=field)


@pytest.mark.parametrize("fields", [
    {"code": DROP, "files": [{"path": f"f{i}.py", "content": ""} for i in range(64)],
     "entrypoint": "f63.py"},
    {"code": DROP, "files": [{"path": "p" * 255, "content": "print(1)"}], "entrypoint": "p" * 255},
    {"args": ["a"] * 64},
    {"args": ["a" * 4096]},
    {"env": {f"V{i}": "" for i in range(64)}},
    {"env": {"BIG": "v" * (4096 - len("BIG="))}},
], ids=["64-files", "path-255", "64-args", "arg-4096", "64-env", "env-entry-4096"])
def test_at_the_count_and_size_bounds_runs(srv, fields):
    result = expect_json(srv.post_execution(with_fields(**fields)), 200)
    assert result["status"] == "ok", result


# --- oversize bodies ------------------------------------------------------------------------------


def padded_body(size):
    """A valid request of exactly size bytes (JSON whitespace pads it)."""
    text = json.dumps(PY)
    assert len(text) < size
    return (text[:-1] + " " * (size - len(text)) + "}").encode()


def test_body_of_exactly_max_body_bytes_is_accepted(srv):
    body = padded_body(MAX_BODY)
    assert len(body) == MAX_BODY
    result = expect_json(srv.post_execution(body), 200)
    assert result["stdout"] == "4\n"


def test_body_one_byte_over_max_body_bytes_is_413(srv):
    body = padded_body(MAX_BODY + 1)
    problem = expect_problem(srv.post_execution(body), 413)
    assert str(MAX_BODY) in problem["detail"], problem


def test_large_body_is_413(srv):
    body = with_fields(code="#" + "x" * (4 << 20))
    expect_problem(srv.post_execution(body), 413)


def test_oversize_chunked_body_without_content_length_is_413(srv):
    """No Content-Length to refuse up front: the server must count what arrives."""
    def chunks():
        yield b'{"language": "python", "code": "'
        for _ in range(64):
            yield b"x" * 4096
        yield b'"}'

    r = srv.request("POST", "/v1/executions", data=chunks(), headers=srv.headers("acme"))
    assert "Content-Length" not in r.request.headers
    expect_problem(r, 413)


def test_announced_oversize_body_is_refused_before_it_is_sent(srv):
    """Content-Length over the limit: 413 at once, without waiting for (or reading) the body."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
        conn.sendall(b"POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer " + srv.tokens["acme"].encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100000000\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = conn.recv(4096)
            assert chunk, f"connection closed without a response: {reply!r}"
            reply += chunk
    status_line = reply.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 413"), reply[:500]
    assert b"application/problem+json" in reply.lower(), reply[:500]


def _status_before_body(srv, request_head):
    """Sends only the head of a request that announces a 100 MB body; returns the status line
    the server answers with before any of the body is sent."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
        conn.sendall(request_head)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = conn.recv(4096)
            assert chunk, f"connection closed without a response: {reply!r}"
            reply += chunk
    return reply.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("head", [
    # No token: 401 before the body, whatever its size (chunked: no size announced at all).
    b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
    # A route that takes no body: answered from the headers alone.
    b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n",
    b"PUT /v1/executions/00000000000000000000000000000000 HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
])
def test_no_body_is_buffered_without_a_token_and_a_route_that_takes_one(srv, head):
    """Only an authenticated POST /v1/executions gets its body read: anyone else could make the
    API process hold max_body_bytes per connection."""
    status = _status_before_body(srv, head)
    assert status.split()[1] in (b"401", b"405"), status


def test_requests_without_a_body_keep_the_connection(srv):
    """A GET (a poll, a record read) and a 401 leave the connection open for the next request:
    one TCP connection serves them all."""
    token = srv.tokens["acme"]
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
        stream = conn.makefile("rb")
        for head in [b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET /v1/languages HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET /v1/languages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + token.encode() + b"\r\n\r\n",
                     b"DELETE /v1/executions/00000000000000000000000000000000 HTTP/1.1\r\n"
                     b"Host: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n"]:
            conn.sendall(head)
            status = stream.readline()
            headers = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            stream.read(int(headers.get("content-length", "0")))
            assert status.split()[1] in (b"200", b"401", b"404"), (head, status)
            assert headers.get("connection", "").lower() != "close", (head, headers)


def test_small_chunked_body_is_accepted(srv):
    def chunks():
        yield b'{"language": "python",'
        yield b' "code": "print(2+2)"}'

    r = srv.request("POST", "/v1/executions", data=chunks(), headers=srv.headers("acme"))
    assert expect_json(r, 200)["stdout"] == "4\n"


# --- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["cobol", "Python", "python2", "", "py thon", "js node"])
def test_unknown_language_is_400(srv, language):
    expect_problem(srv.post_execution(with_fields(language=language)), 400, field="language")


@pytest.mark.parametrize("name", ["memory_mb", "wall_ms", "cpu_ms", "pids", "disk_mb",
                                  "output_bytes", "open_files"])
@pytest.mark.parametrize("value", [0, -1, "256", 1.5, True, None],
                         ids=["zero", "negative", "string", "float", "bool", "null"])
def test_bad_limit_is_400_naming_it(srv, name, value):
    expect_problem(srv.post_execution(with_fields(limits={name: value})), 400,
                   field=f"limits.{name}")


@pytest.mark.parametrize("path", ["../x", "/abs", "a//b", "a/../b", "./a", "a/.", "a/", "",
                                  ".", "..", "a\\b", "tab\there", "nul\u0000byte", "x" * 5000])
def test_bad_file_path_is_400(srv, path):
    body = with_fields(code=DROP, files=[{"path": path, "content": "print(1)"}],
                       entrypoint="main.py")
    expect_problem(srv.post_execution(body), 400, field="files[0].path")


def test_bad_entrypoint_path_is_400(srv):
    body = with_fields(code=DROP, files=[{"path": "main.py", "content": "print(1)"}],
                       entrypoint="../main.py")
    expect_problem(srv.post_execution(body), 400, field="entrypoint")


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "HOME", "TMPDIR",
                                  "LANG", "1BAD", "A=B", "WITH SPACE", "", "N" * 65])
def test_refused_env_name_is_400_naming_it(srv, name):
    expect_problem(srv.post_execution(with_fields(env={name: "/tmp/evil.so"})), 400,
                   field=f"env.{name}")


def test_env_value_with_nul_is_400(srv):
    expect_problem(srv.post_execution(with_fields(env={"OK": "a\u0000b"})), 400, field="env.OK")


def test_language_with_nul_is_400(srv):
    expect_problem(srv.post_execution(with_fields(language="python\u0000x")), 400,
                   field="language")


# --- authentication -------------------------------------------------------------------------------


def expect_unauthorized(r):
    body = expect_problem(r, 401)
    challenge = r.headers.get("WWW-Authenticate", "")
    assert challenge.startswith("Bearer"), r.headers
    return body


@pytest.mark.parametrize("authorization", [
    None,
    "",
    "Bearer",
    "Bearer ",
    "Bearer sbx_wrong",
    "Bearer sbx_" + "A" * 43,
    "Basic YWNtZTpzZWNyZXQ=",
], ids=["missing", "empty", "scheme-only", "scheme-space", "wrong", "wrong-same-shape", "basic"])
def test_missing_or_bad_token_is_401(srv, authorization):
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    r = srv.request("POST", "/v1/executions", data=json.dumps(PY), headers=headers)
    expect_unauthorized(r)


@pytest.mark.parametrize("template", ["Bearer {}", "bearer {}", "BEARER {}", "Bearer  {}"])
def test_bearer_scheme_is_case_insensitive(srv, template):
    """RFC 9110 11.1: the auth scheme is case-insensitive."""
    headers = {"Content-Type": "application/json",
               "Authorization": template.format(srv.tokens["acme"])}
    r = srv.request("POST", "/v1/executions", data=json.dumps(PY), headers=headers)
    assert expect_json(r, 200)["stdout"] == "4\n"


def test_token_of_one_tenant_with_a_typo_is_401(srv):
    token = srv.tokens["acme"]
    typo = token[:-1] + ("A" if token[-1] != "A" else "B")
    expect_unauthorized(srv.post_execution(PY, tenant=None, token=typo))
    expect_unauthorized(srv.post_execution(PY, tenant=None, token=token + "x"))


def test_get_execution_without_token_is_401(srv):
    expect_unauthorized(srv.get_execution("0" * 32, tenant=None))
    expect_unauthorized(srv.get_execution("0" * 32, tenant=None, token="sbx_nope"))


def test_auth_comes_before_body_checks(srv):
    """An unauthenticated client learns nothing about the request's validity."""
    expect_unauthorized(srv.post_execution(b"{not json", tenant=None))
    expect_unauthorized(srv.post_execution(padded_body(MAX_BODY + 1), tenant=None))


# --- tier -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["bash", "sh"])
def test_language_not_allowed_for_the_tier_is_403(srv, language):
    body = expect_problem(srv.post_execution(with_fields(language=language, code="echo hi"),
                                             tenant="pyco"), 403, field="language")
    assert "pyonly" in json.dumps(body) or language in body["detail"], body


def test_allowed_language_of_the_restricted_tier_runs(srv):
    result = expect_json(srv.post_execution(PY, tenant="pyco"), 200)
    assert result["status"] == "ok" and result["stdout"] == "4\n"


def test_other_tenant_may_use_the_language(srv):
    result = expect_json(srv.post_execution(with_fields(language="bash", code="echo hi")), 200)
    assert result["stdout"] == "hi\n"


# --- ids, paths, methods, content types -----------------------------------------------------------


@pytest.mark.parametrize("execution_id", ["0" * 32, "f" * 32, "abc", "A" * 32, "%2e%2e",
                                          "0" * 33, "'; DROP TABLE executions; --"])
def test_unknown_execution_id_is_404(srv, execution_id):
    expect_problem(srv.get_execution(requests.utils.quote(execution_id, safe="")), 404)


@pytest.mark.parametrize("path", ["/index.html", "/nope", "/v1", "/v1/", "/v2/executions", "/health/",
                                  "/v1/executions/abc/def", "/V1/executions", "/metrics.json",
                                  "/v1/openapi.yaml"])
def test_unknown_path_is_404(srv, path):
    expect_problem(srv.request("GET", path, headers=srv.headers("acme", content_type=None)), 404)


@pytest.mark.parametrize("method, path, allow", [
    ("PUT", "/v1/executions", "GET, HEAD, POST"),
    ("DELETE", "/v1/executions", "GET, HEAD, POST"),
    ("PATCH", "/v1/executions", "GET, HEAD, POST"),
    ("POST", "/v1/executions/" + "0" * 32, "GET, HEAD, DELETE"),
    ("PUT", "/v1/executions/" + "0" * 32, "GET, HEAD, DELETE"),
    ("POST", "/health", "GET, HEAD"),
    ("PUT", "/metrics", "GET, HEAD"),
    ("POST", "/v1/openapi.json", "GET, HEAD"),
])
def test_wrong_method_is_405_with_allow(srv, method, path, allow):
    r = srv.request(method, path, data=json.dumps(PY), headers=srv.headers("acme"))
    expect_problem(r, 405)
    assert [m.strip() for m in r.headers.get("Allow", "").split(",")] == allow.split(", "), \
        r.headers


@pytest.mark.parametrize("path", ["/health", "/metrics", "/v1/openapi.json",
                                  "/v1/executions/" + "0" * 32])
def test_head_answers_like_get_without_a_body(srv, path):
    got = srv.request("GET", path, headers=srv.headers("acme", content_type=None))
    head = srv.request("HEAD", path, headers=srv.headers("acme", content_type=None))
    assert head.status_code == got.status_code, (head.status_code, got.status_code)
    assert head.content == b""
    assert head.headers["Content-Type"] == got.headers["Content-Type"]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/jsonx", "multipart/form-data; boundary=x",
                                          "application/problem+json"])
def test_wrong_content_type_is_415(srv, content_type):
    r = srv.post_execution(json.dumps(PY), content_type=content_type)
    expect_problem(r, 415)


def test_form_post_is_415(srv):
    r = srv.request("POST", "/v1/executions", data={"language": "python", "code": "print(1)"},
                    headers=srv.headers("acme", content_type=None))
    expect_problem(r, 415)


# --- transport ------------------------------------------------------------------------------------


def test_half_sent_request_does_not_block_others(srv):
    """A client that announces a body and stalls must not keep the server from answering."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as stalled:
        stalled.sendall(b"POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                        b"Authorization: Bearer " + srv.tokens["acme"].encode() + b"\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        time.sleep(0.2)
        result = expect_json(srv.post_execution(PY), 200)
        assert result["stdout"] == "4\n"


def test_client_that_hangs_up_mid_execution_does_not_hurt(srv):
    """The client goes away while its program runs; the server carries on."""
    body = json.dumps({"language": "python", "code": "import time\ntime.sleep(1)\nprint(1)"})
    request = (f"POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {srv.tokens['acme']}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as gone:
        gone.sendall(request.encode())
        time.sleep(0.3)
    time.sleep(1.5)
    result = expect_json(srv.post_execution(PY, timeout=HTTP_TIMEOUT), 200)
    assert result["stdout"] == "4\n"


def test_huge_url_and_header_do_not_hurt(srv):
    for kwargs in ({"path": "/" + "a" * 100000},
                   {"path": "/health", "headers": {"X-Big": "b" * 100000}}):
        try:
            r = srv.request("GET", kwargs["path"], headers=kwargs.get("headers"))
            assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
        except requests.ConnectionError:
            pass  # closing such a connection is a fine answer too


def test_many_idle_connections_do_not_block_work(srv):
    idle = []
    try:
        for _ in range(64):
            idle.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        result = expect_json(srv.post_execution(PY), 200)
        assert result["stdout"] == "4\n"
    finally:
        for conn in idle:
            conn.close()
