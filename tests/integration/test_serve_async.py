"""Asynchronous executions (issue 17, api/async.h): "wait": false or Prefer: respond-async is
answered 202 and committed to the store's queue; GET shows queued (with a place), running or
the record with the output, and long-polls; DELETE cancels a queued or running one; a tier's
max_queued bounds the waiting; tenants take turns; nothing accepted is lost across kill -9."""
import signal
import time

from serve_helpers import (NO_POOL, SLOW, audit_rows, expect_json, expect_problem, kept_data_dir,
                           parse_metrics, running_server, sample)

TIER = {"max_concurrency": 1, "max_wall_ms": 30000, "cpu_budget_ms": 600000,
        "cpu_window_s": 60, "languages": "python, bash, sh"}


def sleeping(seconds, **fields):
    return {"language": "python", "code": f"import time\ntime.sleep({seconds})\nprint('slept')",
            "wait": False, **fields}


def queue(srv, body, tenant="acme", headers=None):
    r = srv.post_execution(body, tenant=tenant, headers=headers)
    queued = expect_json(r, 202)
    assert queued["status"] == "queued" and queued["queue_position"] >= 1, queued
    assert r.headers["Location"] == f"/v1/executions/{queued['id']}", r.headers
    return queued["id"]


def long_poll(srv, execution_id, seconds=20, tenant="acme"):
    r = srv.request("GET", f"/v1/executions/{execution_id}?wait={seconds}",
                    headers=srv.headers(tenant, None, None), timeout=seconds + 30)
    return expect_json(r)


def wait_for_status(srv, execution_id, status, timeout=20 * SLOW):
    deadline = time.monotonic() + timeout
    while True:
        record = expect_json(srv.get_execution(execution_id))
        if record["status"] == status:
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.02)


def test_an_async_execution_is_answered_at_once_and_its_record_has_the_result():
    with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, pools=NO_POOL) as srv:
        execution_id = queue(srv, {"language": "python", "wait": False,
                                   "code": "import sys\nprint('out')\nprint('err', file=sys.stderr)"
                                           "\nsys.exit(3)"})
        record = long_poll(srv, execution_id)
        assert record["status"] == "exit_nonzero" and record["exit_code"] == 3, record
        # The output is kept for the client that did not wait, whatever store_output says.
        assert (record["stdout"], record["stderr"]) == ("out\n", "err\n"), record
        assert record["requested"]["code"]["bytes"] > 0  # the record keeps a digest, not code
        # Prefer: respond-async does the same for a body without "wait".
        other = queue(srv, {"language": "bash", "code": "echo $((6*7))"},
                      headers={"Prefer": "respond-async"})
        assert long_poll(srv, other)["stdout"] == "42\n"
        metrics = parse_metrics(srv.get("/metrics").text)
        assert sample(metrics, "sandboxd_queue_wait_seconds_count") == 2
        assert sample(metrics, "sandboxd_queue_depth", tenant="acme") == 0
        assert sample(metrics, "sandboxd_executions_total", tenant="acme",
                      status="exit_nonzero") == 1


def test_bad_asynchrony_fields_are_refused():
    with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, pools=NO_POOL) as srv:
        base = {"language": "python", "code": "print(1)"}
        expect_problem(srv.post_execution({**base, "wait": "no"}), 400, field="wait")
        expect_problem(srv.post_execution({**base, "retry": True}), 400, field="retry")
        r = srv.request("GET", "/v1/executions/" + "0" * 32 + "?wait=61",
                        headers=srv.headers("acme", None, None))
        expect_problem(r, 400, field="wait")


def test_queued_and_running_executions_are_canceled_and_the_queue_moves_on():
    tiers = {"t": TIER}
    with running_server(tiers=tiers, tenants={"acme": "t", "globex": "t"}, pools=NO_POOL) as srv:
        first = queue(srv, sleeping(20))
        second = queue(srv, sleeping(20))
        third = queue(srv, {"language": "python", "code": "print('third')", "wait": False})
        wait_for_status(srv, first, "running")
        record = expect_json(srv.get_execution(second))
        assert (record["status"], record["queue_position"]) == ("queued", 1), record
        assert record["estimated_start_ms"] >= 0
        # Another tenant sees neither, nor cancels them.
        expect_problem(srv.request("DELETE", f"/v1/executions/{second}",
                                   headers=srv.headers("globex", None, None)), 404)
        canceled = expect_json(srv.request("DELETE", f"/v1/executions/{second}",
                                           headers=srv.headers("acme", None, None)))
        assert canceled["status"] == "canceled", canceled
        started = time.monotonic()
        canceled = expect_json(srv.request("DELETE", f"/v1/executions/{first}",
                                           headers=srv.headers("acme", None, None)))
        assert canceled["status"] == "canceled" and time.monotonic() - started < 10, canceled
        assert long_poll(srv, third)["stdout"] == "third\n"
        expect_problem(srv.request("DELETE", f"/v1/executions/{first}",
                                   headers=srv.headers("acme", None, None)), 409)
        expect_problem(srv.request("DELETE", "/v1/executions/" + "0" * 32,
                                   headers=srv.headers("acme", None, None)), 404)


def test_a_tier_bounds_what_a_tenant_may_have_queued():
    tiers = {"t": {**TIER, "max_queued": 2}}
    with running_server(tiers=tiers, tenants={"acme": "t"}, pools=NO_POOL) as srv:
        running = queue(srv, sleeping(20))
        wait_for_status(srv, running, "running")
        queued = [queue(srv, sleeping(20)) for _ in range(2)]
        r = srv.post_execution(sleeping(1))
        expect_problem(r, 429)
        assert int(r.headers["Retry-After"]) >= 1
        metrics = parse_metrics(srv.get("/metrics").text)
        assert sample(metrics, "sandboxd_queue_depth", tenant="acme") == 2
        assert sample(metrics, "sandboxd_quota_rejections_total", tenant="acme",
                      reason="queued") == 1
        for execution_id in [running, *queued]:
            srv.request("DELETE", f"/v1/executions/{execution_id}",
                        headers=srv.headers("acme", None, None))


def test_tenants_take_turns_when_the_server_is_full():
    """One sandbox for the whole server: a tenant's six queued executions do not keep another
    tenant's one waiting until they are all done; it runs second."""
    tiers = {"t": {**TIER, "max_concurrency": 4}}
    with running_server(tiers=tiers, tenants={"acme": "t", "globex": "t"}, pools=NO_POOL,
                        server={"max_sandboxes": 1}) as srv:
        big = [queue(srv, sleeping(0.3)) for _ in range(6)]
        small = queue(srv, {"language": "python", "code": "print('small')", "wait": False},
                      tenant="globex")
        assert long_poll(srv, small, tenant="globex")["stdout"] == "small\n"
        records = [long_poll(srv, execution_id) for execution_id in big]
        assert all(r["status"] == "ok" for r in records), records
        small_end = expect_json(srv.get_execution(small, tenant="globex"))["finished_at"]
        later = [r for r in records if r["finished_at"] > small_end]
        assert len(later) >= 4, (small_end, [r["finished_at"] for r in records])


def test_nothing_accepted_is_lost_when_the_service_is_killed():
    """kill -9 with two executions running (one asked to retry) and two queued: after the
    restart the queued ones run, the retrying one runs again, the other is recorded
    interrupted (or canceled: its worker's answer to the engine's death), and none is left
    queued or running."""
    tiers = {"t": {**TIER, "max_concurrency": 2}}
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "t"}, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            srv.expected_rc = -signal.SIGKILL
            retried = queue(srv, sleeping(3, retry=True))
            interrupted = queue(srv, sleeping(3))
            waiting = [queue(srv, {"language": "python", "code": f"print({i})", "wait": False})
                       for i in range(2)]
            wait_for_status(srv, retried, "running")
            wait_for_status(srv, interrupted, "running")
            srv.signal(signal.SIGKILL)
            assert srv.wait_exit(10) == -signal.SIGKILL
        # A waiting one that a runner took in the moment after the engine died (before the API
        # heard of it) may have reached it: recorded interrupted after the restart, never run
        # twice. The rest stay queued and run.
        rows = audit_rows(data_dir)
        assert {rows[i]["status"] for i in waiting} <= {"queued", "running"}, rows
        with running_server(tiers=tiers, tenants={"acme": "t"}, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            for i, execution_id in enumerate(waiting):
                record = long_poll(srv, execution_id)
                if rows[execution_id]["status"] == "queued":
                    assert record["stdout"] == f"{i}\n", record
                else:
                    assert record["status"] == "internal_error", record
            record = long_poll(srv, retried)
            assert (record["status"], record["stdout"]) == ("ok", "slept\n"), record
            record = long_poll(srv, interrupted)
            assert record["status"] in ("internal_error", "canceled"), record
        rows = audit_rows(data_dir)
        assert len(rows) == 4 and not [r for r in rows.values()
                                       if r["status"] in ("queued", "running")], rows


def test_sigterm_lets_a_running_one_end_and_never_runs_it_again():
    """SIGTERM drains: the runners take nothing new (it stays queued in the store), the running
    one ends within the grace and is recorded; after the restart the queued one runs and the
    ended one is not run a second time."""
    with kept_data_dir() as data_dir:
        with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, data_dir=data_dir,
                            pools=NO_POOL, server={"shutdown_grace_s": 10}) as srv:
            running = queue(srv, sleeping(1))
            waiting = queue(srv, {"language": "python", "code": "print('later')",
                                  "wait": False})
            wait_for_status(srv, running, "running")
            # The record says running once a runner took it from the store, a moment before
            # the engine has its RUN (the next test is about that moment); the program sleeps 1 s.
            time.sleep(0.3)
            srv.signal(signal.SIGTERM)
            assert srv.wait_exit(30) == 0
        rows = audit_rows(data_dir)
        assert (rows[running]["status"], rows[waiting]["status"]) == ("ok", "queued"), rows
        finished_at = rows[running]["finished_at"]
        with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            assert long_poll(srv, waiting)["stdout"] == "later\n"
            time.sleep(1.5)
            metrics = parse_metrics(srv.get("/metrics").text)
            assert sample(metrics, "sandboxd_executions_total", tenant="acme", status="ok") == 1
            record = expect_json(srv.get_execution(running))
            assert (record["status"], record["finished_at"]) == ("ok", finished_at), record


def test_sigterm_as_a_runner_takes_one_leaves_it_queued_or_done():
    """A SIGTERM between a runner's take (the record says running) and the engine's receipt of
    the RUN: the draining engine still reads it and refuses it as stopping, and the execution
    is queued again, or it ran and is recorded; never left running for the next start to guess
    at, and the API process exits by itself (serve kills one that does not, and says so)."""
    for attempt in range(4):
        with kept_data_dir() as data_dir:
            with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, data_dir=data_dir,
                                pools=NO_POOL, server={"shutdown_grace_s": 10}) as srv:
                taken = queue(srv, sleeping(0.2))
                queue(srv, {"language": "python", "code": "print('later')", "wait": False})
                wait_for_status(srv, taken, "running")
                srv.signal(signal.SIGTERM)
                assert srv.wait_exit(30) == 0
                stderr = srv.stderr()
            assert "did not exit" not in stderr, stderr[-3000:]
            status = audit_rows(data_dir)[taken]["status"]
            assert status in ("ok", "queued"), (attempt, status, stderr[-3000:])


def test_prefer_respond_async_allows_retry_and_a_batch_past_max_queued_is_refused():
    tiers = {"t": {**TIER, "max_queued": 3}}
    with running_server(tiers=tiers, tenants={"acme": "t"}, pools=NO_POOL) as srv:
        execution_id = queue(srv, {"language": "bash", "code": "echo ok", "retry": True},
                             headers={"Prefer": "respond-async"})
        assert long_poll(srv, execution_id)["stdout"] == "ok\n"
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"program": {"language": "bash", "code": "true"},
                              "cases": [{}] * 4})
        expect_problem(r, 400, field="cases")
