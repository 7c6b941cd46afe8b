"""Quotas: per tenant concurrency (429 + Retry-After while N executions run, recovery after),
the rolling CPU budget (429 once the window's charges reach it, recovery when the window rolls),
and a burst of 200 requests at concurrency 16 that loses none (every one is a 200 or a 429).
No silent queueing: an over-quota request is answered at once."""

import concurrent.futures
import threading
import time

import pytest
import requests

from serve_helpers import (FREE_TIER, NO_POOL, PRO_TIER, SLOW, expect_json, expect_problem,
                           no_new_leaks, running_server, sample)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

SLEEP_CODE = "import time\ntime.sleep({})\nprint('slept')"


def retry_after(response):
    value = response.headers.get("Retry-After")
    assert value is not None and value.isdigit(), f"Retry-After {value!r}: {response.headers}"
    return int(value)


def post_in_thread(srv, body, tenant="acme"):
    """Starts the POST in a thread; returns (thread, outcome dict with 'response' or 'error')."""
    outcome = {}

    def go():
        try:
            outcome["response"] = srv.post_execution(body, tenant=tenant)
        except requests.RequestException as e:
            outcome["error"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, outcome


# --- concurrency ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def srv():
    with running_server(tiers={"free": FREE_TIER, "pro": PRO_TIER},
                        tenants={"acme": "free", "globex": "pro"}) as server:
        yield server


def test_concurrency_quota_429_while_full_then_recovers(srv):
    before = srv.metrics()
    long_body = {"language": "python", "code": SLEEP_CODE.format(3), "limits": {"wall_ms": 5000}}
    running = [post_in_thread(srv, long_body) for _ in range(2)]
    try:
        srv.wait_for_running(2)
        t0 = time.monotonic()
        r = srv.post_execution({"language": "python", "code": "print('third')"})
        elapsed = time.monotonic() - t0
        problem = expect_problem(r, 429)
        assert "acme" in problem["detail"], problem
        # Until the earlier of the two wall deadlines (5 s after they started), at least 1.
        assert 1 <= retry_after(r) <= 5, r.headers
        assert elapsed < 2 * SLOW, f"the refusal took {elapsed:.2f}s: it must not queue"

        # Another tenant is not limited by acme's executions.
        other = expect_json(srv.post_execution({"language": "python", "code": "print(1)"},
                                               tenant="globex"), 200)
        assert other["status"] == "ok", other
    finally:
        for thread, _ in running:
            thread.join(timeout=30 * SLOW)
    for thread, outcome in running:
        assert not thread.is_alive()
        assert "response" in outcome, outcome
        result = expect_json(outcome["response"], 200)
        assert result["status"] == "ok" and result["stdout"] == "slept\n", result

    # Both finished: capacity is back at once.
    after_run = expect_json(srv.post_execution({"language": "python", "code": "print('next')"}),
                            200)
    assert after_run["stdout"] == "next\n"

    after = srv.metrics()
    key = dict(tenant="acme", reason="concurrency")
    assert sample(after, "sandboxd_quota_rejections_total", **key) == \
        sample(before, "sandboxd_quota_rejections_total", **key) + 1
    assert sample(after, "sandboxd_quota_rejections_total", tenant="globex",
                  reason="concurrency") == 0


def test_retry_after_follows_how_long_executions_take():
    """Retry-After says when a slot is expected to free from how long the tenant's executions
    take, not their 10 s deadline: programs that take 0.2 s answer 1 s (the smallest), and never
    0."""
    with running_server(tiers={"free": FREE_TIER}, tenants={"acme": "free"}) as srv:
        short = {"language": "python", "code": SLEEP_CODE.format(0.2)}
        for _ in range(4):
            assert expect_json(srv.post_execution(short), 200)["status"] == "ok"
        running = [post_in_thread(srv, {**short, "code": SLEEP_CODE.format(2)})
                   for _ in range(2)]
        try:
            srv.wait_for_running(2)
            r = srv.post_execution(short)
            expect_problem(r, 429)
            print(f"Retry-After with 0.2 s programs running: {r.headers['Retry-After']}")
            assert retry_after(r) == 1, r.headers
        finally:
            for thread, _ in running:
                thread.join(timeout=30 * SLOW)


def test_refused_request_is_not_run(srv):
    """A 429'd request must not run later either (no silent queue): its side effect never shows
    up, and the execution counters do not move for it."""
    long_body = {"language": "python", "code": SLEEP_CODE.format(1.5), "limits": {"wall_ms": 5000}}
    running = [post_in_thread(srv, long_body) for _ in range(2)]
    try:
        srv.wait_for_running(2)
        before = srv.metrics()
        expect_problem(srv.post_execution({"language": "python", "code": "print('x')"}), 429)
    finally:
        for thread, _ in running:
            thread.join(timeout=30 * SLOW)
    after = srv.metrics()
    total = sum(v for (name, labels), v in after.items()
                if name == "sandboxd_executions_total" and ("tenant", "acme") in labels)
    total_before = sum(v for (name, labels), v in before.items()
                       if name == "sandboxd_executions_total" and ("tenant", "acme") in labels)
    assert total == total_before + 2, (total_before, total)


# --- CPU budget -----------------------------------------------------------------------------------

BURN_CODE = ("import time\nend = time.process_time() + 0.4\n"
             "while time.process_time() < end:\n    pass\nprint('burned')")


def test_cpu_budget_429_then_recovers_when_the_window_rolls():
    tiers = {"metered": {**FREE_TIER, "cpu_budget_ms": 300, "cpu_window_s": 3}}
    with running_server(tiers=tiers, tenants={"acme": "metered", "globex": "metered"}) as srv:
        burn = {"language": "python", "code": BURN_CODE}
        results = []
        refused = None
        for _ in range(3):
            r = srv.post_execution(burn)
            if r.status_code == 429:
                refused = r
                break
            result = expect_json(r, 200)
            assert result["status"] == "ok", result
            assert result["usage"]["cpu_ms"] >= 400, result
            results.append(result)
        assert refused is not None, f"no 429 after {len(results)} burns of 400 ms over a 300 ms " \
                                    f"budget"
        assert len(results) == 1, "the budget (300 ms) is spent after one 400 ms burn"
        problem = expect_problem(refused, 429)
        assert "budget" in problem["detail"].lower() or "cpu" in problem["detail"].lower(), problem
        wait = retry_after(refused)
        assert 1 <= wait <= 3, refused.headers  # the charge leaves the 3 s window by then

        # Still refused a moment later (the window has not rolled), even for a tiny program.
        expect_problem(srv.post_execution({"language": "python", "code": "print(1)"}), 429)
        # The other tenant has its own budget.
        expect_json(srv.post_execution({"language": "python", "code": "print(1)"},
                                       tenant="globex"), 200)

        time.sleep(wait + 0.3)
        again = expect_json(srv.post_execution({"language": "python", "code": "print('back')"}),
                            200)
        assert again["stdout"] == "back\n"

        metrics = srv.metrics()
        assert sample(metrics, "sandboxd_quota_rejections_total", tenant="acme",
                      reason="cpu_budget") == 2
        assert sample(metrics, "sandboxd_quota_rejections_total", tenant="acme",
                      reason="concurrency") == 0


# --- the engine's own capacity --------------------------------------------------------------------


def test_engine_capacity_is_answered_at_once_not_queued():
    """server.max_sandboxes bounds the engine whatever the tiers allow; over it the request is
    answered at once with 503 at-capacity and Retry-After, never a 200 that says it failed;
    nothing queues or hangs, and the refusal leaves no audit record and counts as no execution."""
    tiers = {"wide": {**FREE_TIER, "max_concurrency": 4}}
    # Without the warm pool: its idle entries hold engine slots too (see the next test).
    with running_server(tiers=tiers, tenants={"acme": "wide"}, server={"max_sandboxes": 1},
                        pools=NO_POOL) as srv:
        long_body = {"language": "python", "code": SLEEP_CODE.format(2),
                     "limits": {"wall_ms": 5000}}
        thread, outcome = post_in_thread(srv, long_body)
        try:
            srv.wait_for_running(1)
            t0 = time.monotonic()
            r = srv.post_execution({"language": "python", "code": "print('second')"})
            elapsed = time.monotonic() - t0
        finally:
            thread.join(timeout=30 * SLOW)
        assert elapsed < 1.5 * SLOW, f"took {elapsed:.2f}s: queued behind the running one?"
        print(f"over max_sandboxes: {r.status_code} {r.headers.get('Retry-After')} {r.text[:300]}")
        expect_problem(r, 503, slug="at-capacity")
        # Estimated from the running one: no history yet, so its 5 s deadline bounds it.
        assert 1 <= int(r.headers["Retry-After"]) <= 5, r.headers
        first = expect_json(outcome["response"], 200)
        assert first["status"] == "ok", first
        m = srv.metrics()
        assert sample(m, "sandboxd_executions_total", tenant="acme", status="internal_error") == 0
        assert sample(m, "sandboxd_executions_total", tenant="acme", status="ok") == 1
        assert sample(m, "sandboxd_quota_rejections_total", tenant="acme",
                      reason="capacity") == 1
        # The refused one charged nothing and holds no slot: the next runs.
        assert expect_json(srv.post_execution({"language": "python", "code": "print(3)"}),
                           200)["stdout"] == "3\n"


def test_idle_pool_entries_do_not_starve_cold_executions():
    """README: max_sandboxes is the number of executions running at once. With none running, an
    execution that cannot use the pool (bash) must run even when idle pool entries fill every
    engine slot: an idle entry is spare capacity, not work."""
    with running_server(tiers={"free": FREE_TIER}, tenants={"acme": "free"},
                        server={"max_sandboxes": 2}) as srv:
        deadline = time.monotonic() + 10 * SLOW
        while sample(srv.metrics(), "sandboxd_pool_entries", state="idle") < 2:
            assert time.monotonic() < deadline, "the pool did not fill"
            time.sleep(0.05)
        assert srv.running_executions() == 0
        result = expect_json(srv.post_execution({"language": "bash", "code": "echo cold"}), 200)
        assert result["status"] == "ok" and result["stdout"] == "cold\n", result


# --- burst (kept last: the session's final leak audit is reported against the last test) ----


def test_burst_of_200_at_concurrency_16_loses_none():
    tiers = {"burst": {**PRO_TIER, "max_concurrency": 8}}
    with running_server(tiers=tiers, tenants={"acme": "burst"}) as srv:
        body = {"language": "python", "code": "print(2+2)"}
        local = threading.local()

        def one(_):
            # One keep-alive session per worker thread (requests' Session is not thread-safe).
            if not hasattr(local, "session"):
                local.session = requests.Session()
            try:
                return srv.post_execution(body, session=local.session)
            except requests.RequestException as e:
                return e

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            outcomes = list(pool.map(one, range(200)))
        elapsed = time.monotonic() - t0

        errors = [o for o in outcomes if isinstance(o, Exception)]
        assert not errors, f"{len(errors)} requests got no response, e.g. {errors[0]!r}"
        codes = {}
        for r in outcomes:
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
        assert set(codes) <= {200, 429}, f"status codes {codes}; e.g. " + next(
            r.text[:500] for r in outcomes if r.status_code not in (200, 429))
        assert codes.get(200, 0) > 0, codes
        for r in outcomes:
            if r.status_code == 200:
                result = r.json()
                assert result["status"] == "ok" and result["stdout"] == "4\n", result
            else:
                expect_problem(r, 429)
                assert retry_after(r) >= 1

        # The server's own accounting agrees with what the clients saw.
        metrics = srv.metrics()
        assert sample(metrics, "sandboxd_executions_total", tenant="acme", status="ok") == \
            codes.get(200, 0)
        rejected = sample(metrics, "sandboxd_quota_rejections_total", tenant="acme",
                          reason="concurrency") + \
            sample(metrics, "sandboxd_quota_rejections_total", tenant="acme", reason="cpu_budget")
        assert rejected == codes.get(429, 0), (codes, rejected)
        assert sample(metrics, "sandboxd_http_requests_total", code="200") >= codes.get(200, 0)
        print(f"burst: {codes} in {elapsed:.1f}s")
        assert srv.get("/health").status_code == 200
