"""A fleet of `sandboxd serve` nodes sharing one real PostgreSQL ([store] url; issue 21), behind
a real HAProxy running deploy/haproxy.cfg: a tenant's concurrency and CPU budget hold across the
nodes, a node killed with -9 stops holding its tenants' slots once its liveness lapses (and
HAProxy sends its requests to the others), and PostgreSQL restarting makes requests fail with
503 store-unavailable and then recover, without restarting the nodes and without a lease lost
in between. Each fleet check has its control: the same nodes without the store each admit their
own tenant's maximum."""

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests

import fleet_servers
from fleet_helpers import running_haproxy, running_postgres
from conftest import SANDBOXD
from serve_helpers import (HTTP_TIMEOUT, NO_POOL, SLOW, Server, expect_json, expect_problem,
                           kept_data_dir,
                           free_port, no_new_leaks, running_server, sample)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

TIER = {"max_wall_ms": 30000, "max_concurrency": 4, "cpu_budget_ms": 3600000,
        "cpu_window_s": 60}
SLEEP = "import time\ntime.sleep({})\nprint('slept')"
# quota_pg.c's heartbeat period by default (a fifth of [store] lease_ttl_s, 10 s: how long a
# node's leases count after its last renewal).
HEARTBEAT_S = 2
# The tests that wait for a dead node's liveness to lapse set a shorter TTL (the least a node's
# outage of the store must last before its executions are taken for dead is the TTL and a 5 s
# grace: the PostgreSQL-restart test keeps the default).
SHORT_TTL_S = 4
SHORT_HEARTBEAT_S = SHORT_TTL_S / 5


def store(url, node, lease_ttl_s=None):
    ttl = f"lease_ttl_s = {lease_ttl_s}\n" if lease_ttl_s else ""
    return f"\n[store]\nurl = {url}\nnode = {node}\n{ttl}"


@contextlib.contextmanager
def fleet(url, n, tiers=None, server=None, tenants=None, lease_ttl_s=None):
    """n nodes on one store (url None: each its own), stopped and leak-checked on exit."""
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(running_server(
            tiers=tiers or {"t": TIER}, tenants=tenants or {"acme": "t"}, pools=NO_POOL,
            server=server,
            extra_config=store(url, f"node{i + 1}", lease_ttl_s) if url else ""))
            for i in range(n)]
        yield nodes


def post_many(nodes, body, count):
    """count POSTs at once, spread over the nodes in turn; the responses in order."""
    barrier = threading.Barrier(count)

    def one(i):
        barrier.wait(timeout=30)
        return nodes[i % len(nodes)].post_execution(body)

    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def admitted_of_32(nodes):
    """How many of 32 concurrent 3-second executions spread over the nodes ran; every other one
    must be a 429 with Retry-After."""
    body = {"language": "python", "code": SLEEP.format(3 * SLOW), "limits": {"wall_ms": 20000}}
    responses = post_many(nodes, body, 32)
    ran = [r for r in responses if r.status_code == 200]
    for r in ran:
        assert r.json()["stdout"] == "slept\n", r.text
    for r in responses:
        if r.status_code != 200:
            expect_problem(r, 429, slug="quota-exceeded")
            assert int(r.headers["Retry-After"]) >= 1, r.headers
    return len(ran)


class Proxied:
    """Requests to HAProxy, authenticated as a node's tenant (every node has the same tenants)."""

    def __init__(self, proxy, node):
        self.proxy, self.node = proxy, node

    def post_execution(self, body):
        return requests.post(self.proxy.base + "/v1/executions", data=json.dumps(body),
                             headers=self.node.headers(), timeout=HTTP_TIMEOUT)


def executions_ok(node):
    return sample(node.metrics(), "sandboxd_executions_total", tenant="acme", status="ok")


def session_and_async_stick_to_their_node(proxy, nodes):
    """A session opened through HAProxy keeps its interpreter over 50 runs (HAProxy sends each
    to the node that opened it, learnt from the 201's Location), and an asynchronous execution
    queued through it is read back through it (the 202's Location), though the node each lives
    on keeps it to itself."""
    headers = nodes[0].headers()
    r = requests.post(proxy.base + "/v1/sessions", json={"language": "python"}, headers=headers,
                      timeout=HTTP_TIMEOUT)
    session = expect_json(r, 201)["id"]
    assert r.headers["Location"] == f"/v1/sessions/{session}"
    # Asked as if forwarded already, only the node that holds it answers 200 (the others 421).
    owners = [n for n in nodes
              if n.get(f"/v1/sessions/{session}",
                       headers={**headers, "Sandboxd-Forwarded-By": "test"}).status_code == 200]
    assert len(owners) == 1, "a session lives on exactly one node"
    code = "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)"
    for i in range(1, 51):
        r = requests.post(f"{proxy.base}/v1/sessions/{session}/run", json={"code": code},
                          headers=headers, timeout=HTTP_TIMEOUT)
        assert expect_json(r)["stdout"] == f"{i}\n"
    r = requests.delete(f"{proxy.base}/v1/sessions/{session}", headers=headers,
                        timeout=HTTP_TIMEOUT)
    assert r.status_code == 204, r.text
    for i in range(3):
        r = requests.post(proxy.base + "/v1/executions", json={
            "language": "python", "code": f"print({i})", "wait": False}, headers=headers,
            timeout=HTTP_TIMEOUT)
        queued = expect_json(r, 202)["id"]
        assert r.headers["Location"] == f"/v1/executions/{queued}"
        deadline = time.monotonic() + 30 * SLOW
        while True:
            record = expect_json(requests.get(f"{proxy.base}/v1/executions/{queued}",
                                              headers=headers, timeout=HTTP_TIMEOUT))
            if record["status"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, record
            time.sleep(0.05)
        assert (record["status"], record["stdout"]) == ("ok", f"{i}\n"), record


def records_are_in_one_place(pg, nodes, ids):
    """The records of executions that ran on every node are read back whole from any node (the
    audit store is the fleet's PostgreSQL), each saying the node that ran it in the store."""
    headers = nodes[0].headers()
    for node in nodes:
        for i, execution in enumerate(ids):
            record = expect_json(node.get(f"/v1/executions/{execution}", headers=headers))
            digest = hashlib.sha256(f"{i}\n".encode()).hexdigest()
            assert (record["status"], record["stdout_sha256"]) == ("ok", digest), record
        listed = expect_json(node.get("/v1/executions?limit=100", headers=headers))
        assert set(ids) <= {e["id"] for e in listed["executions"]}, listed
    ran_on = pg.sql("SELECT string_agg(DISTINCT node, ',' ORDER BY node) FROM executions "
                    f"WHERE id IN ({', '.join(repr(i) for i in ids)})")
    assert ran_on == "node1,node2,node3", ran_on


def test_behind_haproxy_the_fleet_shares_the_work_and_one_quota():
    """Three nodes on one store behind HAProxy with deploy/haproxy.cfg: sequential requests are
    spread over every node (leastconn), and of 32 concurrent requests of a tenant with
    max_concurrency 4 exactly 4 run fleet-wide, the other 28 are 429; a session and an
    asynchronous execution made through HAProxy are reached through it; when a node dies
    (kill -9 of its API and engine), HAProxy's retry on the refused connection and its health
    checks send every later request to the others. Control: without the store the nodes admit
    4 each (12)."""
    with running_postgres() as pg, fleet(pg.url, 3) as nodes, \
            running_haproxy([n.port for n in nodes]) as proxy:
        front = Proxied(proxy, nodes[0])
        ids = []
        for i in range(12):
            r = front.post_execution({"language": "python", "code": f"print({i})"})
            assert expect_json(r)["stdout"] == f"{i}\n"
            ids.append(r.json()["id"])
        assert all(executions_ok(n) >= 1 for n in nodes), [executions_ok(n) for n in nodes]
        records_are_in_one_place(pg, nodes, ids)
        assert admitted_of_32([front]) == 4
        # Every lease was released: the next four run at once.
        responses = post_many([front], {"language": "python", "code": "print(1)"}, 4)
        assert [r.status_code for r in responses] == [200] * 4, [r.text for r in responses]
        assert pg.sql("SELECT count(*) FROM sandboxd_leases") == "0"
        assert pg.sql("SELECT string_agg(name, ',' ORDER BY name) FROM sandboxd_nodes") == \
            "node1,node2,node3"
        session_and_async_stick_to_their_node(proxy, nodes)
        dead = nodes[2]
        dead.kill_node()
        assert dead.wait_exit(10) == -signal.SIGKILL
        before = sum(executions_ok(n) for n in nodes[:2])
        for i in range(10):
            r = front.post_execution({"language": "python", "code": f"print({i})"})
            assert expect_json(r)["stdout"] == f"{i}\n"
        assert sum(executions_ok(n) for n in nodes[:2]) == before + 10
    with fleet(None, 3) as nodes:
        assert admitted_of_32(nodes) == 12


def burn(node, cpu_ms):
    code = f"import time\nend = time.process_time() + {cpu_ms / 1000}\n" \
           "while time.process_time() < end: pass\nprint('burnt')"
    result = node.run(code)
    assert result["stdout"] == "burnt\n", result


def test_the_cpu_budget_is_charged_fleet_wide():
    """A 500 ms budget: 600 ms burnt on one node makes the other refuse with 429 and a
    Retry-After within the window. Control: without the store the other node still runs it."""
    tier = {**TIER, "cpu_budget_ms": 500}
    with running_postgres() as pg, fleet(pg.url, 2, tiers={"t": tier}) as (one, other):
        burn(one, 600)
        r = other.post_execution({"language": "python", "code": "print(1)"})
        problem = expect_problem(r, 429, slug="quota-exceeded")
        assert "CPU budget" in problem["detail"], problem
        assert 1 <= int(r.headers["Retry-After"]) <= 60, r.headers
        assert int(pg.sql("SELECT sum(cpu_ms) FROM sandboxd_charges")) >= 500
    with fleet(None, 2, tiers={"t": tier}) as (one, other):
        burn(one, 600)
        assert other.run("print(1)")["stdout"] == "1\n"


def test_a_killed_nodes_slots_free_once_its_liveness_lapses():
    """node1 runs the tenant's 4 executions and dies whole (kill -9 of its API process, which
    holds the leases, and of its engine): node2 refuses while node1's leases still count (its
    liveness is renewed no more), and admits once they lapse, within the lease TTL and a
    heartbeat (lease_ttl_s 4). node1 then starts again and drops its previous life's leases."""
    body = {"language": "python", "code": SLEEP.format(20), "limits": {"wall_ms": 25000}}
    with running_postgres() as pg, fleet(pg.url, 2, lease_ttl_s=SHORT_TTL_S) as (node1, node2):
        node1.expected_rc = -signal.SIGKILL
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            hanging = [pool.submit(node1.post_execution, body) for _ in range(4)]
            node1.wait_for_running(4)
            assert pg.sql("SELECT count(*) FROM sandboxd_leases WHERE node = 'node1'") == "4"
            expect_problem(node2.post_execution({"language": "python", "code": "print(1)"}), 429)
            node1.kill_node()
            killed_at = time.monotonic()
            assert node1.wait_exit(10) == -signal.SIGKILL
            for future in hanging:
                with pytest.raises(requests.RequestException):
                    future.result(timeout=60)
        # Right after the kill its leases still count.
        expect_problem(node2.post_execution({"language": "python", "code": "print(1)"}), 429)
        deadline = killed_at + SHORT_TTL_S + 2 * SHORT_HEARTBEAT_S + 5 * SLOW
        while True:
            r = node2.post_execution({"language": "python", "code": "print(2)"})
            if r.status_code == 200:
                break
            expect_problem(r, 429)
            assert time.monotonic() < deadline, "node1's leases never lapsed"
            time.sleep(0.2)
        assert time.monotonic() - killed_at >= SHORT_TTL_S - SHORT_HEARTBEAT_S - 1
        assert expect_json(r)["stdout"] == "2\n"
        # node1 again, under the same name: its previous life's leases are gone at once. A node
        # gone for over a day (its liveness lapsed then) is deleted with its leases by any node
        # that starts.
        pg.sql("INSERT INTO sandboxd_nodes VALUES ('ghost', now() - interval '25 hours'); "
               "INSERT INTO sandboxd_leases (tenant, node, expected_end) "
               "VALUES ('acme', 'ghost', now())")
        with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, pools=NO_POOL,
                            extra_config=store(pg.url, "node1")):
            assert pg.sql("SELECT count(*) FROM sandboxd_leases") == "0"
            assert pg.sql("SELECT string_agg(name, ',' ORDER BY name) FROM sandboxd_nodes") == \
                "node1,node2"


def test_a_session_whose_node_died_is_a_404_that_says_so():
    """A session lives on the node that opened it, which records that in the store. Through
    HAProxy, when that node is killed (-9, whole), the next requests for the session reach the
    other node, which answers from the store: 421 misdirected naming the node while its liveness
    still holds (forwarding there fails), then 404 node-gone once it lapsed (within the TTL and
    a heartbeat; lease_ttl_s 4). Controls: an id the store does not know is a plain 404; the live
    owner asked
    directly of another node answers through it (forwarded), and a request forwarded already is
    a 421 naming it; a deleted session's placement is gone; and the dead node started again
    under its name drops its previous life's placements (its sessions are then a plain 404)."""
    with running_postgres() as pg, fleet(pg.url, 2, lease_ttl_s=SHORT_TTL_S) as nodes, \
            running_haproxy([n.port for n in nodes]) as proxy:
        headers = nodes[0].headers()

        def via_proxy(method, path, **kwargs):
            return requests.request(method, proxy.base + path, headers=headers,
                                    timeout=HTTP_TIMEOUT, **kwargs)

        unknown = "0" * 32
        expect_problem(via_proxy("GET", f"/v1/sessions/{unknown}"), 404, slug="not-found")
        # A session opened and deleted leaves no placement.
        ended = expect_json(via_proxy("POST", "/v1/sessions", json={"language": "python"}),
                            201)["id"]
        assert pg.sql(f"SELECT node FROM sandboxd_placements WHERE id = '{ended}'") != ""
        assert via_proxy("DELETE", f"/v1/sessions/{ended}").status_code == 204
        assert pg.sql(f"SELECT count(*) FROM sandboxd_placements WHERE id = '{ended}'") == "0"

        session = expect_json(via_proxy("POST", "/v1/sessions", json={"language": "python"}),
                              201)["id"]
        run = f"/v1/sessions/{session}/run"
        assert expect_json(via_proxy("POST", run, json={"code": "x = 41"}))["status"] == "ok"
        name = pg.sql(f"SELECT node FROM sandboxd_placements WHERE id = '{session}' "
                      "AND kind = 'session' AND tenant = 'acme'")
        owner = nodes[int(name.removeprefix("node")) - 1]
        other = nodes[1] if owner is nodes[0] else nodes[0]
        assert owner.get(f"/v1/sessions/{session}", headers=headers).status_code == 200
        # Asked of the other node, the live owner answers (the request forwarded), but not a
        # request forwarded already: that one is a 421 naming the owner.
        assert expect_json(other.get(f"/v1/sessions/{session}", headers=headers))["id"] == session
        problem = expect_problem(other.get(f"/v1/sessions/{session}",
                                           headers={**headers, "Sandboxd-Forwarded-By": "x"}),
                                 421, slug="misdirected")
        assert problem["node"] == name and name in problem["detail"], problem

        owner.kill_node()
        assert owner.wait_exit(10) == -signal.SIGKILL
        killed_ms = time.time() * 1000
        deadline = time.monotonic() + SHORT_TTL_S + 2 * SHORT_HEARTBEAT_S + 5 * SLOW
        while True:
            r = via_proxy("POST", run, json={"code": "x + 1"})
            if r.status_code == 404:
                break
            expect_problem(r, 421, slug="misdirected")
            assert time.monotonic() < deadline, "the owner's liveness never lapsed"
            time.sleep(0.2)
        problem = expect_problem(r, 404, slug="node-gone")
        assert problem["node"] == name, problem
        assert f"node '{name}', which stopped answering" in problem["detail"], problem
        assert killed_ms <= problem["node_alive_until"] <= time.time() * 1000, problem
        expect_problem(via_proxy("GET", f"/v1/sessions/{session}"), 404, slug="node-gone")

        with running_server(tiers={"t": TIER}, tenants={"acme": "t"}, pools=NO_POOL,
                            extra_config=store(pg.url, name, SHORT_TTL_S)):
            assert pg.sql("SELECT count(*) FROM sandboxd_placements") == "0"
            expect_problem(other.get(f"/v1/sessions/{session}", headers=headers), 404,
                           slug="not-found")


def test_a_node_killed_during_a_batch_loses_no_case():
    """Two batches of 4 three-second cases queued on node1, one per tenant (each tenant may run
    2 at once, fleet-wide): node1 is killed whole while it runs cases of both. Every case ends
    with a result read from node2: the queued ones run there (the fleet's queue is PostgreSQL's),
    and once node1's liveness lapsed (lease_ttl_s 4, and a grace) the cases it was running end as
    internal_error saying its node died, or, for the batch whose program said "retry": true,
    are queued again and run on node2. No case is left pending."""
    tier = {**TIER, "max_concurrency": 2}
    code = "import time\ntime.sleep(3)\nprint(input())"
    cases = [{"stdin": f"{i}", "expected_stdout": f"{i}\n"} for i in range(4)]
    tenants = {"acme": "t", "globex": "t"}
    with running_postgres() as pg, \
            fleet(pg.url, 2, tiers={"t": tier}, tenants=tenants,
                  lease_ttl_s=SHORT_TTL_S) as (node1, node2):
        batches = {}
        for tenant, retry in (("acme", False), ("globex", True)):
            program = {"language": "python", "code": code, "retry": retry}
            r = node1.request("POST", "/v1/batches", json={"program": program, "cases": cases},
                              headers=node1.headers(tenant))
            batches[tenant] = expect_json(r, 202)["id"]
        # Until node1 runs cases of both tenants: node2 takes cases from the same queue, and
        # took both of one tenant's first cases in one run of make test (the sanitizer build's
        # node1 is slower), which left node1 nothing of that batch to be killed in.
        deadline = time.monotonic() + 30 * SLOW
        while pg.sql("SELECT count(DISTINCT tenant) FROM executions WHERE status = 'running' "
                     "AND node = 'node1'") != "2":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        node1.kill_node()
        assert node1.wait_exit(10) == -signal.SIGKILL
        interrupted = set(pg.sql("SELECT string_agg(id, ',') FROM executions WHERE status = "
                                 "'running' AND node = 'node1'").split(","))
        results = {}
        for tenant, batch_id in batches.items():
            path = f"/v1/batches/{batch_id}?fields=id,verdict,error"
            deadline = time.monotonic() + SHORT_TTL_S + 5 + 30 * SLOW
            while not (batch := expect_json(node2.get(path, headers=node2.headers(tenant))))[
                    "done"]:
                assert time.monotonic() < deadline, batch["summary"]
                time.sleep(0.1)
            results[tenant] = batch["results"]
    for tenant, cut in (("acme", True), ("globex", False)):
        assert len(results[tenant]) == 4
        were_running = [r for r in results[tenant] if r["id"] in interrupted]
        assert were_running, f"node1 ran none of {tenant}'s cases when it died"
        for result in results[tenant]:
            if cut and result in were_running:
                assert result["verdict"] == "internal_error", result
                assert "its node died" in result["error"], result
            else:
                assert result["verdict"] == "accepted", result


def migrate(source, target, node="node1"):
    """`sandboxd store migrate`: (exit status, {table: (rows, copied)}, stderr)."""
    out = subprocess.run([SANDBOXD, "store", "migrate", "--from", source, "--to", target,
                          "--node", node], capture_output=True, text=True, timeout=120,
                         check=False)
    tables = {}
    for line in out.stdout.splitlines():
        table, rows, _, copied, _ = line.split()
        tables[table] = (int(rows), int(copied))
    return out.returncode, tables, out.stderr


def history(srv, ids, batch_id):
    """What a node answers of its past: each record, the batch, the listing."""
    headers = srv.headers()
    return ({i: expect_json(srv.get(f"/v1/executions/{i}", headers=headers)) for i in ids},
            expect_json(srv.get(f"/v1/batches/{batch_id}", headers=headers)),
            expect_json(srv.get("/v1/executions?limit=100", headers=headers))["executions"])


def test_store_migrate_copies_a_nodes_history_into_the_fleet():
    """A node's own store (SQLite) is copied by `sandboxd store migrate` into PostgreSQL: the
    node started on it under its name answers every record, its batch and its listing exactly as
    before, and a second run copies nothing again. A source that is no store is refused with
    the reason (1), a target that is not PostgreSQL's is a usage error (64)."""
    tier = {**TIER, "max_concurrency": 2}
    with kept_data_dir() as data_dir:
        with running_server(tiers={"t": tier}, tenants={"acme": "t"}, pools=NO_POOL,
                            data_dir=data_dir, server={"store_output": "true"}) as srv:
            ids = [srv.run(f"print({i})")["id"] for i in range(3)]
            ids.append(srv.run("import sys; sys.exit(3)")["id"])
            session = expect_json(srv.request("POST", "/v1/sessions", json={"language": "bash"},
                                              headers=srv.headers()), 201)["id"]
            run = expect_json(srv.request("POST", f"/v1/sessions/{session}/run",
                                          json={"code": "echo $((6 * 7))"},
                                          headers=srv.headers()))
            assert run["stdout"] == "42\n", run
            ids.append(run["id"])
            r = srv.request("POST", "/v1/batches", headers=srv.headers(), json={
                "program": {"language": "python", "code": "print(input())"},
                "cases": [{"stdin": "a", "expected_stdout": "a"},
                          {"stdin": "b", "expected_stdout": "c"}]})
            batch_id = expect_json(r, 202)["id"]
            deadline = time.monotonic() + 30 * SLOW
            while not expect_json(srv.get(f"/v1/batches/{batch_id}",
                                          headers=srv.headers()))["done"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            before = history(srv, ids, batch_id)
        with running_postgres() as pg:
            rc, tables, stderr = migrate(f"sqlite:{data_dir}", pg.url)
            assert rc == 0, stderr
            assert tables["executions"] == (7, 7) and tables["batch_cases"] == (2, 2), tables
            assert tables["sessions"] == (1, 1), tables
            rc, tables, stderr = migrate(f"sqlite:{data_dir}/audit.db", pg.url)
            assert rc == 0 and all(copied == 0 for _, copied in tables.values()), tables
            assert pg.sql("SELECT string_agg(DISTINCT node, ',') FROM executions") == "node1"
            with running_server(tiers={"t": tier}, tenants={"acme": "t"}, pools=NO_POOL,
                                server={"store_output": "true"},
                                extra_config=store(pg.url, "node1")) as srv:
                after = history(srv, ids, batch_id)
            assert after == before
            rc, _, stderr = migrate(f"sqlite:{data_dir}/nothing", pg.url)
            assert rc == 1 and f"{data_dir}/nothing" in stderr, stderr
            rc, _, stderr = migrate(f"sqlite:{data_dir}", "mysql://x")
            assert rc == 64 and "usage: sandboxd store migrate" in stderr, stderr


def test_any_node_answers_for_a_session_another_node_holds():
    """A session and an RL episode opened on node1 are used through node2 alone, which forwards
    every request to node1 (the address node1 advertises in the store): the interpreter keeps
    its globals, a file put through node2 is read back through node2 and node1, a streamed run
    arrives whole, the episode steps, and the session is deleted through node2."""
    with running_postgres() as pg, fleet(pg.url, 2) as (node1, node2):
        headers = node1.headers()
        assert pg.sql("SELECT url FROM sandboxd_nodes WHERE name = 'node1'") == \
            f"http://127.0.0.1:{node1.port}"
        session = expect_json(node1.request("POST", "/v1/sessions", json={"language": "python"},
                                            headers=headers), 201)["id"]
        base = f"/v1/sessions/{session}"
        for i in range(1, 4):
            code = "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)"
            run = expect_json(node2.request("POST", f"{base}/run", json={"code": code},
                                            headers=headers))
            assert run["stdout"] == f"{i}\n", run
        r = node2.request("PUT", f"{base}/files/data.bin", data=bytes(range(256)) * 40,
                          headers={**headers, "Content-Type": "application/octet-stream"})
        assert r.status_code == 201, r.text
        for node in (node1, node2):
            r = node.get(f"{base}/files/data.bin", headers=headers)
            assert r.status_code == 200 and r.content == bytes(range(256)) * 40, r.status_code
        listing = expect_json(node2.get(f"{base}/files?path=/workspace", headers=headers))
        assert "data.bin" in json.dumps(listing), listing
        r = node2.request("POST", f"{base}/run", json={"code": "print('a'); print('b')"},
                          headers={**headers, "Accept": "text/event-stream"})
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/event-stream"), r.headers
        assert "event: stdout" in r.text and "event: end" in r.text, r.text
        expect_problem(node2.request("POST", f"{base}/run", json={"code": 1}, headers=headers),
                       400)
        assert node2.request("DELETE", base, headers=headers).status_code == 204
        expect_problem(node1.get(base, headers=headers), 404)
        code = ("class Env:\n    def reset(self, seed=None, options=None):\n        return 0, {}\n"
                "    def step(self, action):\n        return action, 1.0, action > 2, False, {}\n")
        episode = expect_json(node1.request("POST", "/v1/episodes", json={
            "code": code, "env_class": "Env"}, headers=headers), 201)["id"]
        step = expect_json(node2.request("POST", f"/v1/episodes/{episode}/step",
                                         json={"action": 3}, headers=headers))
        assert step["terminated"] is True and step["reward"] == 1.0, step
        assert node2.request("DELETE", f"/v1/episodes/{episode}",
                             headers=headers).status_code == 204


def test_postgres_restarting_is_a_503_then_recovers_without_losing_a_lease():
    """PostgreSQL stops while an execution runs: new requests are 503 store-unavailable with
    Retry-After (nothing run), and so is reading a record; the running one still answers, and
    its release and its record's outcome are kept until PostgreSQL is back; then requests run
    again on the same node, the record has its outcome, and all four slots are free (no lease of
    the outage left behind)."""
    with running_postgres() as pg, fleet(pg.url, 1) as (node,):
        earlier = node.run("print(1)")
        assert earlier["stdout"] == "1\n"
        body = {"language": "python", "code": SLEEP.format(2), "limits": {"wall_ms": 20000}}
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            running = pool.submit(node.post_execution, body)
            # Admitted: its lease is in the store (the engine's count alone can run ahead of
            # admission while a warm pool entry is replaced, seen under ASan).
            deadline = time.monotonic() + 10 * SLOW
            while pg.sql("SELECT count(*) FROM sandboxd_leases") == "0":
                assert time.monotonic() < deadline, "the execution never took a lease"
                time.sleep(0.05)
            node.wait_for_running(1)
            pg.stop()
            r = node.post_execution({"language": "python", "code": "print(2)"})
            problem = expect_problem(r, 503, slug="store-unavailable")
            assert "nothing was run" in problem["detail"], problem
            assert int(r.headers["Retry-After"]) >= 1
            for _ in range(5):
                expect_problem(node.post_execution({"language": "python", "code": "print(2)"}),
                               503, slug="store-unavailable")
            r = node.get(f"/v1/executions/{earlier['id']}", headers=node.headers())
            expect_problem(r, 503, slug="store-unavailable")
            assert int(r.headers["Retry-After"]) >= 1
            slept = expect_json(running.result(timeout=60))
            assert slept["stdout"] == "slept\n"
        pg.start()
        deadline = time.monotonic() + 10 * SLOW
        while True:
            r = node.post_execution({"language": "python", "code": "print(3)"})
            if r.status_code == 200:
                break
            expect_problem(r, 503, slug="store-unavailable")
            assert time.monotonic() < deadline, "the node did not recover"
            time.sleep(0.2)
        # The release kept during the outage reaches the store with the next heartbeat.
        deadline = time.monotonic() + 3 * HEARTBEAT_S + 5 * SLOW
        while pg.sql("SELECT count(*) FROM sandboxd_leases") != "0":
            assert time.monotonic() < deadline, "a lease of the outage was never released"
            time.sleep(0.2)
        responses = post_many([node], {"language": "python", "code": SLEEP.format(1)}, 4)
        assert [r.status_code for r in responses] == [200] * 4, [r.text for r in responses]
        # The outcome the store could not take meanwhile reached it (the fleet's sweep, each
        # second).
        deadline = time.monotonic() + 5 * SLOW
        while (record := expect_json(node.get(f"/v1/executions/{slept['id']}",
                                              headers=node.headers())))["status"] == "running":
            assert time.monotonic() < deadline, record
            time.sleep(0.2)
        digest = hashlib.sha256(b"slept\n").hexdigest()
        assert (record["status"], record["stdout_sha256"]) == ("ok", digest), record
        # The outage was logged once, and its end, not each of its six refusals.
        log = node.stderr()
        assert log.count("the store failed, requests are refused with 503") == 1, log[-3000:]
        assert log.count("the store answers again") == 1, log[-3000:]


def test_a_bad_store_url_fails_the_start_with_the_reason():
    """A node whose store cannot be reached does not start (a fleet node without its shared
    quotas would break them), and says why."""
    srv = Server(tiers={"t": TIER}, tenants={"acme": "t"}, pools=NO_POOL,
                 extra_config=store(f"postgresql://postgres@127.0.0.1:{free_port()}/x", "n"))
    with pytest.raises(AssertionError, match="postgresql: connect"):
        srv.start()
    srv.stop(check=False)


def test_the_systemd_unit_verifies():
    """deploy/sandboxd.service as systemd-analyze reads it (its ExecStart pointed at this
    build)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "deploy", "sandboxd.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/local/bin/sandboxd serve" in unit
    with tempfile.TemporaryDirectory(prefix="unit-test-") as tmp:
        path = os.path.join(tmp, "sandboxd.service")
        with open(path, "w") as f:
            f.write(unit.replace("/usr/local/bin/sandboxd", SANDBOXD))
        out = subprocess.run([analyze, "verify", path], capture_output=True, text=True,
                             check=False, cwd=tmp)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr


def test_a_port_taken_before_postgres_or_haproxy_binds_is_never_taken_for_theirs(monkeypatch):
    """As for sandboxd's own servers (test_serve_lifecycle.py): make test's two lanes pick free
    ports side by side, and a port the other lane's server took between free_port() and the
    bind must not pass for PostgreSQL's or HAProxy's (pg_isready or a connect() answered by
    that server). A bare listener holds the first port each is offered: each comes up on
    another, and listens there itself."""
    real_free_port = fleet_servers.free_port

    def offer_first(port):
        offered = [port]
        monkeypatch.setattr(fleet_servers, "free_port",
                            lambda: offered.pop() if offered else real_free_port())

    with socket.create_server(("127.0.0.1", 0)) as impostor:
        taken = impostor.getsockname()[1]
        offer_first(taken)
        with running_postgres() as postgres:
            assert postgres.port != taken
            assert postgres.proc.pid in fleet_servers.listener_pids(postgres.port)
            assert postgres.sql("SELECT 1") == "1"
            offer_first(taken)
            with running_haproxy([postgres.port]) as proxy:
                assert proxy.port != taken
                assert proxy.proc.pid in fleet_servers.listener_pids(proxy.port)
