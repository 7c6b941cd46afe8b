"""Webhooks (issue 17, api/webhooks.h): a receiver on loopback (allowed by the tier) that fails
twice then succeeds gets the result once, signed so that README's snippet verifies it; a batch
calls back once, when its last case has ended; a receiver that never answers ends failed, is
listed so, and a retry delivers it; loopback, the metadata address and a name resolving to a
private address are refused unless allowed; a tenant without a secret cannot ask."""
import base64
import json
import re
import time
from pathlib import Path

from serve_helpers import (NO_POOL, SLOW, Receiver, expect_json, expect_problem, parse_metrics,
                           running_server, sample)

SECRET = "whsec_" + base64.b64encode(b"sandboxd-test-webhook-key-32byte").decode()
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_verify():
    """The receiver's verify() as README documents it."""
    text = README.read_text()
    block = re.search(r"<!-- webhook-verify:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert block, "README lost its webhook-verify block"
    namespace = {}
    exec(block.group(1), namespace)  # noqa: S102 - our own README's snippet
    return namespace["verify"]


def serve(receiver, **server):
    tier = {"max_concurrency": 4, "max_wall_ms": 30000, "cpu_budget_ms": 6000000,
            "cpu_window_s": 60, "languages": "python, bash",
            "webhook_allow": f"127.0.0.1:{receiver.port}"}
    tenants = {"acme": {"tier": "t", "webhook_secret": SECRET}, "nosecret": "t"}
    keys = {"webhook_backoff_ms": 50, "webhook_timeout_ms": 1000, **server}
    return running_server(tiers={"t": tier}, tenants=tenants, pools=NO_POOL, server=keys)


def deliveries(srv, status=None, tenant="acme"):
    query = f"?status={status}" if status else ""
    r = srv.request("GET", f"/v1/webhooks/deliveries{query}",
                    headers=srv.headers(tenant, None, None))
    return expect_json(r)["deliveries"]


def wait_delivery(srv, status, timeout=30 * SLOW):
    deadline = time.monotonic() + timeout
    while True:
        found = deliveries(srv, status)
        if found:
            return found
        assert time.monotonic() < deadline, deliveries(srv)
        time.sleep(0.05)


def test_a_receiver_that_fails_twice_gets_it_once_signed():
    verify = readme_verify()
    with Receiver(statuses=(500, 503, 200)) as receiver, serve(receiver) as srv:
        r = srv.post_execution({"language": "python", "code": "print(6 * 7)", "wait": False,
                                "callback_url": receiver.url})
        execution_id = expect_json(r, 202)["id"]
        delivered = wait_delivery(srv, "delivered")
        assert len(delivered) == 1 and delivered[0]["attempts"] == 3, delivered
        assert delivered[0]["target_id"] == execution_id
        requests = receiver.wait_for(3)
        time.sleep(0.3)
        assert len(receiver.requests) == 3  # nothing after the 2xx
        ids = {headers["webhook-id"] for headers, _ in requests}
        assert ids == {delivered[0]["id"]}, ids  # one message, retried under its id
        headers, body = requests[-1]
        assert verify(SECRET, headers, body)
        assert not verify(SECRET, headers, body.replace(b"42", b"43"))
        assert not verify("whsec_" + base64.b64encode(b"another key of 32 bytes, really").decode(),
                          headers, body)
        payload = json.loads(body)
        assert payload["type"] == "execution.completed"
        assert (payload["data"]["id"], payload["data"]["stdout"]) == (execution_id, "42\n")
        metrics = parse_metrics(srv.get("/metrics").text)
        assert sample(metrics, "sandboxd_webhook_deliveries_total", outcome="retried") == 2
        assert sample(metrics, "sandboxd_webhook_deliveries_total", outcome="delivered") == 1


def test_a_batch_calls_back_once_when_its_last_case_ends():
    with Receiver() as receiver, serve(receiver) as srv:
        body = {"program": {"language": "python", "code": "print(int(input()) + 1)"},
                "cases": [{"stdin": str(i), "expected_stdout": f"{i + 1}\n"} for i in range(5)],
                "callback_url": receiver.url}
        r = srv.request("POST", "/v1/batches", json=body, headers=srv.headers("acme"))
        batch_id = expect_json(r, 202)["id"]
        headers, raw = receiver.wait_for(1)[0]
        payload = json.loads(raw)
        assert payload["type"] == "batch.completed" and payload["data"]["id"] == batch_id
        assert payload["data"]["done"] and payload["data"]["summary"] == {"accepted": 5}
        time.sleep(0.5)
        assert len(receiver.requests) == 1


def test_a_receiver_that_never_answers_ends_failed_and_a_retry_delivers_it():
    with Receiver() as receiver, serve(receiver, webhook_max_attempts=2,
                                       webhook_timeout_ms=300) as srv:
        receiver.hang.set()
        r = srv.post_execution({"language": "bash", "code": "echo hi", "wait": False,
                                "callback_url": receiver.url})
        expect_json(r, 202)
        failed = wait_delivery(srv, "failed")
        assert failed[0]["attempts"] == 2 and "timeout" in failed[0]["last_error"].lower(), \
            failed
        assert deliveries(srv, "delivered") == []
        expect_problem(srv.request("GET", "/v1/webhooks/deliveries?status=lost",
                                   headers=srv.headers("acme", None, None)), 400, field="status")
        # Another tenant neither sees nor retries it.
        assert deliveries(srv, tenant="nosecret") == []
        expect_problem(srv.request("POST", f"/v1/webhooks/deliveries/{failed[0]['id']}/retry",
                                   headers=srv.headers("nosecret", None, None)), 404)
        receiver.hang.clear()
        receiver.release.set()
        r = srv.request("POST", f"/v1/webhooks/deliveries/{failed[0]['id']}/retry",
                        headers=srv.headers("acme", None, None))
        assert expect_json(r, 202)["status"] == "pending"
        delivered = wait_delivery(srv, "delivered")
        assert delivered[0]["id"] == failed[0]["id"]


def test_a_redirect_is_not_followed():
    with Receiver(statuses=(302,)) as receiver, serve(receiver, webhook_max_attempts=1) as srv:
        expect_json(srv.post_execution({"language": "bash", "code": "true", "wait": False,
                                        "callback_url": receiver.url}), 202)
        failed = wait_delivery(srv, "failed")
        assert "redirects are not followed" in failed[0]["last_error"], failed
        assert len(receiver.requests) == 1


def test_callbacks_to_this_machine_and_its_networks_are_refused():
    with Receiver() as receiver, serve(receiver) as srv:
        for url, words in [(f"http://127.0.0.1:{receiver.port + 1}/", "loopback"),
                           ("http://169.254.169.254/latest/meta-data/", "metadata"),
                           (f"http://localhost:{receiver.port}/", "loopback"),
                           ("http://[::1]:80/", "loopback"),
                           ("http://10.1.2.3/", "private"),
                           ("ftp://example.com/", "http")]:
            r = srv.post_execution({"language": "bash", "code": "true", "wait": False,
                                    "callback_url": url})
            problem = expect_problem(r, 400, field="callback_url")
            assert words in json.dumps(problem), (url, problem)
        # The same for a batch, and for a tenant without a secret even where allowed.
        r = srv.request("POST", "/v1/batches", headers=srv.headers("acme"),
                        json={"program": {"language": "bash", "code": "true"}, "cases": [{}],
                              "callback_url": "http://169.254.169.254/"})
        expect_problem(r, 400, field="callback_url")
        r = srv.post_execution({"language": "bash", "code": "true", "wait": False,
                                "callback_url": receiver.url}, tenant="nosecret")
        assert "webhook_secret" in expect_problem(r, 400, field="callback_url")["detail"]
        # A waiting request has no callback.
        expect_problem(srv.post_execution({"language": "bash", "code": "true",
                                           "callback_url": receiver.url}), 400,
                       field="callback_url")
        assert receiver.requests == []
