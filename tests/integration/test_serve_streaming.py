"""Streamed executions (issue 13): POST /v1/executions with Accept: text/event-stream answers
with Server-Sent Events, stdout and stderr as the program writes them and the result last, for
cold and warm-pool runs alike; the output cap holds on the stream; a client that hangs up cancels
the execution, which is recorded so; refusals before the run are plain problems."""

import json
import signal
import subprocess
import threading
import time

from serve_helpers import (FREE_TIER, NO_POOL, PRO_TIER, STANDARD_TENANTS, audit_rows,
                           expect_problem, kept_data_dir, running_server, sse_events)

TIERS = {"free": {**FREE_TIER, "max_concurrency": 4}, "pro": PRO_TIER}
STREAM = {"Accept": "text/event-stream"}


def stream(srv, body, tenant="acme"):
    """The events of a streamed execution, with their arrival times, and the whole wall time."""
    started = time.monotonic()
    with srv.request("POST", "/v1/executions", data=json.dumps(body),
                     headers=srv.headers(tenant, extra=STREAM), stream=True) as r:
        assert r.status_code == 200, r.text[:2000]
        assert r.headers["Content-Type"] == "text/event-stream"
        events = list(sse_events(r))
    return events, time.monotonic() - started


def text_of(events, name):
    return "".join(data["text"] for event, data, _ in events if event == name)


SLOW_PRINTER = ("import sys, time\nfor i in range(10):\n    print(i, flush=True)\n"
                "    time.sleep(0.1)\nprint('oops', file=sys.stderr)\nsys.exit(3)")


def check_slow_printer(srv, events, total):
    names = [event for event, _, _ in events]
    assert names[-1] == "end" and names.count("end") == 1, names
    first_stdout = next(t for event, _, t in events if event == "stdout")
    # The first line came long before the program ended (10 x 0.1 s).
    assert first_stdout < total - 0.5, (first_stdout, total)
    stdout = text_of(events, "stdout")
    assert stdout == "".join(f"{i}\n" for i in range(10))
    assert text_of(events, "stderr") == "oops\n"
    end = events[-1][1]
    assert end["status"] == "exit_nonzero" and end["exit_code"] == 3
    assert end["stdout"] == stdout and end["stderr"] == "oops\n"
    # The end event is the execution's result: what GET answers for it.
    record = srv.get_execution(end["id"]).json()
    assert record["status"] == "exit_nonzero" and record["exit_code"] == 3
    assert record["usage"] == end["usage"] and record["timing"] == end["timing"]


def test_output_arrives_as_it_is_written_cold_and_warm():
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS, pools=NO_POOL) as srv:
        check_slow_printer(srv, *stream(srv, {"language": "python", "code": SLOW_PRINTER}))
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        srv.wait_pool_ready()
        events, total = stream(srv, {"language": "python", "code": SLOW_PRINTER})
        check_slow_printer(srv, events, total)
        assert events[-1][1]["pooled"] is True


def test_a_character_split_between_writes_arrives_whole():
    code = ("import sys, time\nb = 'é€😀'.encode()\nfor i in range(len(b)):\n"
            "    sys.stdout.buffer.write(b[i:i + 1]); sys.stdout.flush(); time.sleep(0.02)\n")
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        events, _ = stream(srv, {"language": "python", "code": code})
        pieces = [data["text"] for event, data, _ in events if event == "stdout"]
        assert "".join(pieces) == "é€😀" and "\ufffd" not in "".join(pieces), pieces
        assert events[-1][1]["stdout"] == "é€😀"


def test_the_output_cap_holds_on_the_stream():
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        events, _ = stream(srv, {"language": "bash", "code": "yes | head -c 500000",
                                 "limits": {"output_bytes": 1000}})
        assert len(text_of(events, "stdout")) == 1000
        end = events[-1][1]
        assert end["status"] == "output_limit" and len(end["stdout"]) == 1000


def test_a_timeout_ends_the_stream_with_its_result():
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        events, _ = stream(srv, {"language": "bash",
                                 "code": "echo start; sleep 30", "limits": {"wall_ms": 500}})
        assert text_of(events, "stdout") == "start\n"
        assert events[-1][0] == "end" and events[-1][1]["status"] == "timeout"


def test_a_client_that_hangs_up_cancels_the_execution():
    with kept_data_dir() as data_dir:
        with running_server(tiers=TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir) as srv:
            r = srv.request("POST", "/v1/executions",
                            data=json.dumps({"language": "bash",
                                             "code": "echo go; sleep 60",
                                             "limits": {"wall_ms": 60000}}),
                            headers=srv.headers(extra=STREAM), stream=True)
            first = next(sse_events(r))
            assert first[0] == "stdout" and first[1]["text"] == "go\n"
            hung_up = time.monotonic()
            r.close()
            srv.wait_idle()
            assert time.monotonic() - hung_up < 15
            assert srv.running_executions() == 0
        rows = audit_rows(data_dir)
        assert [row["status"] for row in rows.values()] == ["canceled"], rows


def test_sigterm_ends_a_stream_with_its_canceled_result():
    # Draining waits for a streamed execution like any other; at the grace period's end it is
    # canceled, its stream ends with that result, its record says so, and the server exits 0.
    grace = 2
    with kept_data_dir() as data_dir:
        with running_server(tiers=TIERS, tenants=STANDARD_TENANTS, data_dir=data_dir,
                            server={"shutdown_grace_s": grace}) as srv:
            got = {}

            def read_stream():
                with srv.request("POST", "/v1/executions",
                                 data=json.dumps({"language": "bash", "code": "echo go; sleep 30",
                                                  "limits": {"wall_ms": 60000}}),
                                 headers=srv.headers(extra=STREAM), stream=True) as r:
                    got["events"] = list(sse_events(r))

            reader = threading.Thread(target=read_stream)
            reader.start()
            srv.wait_for_running(1)
            srv.signal(signal.SIGTERM)
            assert srv.wait_exit(grace + 15) == 0
            reader.join(timeout=15)
            assert not reader.is_alive()
        events = got["events"]
        assert text_of(events, "stdout") == "go\n"
        assert events[-1][0] == "end" and events[-1][1]["status"] == "canceled", events[-1]
        rows = audit_rows(data_dir)
        assert [row["status"] for row in rows.values()] == ["canceled"], rows


def test_refusals_come_before_the_stream_as_plain_problems():
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        bad = srv.request("POST", "/v1/executions", data=json.dumps({"language": "cobol",
                                                                     "code": "x"}),
                          headers=srv.headers(extra=STREAM))
        expect_problem(bad, 400, field="language")
        nobody = srv.request("POST", "/v1/executions",
                             data=json.dumps({"language": "bash", "code": "true"}),
                             headers=srv.headers(token="wrong", extra=STREAM))
        expect_problem(nobody, 401)


def test_curl_streams_an_execution():
    with running_server(tiers=TIERS, tenants=STANDARD_TENANTS) as srv:
        out = subprocess.run(
            ["curl", "-sN", "-H", f"Authorization: Bearer {srv.tokens['acme']}",
             "-H", "Content-Type: application/json", "-H", "Accept: text/event-stream",
             "-d", json.dumps({"language": "bash",
                               "code": "for i in 1 2 3; do echo $i; sleep 0.1; done"}),
             srv.url("/v1/executions")],
            capture_output=True, timeout=60, text=True).stdout
        assert out.count("event: stdout") >= 1 and "event: end" in out, out
        end = json.loads(out.rstrip().splitlines()[-1][len("data: "):])
        assert end["status"] == "ok" and end["stdout"] == "1\n2\n3\n"
