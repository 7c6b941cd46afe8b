"""GET /metrics: Prometheus text exposition 0.0.4 with executions by tenant and status, per-phase
latency histograms, quota rejections, sandboxes alive and HTTP responses by code; the counters
move with what the server does."""

import threading
import time

import pytest
import requests

from serve_helpers import (FREE_TIER, SLOW, STANDARD_TENANTS, STANDARD_TIERS, expect_problem,
                           make_token, no_new_leaks, parse_metrics, running_server, sample)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

PHASES = ("acquire", "setup", "run", "teardown", "total")
BUCKETS = (".0001", ".00025", ".0005", ".001", ".0025", ".005", ".01", ".025", ".05", ".1", ".25", ".5", "1", "2.5", "5",
           "10")


@pytest.fixture(scope="module")
def srv():
    tiers = {"free": FREE_TIER, "solo": {**FREE_TIER, "max_concurrency": 1}}
    with running_server(tiers=tiers, tenants={"acme": "free", "globex": "free",
                                              "loner": "solo"}) as server:
        yield server


def scrape(srv, types=None):
    r = srv.get("/metrics")
    assert r.status_code == 200, r.text[:1000]
    content_type = r.headers.get("Content-Type", "")
    assert content_type.startswith("text/plain"), content_type
    assert "version=0.0.4" in content_type, content_type
    return parse_metrics(r.text, types), r.text


def histogram(samples, phase):
    """(buckets {le: count}, sum, count) of one phase."""
    name = "sandboxd_phase_duration_seconds"
    buckets = {dict(labels)["le"]: value for (n, labels), value in samples.items()
               if n == name + "_bucket" and dict(labels).get("phase") == phase}
    return (buckets, sample(samples, name + "_sum", phase=phase),
            sample(samples, name + "_count", phase=phase))


def test_families_and_types(srv):
    types = {}
    samples, text = scrape(srv, types)
    required = {
        "sandboxd_executions_total": "counter",
        "sandboxd_phase_duration_seconds": "histogram",
        "sandboxd_quota_rejections_total": "counter",
        "sandboxd_sandboxes_alive": "gauge",
        "sandboxd_http_requests_total": "counter",
        # The warm pools (README "Warm pools").
        "sandboxd_pool_entries": "gauge",
        "sandboxd_pool_created_total": "counter",
        "sandboxd_pool_destroyed_total": "counter",
        "sandboxd_pool_hits_total": "counter",
        "sandboxd_pool_misses_total": "counter",
    }
    assert {k: types.get(k) for k in required} == required, types
    assert all(family.startswith("sandboxd_") for family in types), types
    for family in types:
        assert f"# HELP {family} " in text, family
    assert ("sandboxd_sandboxes_alive", ()) in samples
    for phase in PHASES:
        buckets, _, _ = histogram(samples, phase)
        assert "+Inf" in buckets, (phase, sorted(buckets))
        assert {float(le) for le in buckets if le != "+Inf"} == {float(b) for b in BUCKETS}, \
            (phase, sorted(buckets))


def test_execution_moves_the_counters_and_histograms(srv):
    before, _ = scrape(srv)
    result = srv.run("print('counted')")
    assert result["status"] == "ok"
    failed = srv.run("import sys\nsys.exit(2)", tenant="globex")
    assert failed["status"] == "exit_nonzero"
    after, _ = scrape(srv)

    def delta(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("sandboxd_executions_total", tenant="acme", status="ok") == 1
    assert delta("sandboxd_executions_total", tenant="globex", status="exit_nonzero") == 1
    assert delta("sandboxd_executions_total", tenant="globex", status="ok") == 0
    assert delta("sandboxd_executions_total", tenant="acme", status="exit_nonzero") == 0
    assert delta("sandboxd_http_requests_total", code="200") >= 3  # 2 POSTs + 1 scrape
    for phase in PHASES:
        buckets_before, sum_before, count_before = histogram(before, phase)
        buckets, total, count = histogram(after, phase)
        assert count == count_before + 2, (phase, count_before, count)
        assert total >= sum_before, phase
        values = [buckets[le] for le in sorted(buckets, key=lambda s: float(s))]
        assert values == sorted(values), f"{phase}: buckets are not cumulative: {buckets}"
        assert buckets["+Inf"] == count, (phase, buckets, count)
    # The run phase of a python start takes well over a millisecond.
    _, run_sum, _ = histogram(after, "run")
    _, run_sum_before, _ = histogram(before, "run")
    assert run_sum - run_sum_before > 0.001


def test_error_responses_are_counted_by_code(srv):
    before, _ = scrape(srv)
    expect_problem(srv.post_execution({"language": "cobol", "code": "x"}), 400)
    expect_problem(srv.post_execution({"language": "python", "code": "x"}, tenant=None), 401)
    expect_problem(srv.get("/nope"), 404)
    after, _ = scrape(srv)
    for code in ("400", "401", "404"):
        assert sample(after, "sandboxd_http_requests_total", code=code) == \
            sample(before, "sandboxd_http_requests_total", code=code) + 1, code


def test_quota_rejection_is_counted_and_sandboxes_alive_is_reported(srv):
    before, _ = scrape(srv)
    outcome = {}

    def go():
        try:
            outcome["r"] = srv.post_execution(
                {"language": "python", "code": "import time\ntime.sleep(2)",
                 "limits": {"wall_ms": 5000}}, tenant="loner")
        except requests.RequestException as e:
            outcome["e"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    try:
        assert srv.wait_for_running(1) >= 1
        r = srv.post_execution({"language": "python", "code": "print(1)"}, tenant="loner")
        expect_problem(r, 429)
        during, _ = scrape(srv)
        assert sample(during, "sandboxd_sandboxes_alive") >= 1
        assert srv.running_executions() >= 1
    finally:
        thread.join(timeout=30 * SLOW)
    assert outcome.get("r") is not None and outcome["r"].status_code == 200, outcome
    after, _ = scrape(srv)
    assert sample(after, "sandboxd_quota_rejections_total", tenant="loner",
                  reason="concurrency") == \
        sample(before, "sandboxd_quota_rejections_total", tenant="loner", reason="concurrency") + 1
    assert sample(after, "sandboxd_http_requests_total", code="429") == \
        sample(before, "sandboxd_http_requests_total", code="429") + 1
    assert sample(after, "sandboxd_executions_total", tenant="loner", status="ok") == \
        sample(before, "sandboxd_executions_total", tenant="loner", status="ok") + 1


def test_at_rest_only_the_pool_is_alive(srv):
    """With nothing running, the engine's sandboxes are the warm pool's spare entries."""
    srv.wait_idle()
    samples, _ = scrape(srv)
    spare = sample(samples, "sandboxd_pool_entries", state="idle") + \
        sample(samples, "sandboxd_pool_entries", state="starting")
    assert sample(samples, "sandboxd_sandboxes_alive") == spare
    assert sample(samples, "sandboxd_pool_entries", state="in_use") == 0
    assert spare <= 4  # the default max_idle


def test_pool_counters_move_with_python_executions(srv):
    # Let the pool fill (min_idle 2 by default), then a Python run takes an entry.
    deadline = time.monotonic() + 10 * SLOW
    while sample(scrape(srv)[0], "sandboxd_pool_entries", state="idle") < 1:
        assert time.monotonic() < deadline, "the warm pool never had an idle entry"
        time.sleep(0.05)
    before, _ = scrape(srv)
    result = srv.run("print('warm')")
    after, _ = scrape(srv)
    assert result["pooled"] is True, result
    assert sample(after, "sandboxd_pool_hits_total") == \
        sample(before, "sandboxd_pool_hits_total") + 1
    bash = srv.run("echo cold", "bash")
    assert bash["pooled"] is False, bash
    assert sample(scrape(srv)[0], "sandboxd_pool_hits_total") == \
        sample(after, "sandboxd_pool_hits_total")


@pytest.fixture(autouse=True)
def between_tests(srv):
    yield
    srv.check_between_tests()


def test_tenant_label_is_bounded(srv):
    """An unknown token must not create a series (label cardinality is bounded by config)."""
    srv.post_execution({"language": "python", "code": "x"}, tenant=None, token="sbx_mallory")
    samples, text = scrape(srv)
    assert "mallory" not in text
    tenants = {dict(labels).get("tenant") for (name, labels) in samples
               if name == "sandboxd_executions_total"}
    assert tenants <= {"acme", "globex", "loner", "other"}, tenants


def test_metrics_needs_no_token(srv):
    r = requests.get(srv.url("/metrics"), timeout=10)
    assert r.status_code == 200


def test_metrics_token_when_configured():
    """With server.metrics_token_sha256 set, /metrics answers only that token's bearer: no
    token and a tenant's token get 401, and the tenant names stay hidden."""
    token, digest = make_token("metrics-scraper")
    with running_server(tiers=STANDARD_TIERS, tenants=STANDARD_TENANTS,
                        server={"metrics_token_sha256": digest}) as srv:
        expect_problem(requests.get(srv.url("/metrics"), timeout=10), 401)
        r = requests.get(srv.url("/metrics"), headers=srv.headers("acme"), timeout=10)
        expect_problem(r, 401)
        assert "acme" not in r.text
        r = requests.get(srv.url("/metrics"), headers={"Authorization": f"Bearer {token}"},
                         timeout=10)
        assert r.status_code == 200 and "sandboxd_executions_total" in r.text
        # /health stays open for load balancers.
        assert srv.get("/health").status_code == 200
