"""Batches (issue 17, api/batches.h): test cases of one program judged against their expected
stdout (accepted, wrong_answer, or the run's own status), a compiled program compiled once, a
compile error answered by every case, a plain list of executions each validated on its own,
fields= trimming, and every case accounted for across a kill -9 mid-batch."""
import signal
import time

from serve_helpers import (NO_POOL, SLOW, audit_rows, expect_json, expect_problem, kept_data_dir,
                           parse_metrics, running_server, sample)

TIER = {"max_concurrency": 4, "max_wall_ms": 30000, "max_memory_mb": 512,
        "cpu_budget_ms": 6000000, "cpu_window_s": 60, "languages": "python, bash, c"}
TENANTS = {"acme": "t", "globex": "t"}


def submit(srv, body, tenant="acme", status=202):
    r = srv.request("POST", "/v1/batches", json=body, headers=srv.headers(tenant))
    answer = expect_json(r, status)
    if status == 202:
        assert r.headers["Location"] == f"/v1/batches/{answer['id']}", r.headers
    return answer


def finished(srv, batch_id, tenant="acme", timeout=120 * SLOW, query=""):
    deadline = time.monotonic() + timeout
    while True:
        r = srv.request("GET", f"/v1/batches/{batch_id}{query}",
                        headers=srv.headers(tenant, None, None))
        batch = expect_json(r)
        if batch["done"]:
            return batch
        assert time.monotonic() < deadline, batch["summary"]
        time.sleep(0.05)


DOUBLE = {"language": "python", "code": "print(int(input()) * 2)"}


def test_two_hundred_cases_with_every_kind_of_verdict():
    cases = [{"stdin": f"{i}\n", "expected_stdout": f"{2 * i}\n"} for i in range(196)]
    cases[7]["expected_stdout"] = "not it\n"                            # wrong_answer
    cases.append({"stdin": "x\n", "expected_stdout": "0\n"})            # exit_nonzero
    cases.append({"stdin": "1\n", "expected_stdout": "2",               # trim: accepted
                  "limits": {"wall_ms": 2000}})
    program = {"language": "python",
               "code": "import sys, time\nn = input()\n"
                       "if n == 'sleep': time.sleep(30)\n"
                       "if n == 'hog': b = bytearray(400 << 20)\n"
                       "print(int(n) * 2)"}
    cases.append({"stdin": "sleep\n", "limits": {"wall_ms": 500}})     # timeout
    cases.append({"stdin": "hog\n", "limits": {"memory_mb": 64}})      # memory_limit
    assert len(cases) == 200
    with running_server(tiers={"t": TIER}, tenants=TENANTS) as srv:
        answer = submit(srv, {"program": program, "cases": cases, "compare": "trim"})
        assert (answer["cases"], answer["status"]) == (200, "queued"), answer
        batch = finished(srv, answer["id"])
        assert batch["summary"] == {"accepted": 196, "wrong_answer": 1, "exit_nonzero": 1,
                                    "timeout": 1, "memory_limit": 1}, batch["summary"]
        results = batch["results"]
        assert [r["index"] for r in results] == list(range(200))
        assert results[7]["verdict"] == "wrong_answer" and results[7]["stdout"] == "14\n"
        assert results[198]["verdict"] == "timeout" and results[199]["verdict"] == "memory_limit"
        assert results[3]["verdict"] == "accepted" and results[3]["exit_code"] == 0
        # Each case is an execution of its own, with its record.
        record = expect_json(srv.get_execution(results[7]["id"]))
        assert record["status"] == "ok" and record["stdout"] == "14\n", record
        # Another tenant sees no such batch.
        expect_problem(srv.request("GET", f"/v1/batches/{answer['id']}",
                                   headers=srv.headers("globex", None, None)), 404)
        # fields= keeps what is asked for (and the index).
        trimmed = finished(srv, answer["id"], query="?fields=verdict")
        assert trimmed["results"][0] == {"index": 0, "verdict": "accepted"}
        expect_problem(srv.request("GET", f"/v1/batches/{answer['id']}?fields=colour",
                                   headers=srv.headers("acme", None, None)), 400, field="fields")


def test_the_comparisons():
    with running_server(tiers={"t": TIER}, tenants=TENANTS, pools=NO_POOL) as srv:
        program = {"language": "bash", "code": "echo ' 1   2'; echo"}
        verdicts = {}
        for compare in ("exact", "trim", "tokens"):
            answer = submit(srv, {"program": program, "compare": compare,
                                  "cases": [{"expected_stdout": "1 2\n"}]})
            verdicts[compare] = finished(srv, answer["id"])["results"][0]["verdict"]
        assert verdicts == {"exact": "wrong_answer", "trim": "wrong_answer",
                            "tokens": "accepted"}, verdicts


def test_a_compiled_program_compiles_once_and_a_compile_error_reaches_every_case():
    source = '#include <stdio.h>\nint main(void){int n; scanf("%d",&n); printf("%d\\n", n*n);}\n'
    with running_server(tiers={"t": TIER}, tenants=TENANTS) as srv:
        before = parse_metrics(srv.get("/metrics").text)
        cases = [{"stdin": f"{i}\n", "expected_stdout": f"{i * i}\n"} for i in range(6)]
        answer = submit(srv, {"program": {"language": "c", "code": source}, "cases": cases})
        batch = finished(srv, answer["id"])
        assert batch["summary"] == {"accepted": 6}, batch
        after = parse_metrics(srv.get("/metrics").text)

        def lookups(samples, result):
            return sample(samples, "sandboxd_compile_cache_lookups_total", result=result)
        assert lookups(after, "miss") - lookups(before, "miss") == 1
        assert lookups(after, "hit") - lookups(before, "hit") == 5
        broken = submit(srv, {"program": {"language": "c", "code": "int main(void) { oops }"},
                              "cases": [{"stdin": "1"}, {"stdin": "2"}, {"stdin": "3"}]})
        batch = finished(srv, broken["id"])
        assert batch["summary"] == {"compile_error": 3}, batch


def test_a_bad_case_refuses_the_batch_and_names_it():
    with running_server(tiers={"t": TIER}, tenants=TENANTS, pools=NO_POOL) as srv:
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"program": DOUBLE, "cases": [{"stdin": "1"}, {"colour": 1}]})
        expect_problem(r, 400, field="cases[1].colour")
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"program": DOUBLE,
                              "cases": [{"stdin": "1"}, {"limits": {"memory_mb": "lots"}}]})
        expect_problem(r, 400, field="cases[1].limits.memory_mb")
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"program": {"language": "cobol", "code": "x"}, "cases": [{}]})
        expect_problem(r, 400, field="program.language")
        for body, field in [({"program": DOUBLE, "cases": []}, "cases"),
                            ({"program": DOUBLE, "cases": [{}], "compare": "fuzzy"}, "compare"),
                            ({"program": {**DOUBLE, "stdin": "1"}, "cases": [{}]},
                             "program.stdin"),
                            ({"cases": [{}]}, "program")]:
            expect_problem(srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                                       json=body), 400, field=field)
        # Nothing of the refused batches was queued or recorded.
        assert sample(parse_metrics(srv.get("/metrics").text), "sandboxd_queue_depth",
                      tenant="acme") == 0


def test_a_list_of_executions_each_validated_on_its_own():
    with running_server(tiers={"t": TIER}, tenants=TENANTS, pools=NO_POOL) as srv:
        answer = submit(srv, {"executions": [
            {"language": "python", "code": "print('a')"},
            {"language": "cobol", "code": "x"},
            {"language": "bash", "code": "echo b; exit 4"},
            {"language": "python", "code": "print(1)", "wait": True},
        ]})
        assert answer["cases"] == 2, answer
        assert [(r["index"], r["problem"]["status"]) for r in answer["rejected"]] == \
            [(1, 400), (3, 400)], answer
        batch = finished(srv, answer["id"])
        assert batch["compare"] is None
        assert [(r["index"], r["verdict"], r["stdout"]) for r in batch["results"]] == \
            [(0, "accepted", "a\n"), (2, "exit_nonzero", "b\n")], batch
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"executions": [{"language": "cobol"}, 7]})
        problem = expect_problem(r, 400, field="executions")
        assert len(problem["rejected"]) == 2


def test_every_case_is_accounted_for_across_a_kill():
    tiers = {"t": {**TIER, "max_concurrency": 2}}
    program = {"language": "python", "code": "import time\ntime.sleep(0.2)\nprint(input())"}
    cases = [{"stdin": f"{i}", "expected_stdout": f"{i}\n"} for i in range(16)]
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants=TENANTS, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            srv.expected_rc = -signal.SIGKILL
            batch_id = submit(srv, {"program": program, "cases": cases})["id"]
            deadline = time.monotonic() + 30 * SLOW
            while expect_json(srv.request(
                    "GET", f"/v1/batches/{batch_id}?fields=verdict",
                    headers=srv.headers("acme", None, None)))["summary"].get("accepted", 0) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            srv.signal(signal.SIGKILL)
            assert srv.wait_exit(10) == -signal.SIGKILL
        with running_server(tiers=tiers, tenants=TENANTS, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            batch = finished(srv, batch_id)
        verdicts = [r["verdict"] for r in batch["results"]]
        assert len(verdicts) == 16 and "pending" not in verdicts, verdicts
        # The ones the kill interrupted say so (those running, and those the runners took in the
        # moment before the API heard of the engine's death: two at a time each); every other
        # one ran once and was accepted.
        assert set(verdicts) <= {"accepted", "internal_error", "canceled"}, verdicts
        assert verdicts.count("accepted") >= 16 - 2 * 2 - 2, verdicts
        rows = audit_rows(data_dir)
        assert len(rows) == 16
