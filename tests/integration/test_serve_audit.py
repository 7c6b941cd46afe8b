"""GET /v1/executions/{id}: the audit record of an execution, for its own tenant only. The record
must agree with the POST's response (status, usage, evidence, timing, effective limits, clamped,
output sizes and hashes) and keep the request with its code, stdin and file contents replaced by
their size and SHA-256 (and no output: store_output is off by default)."""

import concurrent.futures
import hashlib
import re
import time

import pytest

from serve_helpers import (STANDARD_TENANTS, STANDARD_TIERS, audit_rows, expect_json,
                           expect_problem, no_new_leaks, running_server)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

RECORD_KEYS = {"id", "tenant", "created_at", "finished_at", "language", "status", "exit_code",
               "signal", "error", "requested", "effective", "clamped", "usage", "evidence",
               "timing", "stdout_bytes", "stderr_bytes", "stdout_sha256", "stderr_sha256",
               "stdout", "stderr", "compile"}


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS) as server:
        yield server


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def digest(text):
    return {"bytes": len(text.encode()), "sha256": sha256(text)}


def test_own_record_matches_the_response(srv):
    code = "import sys\nprint('out \u00e9', sys.stdin.read())\nprint('err', file=sys.stderr)"
    request = {"language": "python", "code": code, "stdin": "in put", "args": ["a1"],
               "env": {"FOO": "bar"}, "limits": {"memory_mb": 9999, "wall_ms": 4000}}
    started = int(time.time() * 1000)
    result = expect_json(srv.post_execution(request), 200)
    ended = int(time.time() * 1000)
    assert result["status"] == "ok", result

    r = srv.get_execution(result["id"])
    record = expect_json(r, 200)
    assert r.headers.get("Cache-Control") == "no-store"
    assert set(record) == RECORD_KEYS, sorted(set(record) ^ RECORD_KEYS)
    assert record["id"] == result["id"]
    assert record["tenant"] == "acme"
    assert record["language"] == "python"
    assert record["status"] == "ok"
    assert record["exit_code"] == 0 and record["signal"] is None and record["error"] is None
    # Clock skew between us and the server is nil (same machine); allow 1 s of rounding.
    assert started - 1000 <= record["created_at"] <= record["finished_at"] <= ended + 1000, record
    assert record["effective"] == result["limits"]
    assert record["effective"]["memory_mb"] == 256
    assert record["clamped"] == result["clamped"] == ["memory_mb"]
    assert record["usage"] == result["usage"]
    assert record["evidence"] == result["evidence"]
    assert record["timing"] == result["timing"]

    stdout, stderr = result["stdout"], result["stderr"]
    assert stdout == "out \u00e9 in put\n" and stderr == "err\n"
    assert record["stdout_bytes"] == len(stdout.encode())
    assert record["stderr_bytes"] == len(stderr.encode())
    assert record["stdout_sha256"] == sha256(stdout)
    assert record["stderr_sha256"] == sha256(stderr)
    assert record["stdout"] is None and record["stderr"] is None  # store_output = false

    requested = record["requested"]
    assert requested["language"] == "python"
    assert requested["code"] == digest(code)
    assert requested["stdin"] == digest("in put")
    assert requested["args"] == ["a1"]
    assert requested["env"] == {"FOO": "bar"}
    assert requested["limits"] == {"memory_mb": 9999, "wall_ms": 4000}
    assert code not in r.text and "in put" not in r.text


def test_record_of_a_files_request_hashes_each_file(srv):
    files = [{"path": "main.py", "content": "import lib\nlib.go()\n"},
             {"path": "lib.py", "content": "def go():\n    print('went')\n", "executable": True}]
    result = expect_json(srv.post_execution({"language": "python", "files": files,
                                             "entrypoint": "main.py"}), 200)
    assert result["stdout"] == "went\n", result
    record = expect_json(srv.get_execution(result["id"]), 200)
    assert record["requested"]["entrypoint"] == "main.py"
    assert record["requested"]["files"] == [
        {"path": "main.py", "content": digest(files[0]["content"])},
        {"path": "lib.py", "content": digest(files[1]["content"]), "executable": True},
    ]
    assert record["stdout_sha256"] == sha256("went\n")


def test_record_of_a_failure_keeps_exit_code_and_signal(srv):
    exited = srv.run("import sys\nsys.exit(9)")
    record = expect_json(srv.get_execution(exited["id"]), 200)
    assert (record["status"], record["exit_code"], record["signal"]) == ("exit_nonzero", 9, None)

    killed = srv.run("import os\nos.kill(os.getpid(), 15)")
    assert killed["status"] == "signaled", killed
    record = expect_json(srv.get_execution(killed["id"]), 200)
    assert (record["status"], record["exit_code"], record["signal"]) == ("signaled", None, 15)


def test_record_keeps_the_compile_stage():
    """A compiled language's record has its compile stage; a queued one's keeps the compiler's
    message (its client reads the outcome from the record), a waited-for one's only what the
    response had besides its output, unless output is stored."""
    with running_server(tiers={"t": {"languages": "c, python"}}, tenants={"acme": "t"}) as srv:
        body = {"language": "c", "code": "int main( {"}
        result = expect_json(srv.post_execution(body), 200)
        assert result["status"] == "compile_error", result
        record = expect_json(srv.get_execution(result["id"]), 200)
        compile_stage = record["compile"]
        assert compile_stage["status"] == "exit_nonzero" and compile_stage["exit_code"] == 1
        assert compile_stage["stdout"] is None and compile_stage["stderr"] is None
        assert compile_stage["usage"] == result["compile"]["usage"]
        queued = expect_json(srv.post_execution({**body, "wait": False}), 202)
        r = srv.request("GET", f"/v1/executions/{queued['id']}?wait=30",
                        headers=srv.headers("acme", None, None))
        record = expect_json(r, 200)
        assert record["status"] == "compile_error", record
        assert "error" in record["compile"]["stderr"], record
        python = expect_json(srv.get_execution(expect_json(srv.post_execution(
            {"language": "python", "code": "print(1)"}), 200)["id"]), 200)
        assert python["compile"] is None


def test_record_of_a_timeout(srv):
    result = srv.run("import time\ntime.sleep(10)", limits={"wall_ms": 300})
    assert result["status"] == "timeout", result
    record = expect_json(srv.get_execution(result["id"]), 200)
    assert record["status"] == "timeout"
    assert record["evidence"]["wall_timeout"] is True
    assert record["effective"]["wall_ms"] == 300
    assert record["exit_code"] is None


def test_empty_output_hash_is_the_empty_string_hash(srv):
    result = srv.run("pass")
    record = expect_json(srv.get_execution(result["id"]), 200)
    assert record["stdout_bytes"] == 0 and record["stdout_sha256"] == sha256("")


def test_other_tenant_gets_404_indistinguishable_from_unknown(srv):
    result = srv.run("print('private to acme')")
    theirs = expect_problem(srv.get_execution(result["id"], tenant="globex"), 404)
    unknown = expect_problem(srv.get_execution("0" * 32, tenant="globex"), 404)
    assert theirs == unknown
    assert "private" not in str(theirs)
    # And the owner still sees it; the other tenant's own records work for the other tenant.
    expect_json(srv.get_execution(result["id"], tenant="acme"), 200)
    own = srv.run("print('globex')", tenant="globex")
    assert expect_json(srv.get_execution(own["id"], tenant="globex"), 200)["tenant"] == "globex"
    expect_problem(srv.get_execution(own["id"], tenant="acme"), 404)


def test_recent_executions_list_the_tenants_own(srv):
    """GET /v1/executions: the tenant's records, newest first, without their output; paged."""
    mine = []
    for i in range(3):
        mine.append(srv.run(f"print({i})")["id"])
        time.sleep(0.002)  # a page ends at a millisecond: keep them apart
    theirs = srv.run("print('globex')", tenant="globex")["id"]

    def listing(query="", tenant="acme"):
        r = srv.request("GET", f"/v1/executions{query}",
                        headers=srv.headers(tenant, None, None))
        return expect_json(r, 200)["executions"]

    page = listing("?limit=2")
    assert [e["id"] for e in page] == mine[:0:-1], page
    assert all(e["tenant"] == "acme" and "stdout" not in e for e in page)
    assert set(page[0]) == RECORD_KEYS - {"stdout", "stderr", "compile"}
    rest = listing(f"?limit=100&before={page[-1]['created_at']}")
    assert mine[0] in [e["id"] for e in rest] and mine[1] not in [e["id"] for e in rest]
    assert theirs not in [e["id"] for e in listing()]
    assert theirs in [e["id"] for e in listing(tenant="globex")]
    for query in ["?limit=0", "?limit=101", "?limit=x", "?before=-1"]:
        expect_problem(srv.request("GET", f"/v1/executions{query}",
                                   headers=srv.headers("acme", None, None)), 400)
    expect_problem(srv.request("GET", "/v1/executions"), 401)


def test_rejected_request_leaves_no_record(srv):
    """Only executions are recorded: a request refused by validation, by the tier, or for an
    unknown token adds no record (counted in the store itself), and a made-up id in the right
    shape is unknown."""
    before = len(audit_rows(srv.data_dir))
    expect_problem(srv.post_execution({"language": "cobol", "code": "x"}), 400)
    expect_problem(srv.post_execution({"language": "python", "code": "x",
                                       "backend": "firecracker"}), 400)
    expect_problem(srv.post_execution({"language": "python", "code": "x", "backend": "gvisor"}),
                   403)  # a backend the tier does not allow
    expect_problem(srv.post_execution({"language": "python", "code": "x"}, token="sbx_nope"), 401)
    expect_problem(srv.get_execution("1" * 32), 404)
    assert len(audit_rows(srv.data_dir)) == before
    srv.run("print(1)")
    assert len(audit_rows(srv.data_dir)) == before + 1  # the count would have seen one


def test_ids_are_lowercase_hex(srv):
    result = srv.run("print(1)")
    assert re.fullmatch(r"[0-9a-f]{32}", result["id"])
    expect_problem(srv.get_execution(result["id"].upper()), 404)


def test_parallel_executions_are_all_recorded(srv):
    """SQLite under concurrent writers: every execution that answered 200 has its record."""
    def one(i):
        r = srv.post_execution({"language": "python", "code": f"print({i} * 3)"},
                               tenant="globex")
        return i, expect_json(r, 200)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:  # pro: max_concurrency 8
        results = list(pool.map(one, range(32)))
    assert len({result["id"] for _, result in results}) == 32
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        records = list(pool.map(lambda pair: expect_json(
            srv.get_execution(pair[1]["id"], tenant="globex"), 200), results))
    for (i, result), record in zip(results, records):
        assert result["stdout"] == f"{i * 3}\n", result
        assert record["id"] == result["id"] and record["tenant"] == "globex"
        assert record["stdout_sha256"] == sha256(result["stdout"])
        assert record["usage"] == result["usage"]


def test_store_output_keeps_the_output_in_the_record():
    """server.store_output = true: the record carries the output itself, as the response did
    (invalid UTF-8 replaced the same way)."""
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"store_output": "true"}) as srv:
        code = "import sys\nsys.stdout.buffer.write(b'kept \\xff\\n')\nprint('e', file=sys.stderr)"
        result = srv.run(code)
        assert result["stdout"] == "kept \ufffd\n" and result["stderr"] == "e\n", result
        record = expect_json(srv.get_execution(result["id"]), 200)
        assert record["stdout"] == result["stdout"]
        assert record["stderr"] == result["stderr"]
        # The hash is of the bytes the program wrote, before any replacement.
        assert record["stdout_sha256"] == hashlib.sha256(b"kept \xff\n").hexdigest()
        assert record["stdout_bytes"] == len(b"kept \xff\n")
