"""The service under load and faults keeps its promises (issue 10): with room for every request
it refuses none; each answer is a 200 (the execution ran) or a 429/503 problem with Retry-After;
nothing is lost; the audit records are exactly the executions the engine started (read from its
log); and after a kill -9 of the engine or of the API process in the middle of the load, a
restart accounts for every execution that started (no record left "running", the spool folded
in) and serves again. Slow clients cannot lock others out.

Bounded: LOAD_REQUESTS requests at concurrency 64, a mix of fast Python and
shell programs and 0.2 s sleeps."""

import collections
import os
import socket
import threading
import time

import pytest
import requests

from serve_helpers import (FREE_TIER, SLOW, audit_rows, expect_json, expect_problem,
                           kept_data_dir, no_new_leaks, running_server, spool_files)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

# The service under its own load, not another test stage's as well: 64 clients take both CPUs,
# which starved the deadlines of the other stage's tests (scripts/test.sh runs two at once).
# The slow clients' test is not load (300 idle connections and a request a second for 12 s): it
# runs with the other stages' tests, where its wait costs nothing.
alone = pytest.mark.alone

CONCURRENCY = 64
# Ten times the concurrency: every client's slot is freed and taken again ten times over, with
# either build (2,000 and then 1,000 cost `make test` 30 s and then ~10 s more for nothing that
# fewer do not reach). SANDBOXD_LOAD_REQUESTS=10000 (with pytest -s) reproduces issue 10's
# measurement. A kill comes once a third of FAULT_REQUESTS are answered: 100, under load.
LOAD_REQUESTS = int(os.environ.get("SANDBOXD_LOAD_REQUESTS", 10 * CONCURRENCY))
FAULT_REQUESTS = 300

# The default config's capacity, with a tier that lets one tenant use all of it.
TIERS = {"wide": {**FREE_TIER, "max_concurrency": CONCURRENCY}}
TENANTS = {"acme": "wide"}
SERVER = {"max_sandboxes": CONCURRENCY, "shutdown_grace_s": 2}
DEBUG_LOG = {"SANDBOXD_LOG": "debug"}  # the engine logs each execution it starts

PROGRAMS = [
    {"language": "python", "code": "print(2+2)"},
    {"language": "python", "code": "import time\ntime.sleep(0.2)\nprint('slept')"},
    {"language": "sh", "code": "echo hi"},
    {"language": "python", "code": "import sys\nprint(sys.stdin.read().upper())", "stdin": "a"},
]


class Load:
    """n requests from `concurrency` clients; each outcome is (request index, Response or the
    exception). Refusals are not retried: each request is answered once."""

    def __init__(self, srv, n, concurrency=CONCURRENCY):
        self.srv = srv
        self.n = n
        self.next = 0
        self.lock = threading.Lock()
        self.outcomes = []
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(concurrency)]

    def _client(self):
        session = requests.Session()
        while True:
            with self.lock:
                if self.next >= self.n:
                    return
                index = self.next
                self.next += 1
            try:
                outcome = self.srv.post_execution(PROGRAMS[index % len(PROGRAMS)],
                                                  session=session, timeout=(5, 60 * SLOW))
            except requests.RequestException as e:
                outcome = e
                session = requests.Session()
            with self.lock:
                self.outcomes.append((index, outcome))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def answered(self):
        with self.lock:
            return len(self.outcomes)

    def wait_answered(self, count, timeout):
        deadline = time.monotonic() + timeout
        while self.answered() < count:
            assert time.monotonic() < deadline, f"only {self.answered()} answers in {timeout}s"
            time.sleep(0.02)

    def join(self):
        for t in self.threads:
            t.join(timeout=120 * SLOW)
        assert not any(t.is_alive() for t in self.threads), "a client still waits"
        assert len(self.outcomes) == self.n, "a request got no outcome"

    def summary(self):
        codes = collections.Counter()
        for _, o in self.outcomes:
            if isinstance(o, requests.Response):
                status = o.json().get("status") if o.status_code == 200 else None
                codes[(o.status_code, status)] += 1
            else:
                codes[type(o).__name__] += 1
        return dict(codes)

    def results(self):
        """{execution id: result} of every 200."""
        return {o.json()["id"]: o.json() for _, o in self.outcomes
                if isinstance(o, requests.Response) and o.status_code == 200}

    def check_answers(self):
        """Every answer is a 200 of a run execution, or a refusal with its problem body and
        Retry-After. Returns the exceptions (connections that failed)."""
        failed = []
        for _, o in self.outcomes:
            if not isinstance(o, requests.Response):
                failed.append(o)
            elif o.status_code != 200:
                assert o.status_code in (429, 503), o.text[:500]
                expect_problem(o, o.status_code)
        return failed


def check_records(results, rows, started, api_killed=False):
    """Every execution a worker took has a record, and every record is of one the engine said it
    started (started: serve_helpers' (taken, said)); each answered one's record has the status
    its client got; none is left running. With api_killed, a record may also be of an
    execution the API began and died before sending (its record comes first, so that nothing
    runs unrecorded): nobody was answered for it, and it says internal_error."""
    taken, said = started
    unstarted = set(rows) - said
    if api_killed:
        unstarted = {i for i in unstarted
                     if i in results or rows[i]["status"] != "internal_error"}
    assert taken <= said and taken <= set(rows) and not unstarted, (
        f"{len(taken - set(rows))} taken by a worker without a record, "
        f"{len(unstarted)} recorded but never said to start, "
        f"{len(taken - said)} taken but never said to start")
    for execution_id, result in results.items():
        assert rows[execution_id]["status"] == result["status"], (rows[execution_id], result)
    assert not [r for r in rows.values() if r["status"] == "running"]


@alone
def test_load_refuses_nothing_it_has_room_for_and_records_every_execution():
    with kept_data_dir() as data_dir:
        with running_server(tiers=TIERS, tenants=TENANTS, server=SERVER, data_dir=data_dir,
                            env=DEBUG_LOG) as srv:
            t0 = time.monotonic()
            load = Load(srv, LOAD_REQUESTS).start()
            load.join()
            elapsed = time.monotonic() - t0
            summary = load.summary()
            print(f"{LOAD_REQUESTS} requests at concurrency {CONCURRENCY}: {summary} in "
                  f"{elapsed:.1f}s ({LOAD_REQUESTS / elapsed:.0f}/s)")
            assert load.check_answers() == []
            # 64 clients, room for 64: not one refusal, and every program ran to its end.
            results = load.results()
            assert len(results) == LOAD_REQUESTS, summary
            assert all(r["status"] == "ok" for r in results.values()), summary
            started = srv.started_executions()
            check_records(results, audit_rows(data_dir), started)
            assert len(started[0]) == len(started[1]) == LOAD_REQUESTS


def fault_during_load(kill, api_killed=False):
    """FAULT_REQUESTS requests; kill(srv) once a third are answered; then a restart on the same
    data directory. Returns what the test checks."""
    with kept_data_dir() as data_dir:
        with running_server(tiers=TIERS, tenants=TENANTS, server=SERVER, data_dir=data_dir,
                            env=DEBUG_LOG) as srv:
            load = Load(srv, FAULT_REQUESTS).start()
            load.wait_answered(FAULT_REQUESTS // 3, 60 * SLOW)
            kill(srv)
            assert srv.wait_exit(20 * SLOW) is not None, "the server did not stop after the kill"
            load.join()
            started = srv.started_executions()
        failed = load.check_answers()
        results = load.results()
        print(f"{FAULT_REQUESTS} requests, killed after a third: {load.summary()}; "
              f"{len(started[0])} taken by a worker")
        with running_server(tiers=TIERS, tenants=TENANTS, server=SERVER,
                            data_dir=data_dir) as again:
            # The restart accounted for everything before it serves.
            assert spool_files(data_dir) == []
            rows = audit_rows(data_dir)
            check_records(results, rows, started, api_killed)
            # A started execution whose client got no answer is one of the failed requests.
            assert len(set(rows) - set(results)) <= len(failed)
            for execution_id in set(results) | set(list(rows)[:5]):
                record = expect_json(again.get_execution(execution_id), 200)
                assert record["status"] == rows[execution_id]["status"]
            assert again.run("print('again')")["stdout"] == "again\n"
        return results, rows, failed


@alone
def test_engine_killed_under_load_every_started_execution_is_recorded():
    def kill(srv):
        srv.expected_rc = None
        srv.signal(9)

    results, rows, failed = fault_during_load(kill)
    # The engine's workers cancel what ran and still answer: every started execution reached
    # its client, and nothing is recorded that no client was told of.
    assert set(rows) == set(results)
    assert any(r["status"] == "canceled" for r in results.values()) or not failed


@alone
def test_api_killed_under_load_every_started_execution_is_recorded():
    def kill(srv):
        srv.expected_rc = None
        import os
        os.kill(srv.api_pid(), 9)

    results, rows, failed = fault_during_load(kill, api_killed=True)
    assert failed, "no request was cut off by the kill"
    # Those that ran on after the API died were cancelled by the engine and came back from the
    # spool or ended as interrupted: every one is accounted for.
    lost = [rows[i] for i in set(rows) - set(results)]
    assert all(r["status"] in ("ok", "canceled", "internal_error") for r in lost), lost


def test_slow_clients_do_not_lock_others_out():
    """300 connections from one address send their request head a byte a second: they hold at
    most max_connections_per_ip threads, each only until the 10 s head timeout; meanwhile
    another client (another address) is answered at once, again and again."""
    slow = []
    with running_server(tiers=TIERS, tenants=TENANTS, server=SERVER) as srv:
        try:
            for _ in range(300):
                s = socket.socket()
                s.bind(("127.0.0.2", 0))
                s.settimeout(5)
                try:
                    s.connect(("127.0.0.1", srv.port))
                    s.send(b"G")
                except OSError:
                    pass
                slow.append(s)
            latencies = []
            t0 = time.monotonic()
            tick = 0
            while time.monotonic() - t0 < 12:
                for s in slow:
                    try:
                        s.send(b"ET /health HTTP/1.1\r\n"[tick % 21:tick % 21 + 1])
                    except OSError:
                        pass
                started = time.monotonic()
                r = srv.get("/health", timeout=(2, 5))
                latencies.append(time.monotonic() - started)
                assert r.status_code == 200, r.text
                tick += 1
                time.sleep(1)
            worst = max(latencies)
            print(f"/health under 300 slow connections: worst {worst * 1000:.1f} ms "
                  f"over {len(latencies)} requests")
            assert worst < 1.0 * SLOW, latencies
            # An execution goes through too.
            assert srv.run("print(7)")["stdout"] == "7\n"
            # Every slow connection was refused at the address's limit or cut at the head
            # timeout: none is still open.
            still_open = 0
            for s in slow:
                s.settimeout(0.5)
                try:
                    if s.recv(1) != b"":
                        still_open += 1
                except socket.timeout:
                    still_open += 1
                except OSError:
                    pass
            assert still_open == 0, f"{still_open} slow connections still open after 12 s"
        finally:
            for s in slow:
                s.close()
