"""The MCP server (src/mcp), on stdio (`sandboxd mcp`) and on the service's /mcp (streamable
HTTP, src/api/mcp_http.c), each driven by the official MCP TypeScript SDK (npm
@modelcontextprotocol/sdk, tests/compat) unchanged, against a real `sandboxd serve`: initialize,
the tools and their schemas, run_code, a session round trip with a file and a PNG plot, tool
errors, the cancellation of a long run (which the service then records canceled) and an unknown
tool; then the protocol's edges the SDK cannot send, over raw stdio (malformed messages,
batches, version negotiation, a missing token) and raw HTTP (methods, token, Origin, status
codes)."""

import json
import os
import subprocess
import time

import pytest
import requests

from serve_helpers import (SANDBOXD, SLOW, audit_rows, expect_problem, no_new_leaks,
                           run_node_client, running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

PNG_MAGIC = "iVBORw0KGgo"  # base64 of the PNG signature
TOOLS = ["run_code", "list_languages", "create_session", "run_in_session", "write_file",
         "read_file", "list_files", "close_session"]


@pytest.fixture(scope="module")
def srv():
    tiers = {"t": {"max_concurrency": 4, "languages": "python, bash"}}
    with running_server(tiers=tiers, tenants={"acme": "t"}) as server:
        yield server


def mcp_env(srv, token=None):
    return dict(os.environ, SANDBOXD_URL=srv.base,
                SANDBOXD_TOKEN=token if token is not None else srv.tokens["acme"])


@pytest.fixture(scope="module", params=["stdio", "http"])
def seen(srv, request):
    """What the SDK's client saw over each transport, calling every tool
    (tests/compat/mcp_client.mjs)."""
    proc = run_node_client("mcp_client.mjs", [os.path.abspath(SANDBOXD), request.param],
                           package="@modelcontextprotocol/sdk", env=mcp_env(srv),
                           timeout=240 * SLOW)
    return json.loads(proc.stdout)


def text_of(result):
    return "\n".join(c["text"] for c in result["content"] if c["type"] == "text")


def test_initialize_and_tools(seen):
    assert seen["server"]["name"] == "sandboxd" and seen["server"]["version"]
    assert seen["capabilities"] == {"tools": {"listChanged": False}}
    assert "run_code" in seen["instructions"] and "create_session" in seen["instructions"]
    assert [t["name"] for t in seen["tools"]] == TOOLS
    for tool in seen["tools"]:
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False, tool
        assert len(tool["description"]) > 40, tool  # something an LLM can act on
        for name, prop in schema["properties"].items():
            assert "type" in prop, (tool["name"], name)
    run_code = seen["tools"][0]["inputSchema"]
    assert run_code["required"] == ["language"]
    assert set(run_code["properties"]["limits"]["properties"]) >= {"wall_ms", "memory_mb"}


def test_run_code(seen):
    run = seen["run"]
    assert run["isError"] is False
    assert text_of(run) == "status: ok (exit code 0)\n--- stdout ---\n4\n"
    assert run["structuredContent"]["status"] == "ok"
    assert run["structuredContent"]["stdout"] == "4\n"
    failed = seen["failed_run"]
    # A program that fails ran fine: a result, not a tool error.
    assert failed["isError"] is False
    assert "status: exit_nonzero (exit code 3)" in text_of(failed)
    assert "--- stderr ---\nto stderr" in text_of(failed)
    timeout = seen["timeout"]
    assert timeout["structuredContent"]["status"] == "timeout"
    assert "evidence: wall_timeout" in text_of(timeout)
    languages = seen["languages"]
    assert text_of(languages).startswith("Languages you may use")
    assert "- python: Python 3" in text_of(languages) and "- c:" not in text_of(languages)


def test_tool_errors(seen):
    bad = seen["bad_language"]
    assert bad["isError"] is True
    assert "HTTP 400" in text_of(bad) and "unknown language 'cobol'" in text_of(bad)
    assert bad["structuredContent"]["status"] == 400
    after_close = seen["after_close"]
    assert after_close["isError"] is True and "HTTP 404" in text_of(after_close)
    assert after_close["structuredContent"]["end_reason"] == "deleted"
    # An unknown tool is a protocol error (JSON-RPC invalid params), not a tool result.
    assert seen["unknown_tool"]["code"] == -32602
    assert "no_such_tool" in seen["unknown_tool"]["message"]


def test_session_round_trip(seen):
    opened = seen["opened"]
    session_id = opened["structuredContent"]["id"]
    assert opened["isError"] is False and session_id in text_of(opened)
    assert seen["write"]["structuredContent"] == {"path": "data/numbers.txt", "size": 6}
    assert seen["listing"]["structuredContent"]["entries"][0]["name"] == "numbers.txt"
    assert "file numbers.txt (6 bytes)" in text_of(seen["listing"])
    cell1 = seen["cell1"]
    assert cell1["structuredContent"]["results"] == [{"text/plain": "12"}]
    assert cell1["content"][1] == {"type": "text", "text": "12"}
    cell2 = seen["cell2"]
    # State survived: numbers and total from the first cell; the plot came back as an image.
    assert "--- stdout ---\n24\n" in text_of(cell2)
    images = [c for c in cell2["content"] if c["type"] == "image"]
    assert len(images) == 1 and images[0]["mimeType"] == "image/png"
    assert images[0]["data"].startswith(PNG_MAGIC)
    assert seen["read_text"]["content"] == [{"type": "text", "text": "3\n4\n5\n"}]
    png = seen["read_png"]["content"][0]
    assert png["type"] == "image" and png["mimeType"] == "image/png"
    assert png["data"].startswith(PNG_MAGIC)
    raised = seen["raised"]
    assert raised["isError"] is False
    assert "ZeroDivisionError: division by zero" in text_of(raised)
    assert seen["closed"]["isError"] is False


# The canceled executions the other transport's run of the test below saw already.
CANCELED_BEFORE = set()


def test_cancellation_stops_the_run(srv, seen):
    cancel = seen["cancel"]
    assert "rejected" in cancel and cancel["after_ms"] < 10000, cancel
    assert seen["after_cancel"]["structuredContent"]["stdout"] == "still here\n"
    # The service saw the client hang up and ended the sleep canceled, long before its 60 s.
    deadline = time.monotonic() + 20 * SLOW
    while True:
        rows = [r for r in audit_rows(srv.data_dir).values()
                if r["status"] == "canceled" and r["language"] == "python"
                and r["id"] not in CANCELED_BEFORE]
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(rows) == 1, f"canceled executions new in the audit log: {rows}"
    assert rows[0]["finished_at"] - rows[0]["created_at"] < 15000 * SLOW, rows[0]
    CANCELED_BEFORE.add(rows[0]["id"])



# --- the protocol over raw stdio -----------------------------------------------------------


def raw_session(srv, messages, token=None):
    """Sends each message (a dict, or a str sent as is) on its own line; returns the responses
    (by id, or in order for those without one) once the server has answered them all."""
    lines = "".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages)
    proc = subprocess.run([SANDBOXD, "mcp"], input=lines, env=mcp_env(srv, token),
                          capture_output=True, text=True, timeout=60 * SLOW, check=False)
    return proc, [json.loads(line) for line in proc.stdout.splitlines()]


def test_protocol_edges(srv):
    proc, answers = raw_session(srv, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "initialize",
         "params": {"protocolVersion": "1999-01-01"}},
        "{not json",
        [{"jsonrpc": "2.0", "id": 3, "method": "ping"}],
        {"jsonrpc": "1.0", "id": 4, "method": "ping"},
        {"jsonrpc": "2.0", "id": {"no": "objects"}, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "run_code",
                                                                       "arguments": [1]}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "run_code"},
        {"jsonrpc": "2.0", "id": 8, "method": "ping"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ])
    assert proc.returncode == 0, proc.stderr
    by_id = {json.dumps(a["id"]): a for a in answers}
    assert by_id["1"]["result"]["protocolVersion"] == "2024-11-05"
    assert by_id["2"]["result"]["protocolVersion"] == "2025-06-18"
    nulls = [a["error"]["code"] for a in answers if a["id"] is None]
    assert nulls == [-32700, -32600, -32600], answers  # parse error, batch, object id
    assert by_id["4"]["error"]["code"] == -32600
    assert by_id["5"]["error"]["code"] == -32601
    assert by_id["6"]["error"]["code"] == -32602
    assert by_id["7"]["error"]["code"] == -32602
    assert by_id["8"] == {"jsonrpc": "2.0", "id": 8, "result": {}}
    assert "9" not in by_id and len(answers) == 10, answers


def call_once(env, message):
    """The answer to one message, the input kept open until it came (at the end of its input the
    server cancels the calls still running)."""
    proc = subprocess.Popen([SANDBOXD, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30 * SLOW) == 0


def test_token_and_service_problems(srv):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"language": "python", "code": "1"}}}
    # A wrong token: the API's 401, as a tool error.
    result = call_once(mcp_env(srv, "wrong"), call)["result"]
    assert result["isError"] is True and "HTTP 401" in result["content"][0]["text"]
    # Nobody listening there: the tool error says so.
    result = call_once(dict(mcp_env(srv), SANDBOXD_URL="http://127.0.0.1:1/"), call)["result"]
    assert result["isError"] is True
    assert "run_code failed: sandboxd at http://127.0.0.1:1:" in result["content"][0]["text"]
    # No token at all (and no local token file to fall back on): it says how to give one.
    if os.path.exists("/var/lib/sandboxd/local-token"):
        pytest.skip("this machine has a local token file, which `sandboxd mcp` then uses")
    proc, _ = raw_session(srv, [], token="")
    assert proc.returncode == 78 and "SANDBOXD_TOKEN" in proc.stderr


# --- the protocol over raw HTTP (/mcp) -----------------------------------------------------


def post_mcp(srv, body, *, token="acme", headers=None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        h["Authorization"] = f"Bearer {srv.tokens[token]}"
    h.update(headers or {})
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(srv.url("/mcp"), data=data, headers=h, timeout=(5, 60 * SLOW))


def test_http_transport_edges(srv):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = post_mcp(srv, ping)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # A notification or a response is accepted without a body.
    r = post_mcp(srv, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (r.status_code, r.content) == (202, b"")
    r = post_mcp(srv, {"jsonrpc": "2.0", "id": 5, "result": {}})
    assert r.status_code == 202
    # Malformed: 400 with the JSON-RPC error.
    r = post_mcp(srv, "{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == -32700
    r = post_mcp(srv, [ping])
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600
    r = post_mcp(srv, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "nope"}})
    assert r.status_code == 200 and r.json()["error"]["code"] == -32602
    r = post_mcp(srv, ping, headers={"MCP-Protocol-Version": "1999-01-01"})
    assert r.status_code == 400
    r = post_mcp(srv, ping, headers={"MCP-Protocol-Version": "2025-06-18"})
    assert r.status_code == 200
    # The tenant's token, and no browser page of another origin (DNS rebinding).
    expect_problem(post_mcp(srv, ping, token=None), 401)
    expect_problem(post_mcp(srv, ping, headers={"Origin": "http://evil.example"}), 403)
    same = f"http://127.0.0.1:{srv.port}"
    assert post_mcp(srv, ping, headers={"Origin": same}).status_code == 200
    # No server stream and no sessions: GET and DELETE are 405.
    for method in ["GET", "DELETE"]:
        r = requests.request(method, srv.url("/mcp"), timeout=10,
                             headers={"Authorization": f"Bearer {srv.tokens['acme']}"})
        expect_problem(r, 405)
        assert r.headers["Allow"] == "POST"
    # A tool runs as the tenant: its quota and audit log.
    r = post_mcp(srv, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                       "params": {"name": "run_code",
                                  "arguments": {"language": "bash", "code": "echo via http"}}})
    result = r.json()["result"]
    assert result["isError"] is False and result["structuredContent"]["stdout"] == "via http\n"
    record = audit_rows(srv.data_dir)[result["structuredContent"]["id"]]
    assert record["tenant"] == "acme"
