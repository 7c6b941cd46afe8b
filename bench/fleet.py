#!/usr/bin/python3
"""The fleet's costs (issue 21), side by side in one run: the latency the PostgreSQL store adds
to a warm `print(2+2)`, and the throughput of three nodes behind HAProxy against one node.

Latency: three `sandboxd serve` nodes, each with a warm Python pool (min_idle 2): one on its own
(quotas in memory, records in SQLite), one with `[store] url` (quotas and records in PostgreSQL
15: one round trip to reserve, one to release, the record's insert and its outcome's update), a
third as the second, reached through HAProxy; ROUNDS requests to
each, interleaved, one at a time on a kept-alive connection, each once every node is quiet (no
execution running, its pool full); p50 and p95 of the client's round
trip, and the differences of the medians: the per-request cost of the store and of HAProxy's hop
on this machine (on loopback, sharing the CPUs).

Throughput: CLIENTS client threads sending `print(2+2)` back to back for SECONDS, against
  one node        one node with the store, directly
  one via HAProxy one node with the store behind HAProxy (deploy/haproxy.cfg)
  three via HAProxy  three nodes with the store behind HAProxy
each node with max_sandboxes 8 and a warm pool; the tenant's max_concurrency is above CLIENTS so
that no request is refused. On this 2-core machine the three nodes, PostgreSQL, HAProxy and the
clients share the same two CPUs: what it shows is the fleet's overhead, not its scaling.

usage: bench/fleet.py --sandboxd build/sandboxd [--rounds N] [--clients N] [--seconds S]
                      [--out FILE]
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import fleet_servers  # noqa: E402
from peers import Server  # noqa: E402

BODY = json.dumps({"language": "python", "code": "print(2+2)"})


class Client:
    def __init__(self, port, token):
        self.port, self.token = port, token
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def run(self):
        """One execution; its round trip in ms. Reconnects once when the connection was closed."""
        for attempt in range(2):
            try:
                t0 = time.perf_counter()
                self.conn.request("POST", "/v1/executions", BODY, {
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": "application/json"})
                response = self.conn.getresponse()
                body = response.read()
                elapsed = (time.perf_counter() - t0) * 1000
                break
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt == 1:
                    raise
        if response.status != 200 or json.loads(body)["stdout"] != "4\n":
            raise RuntimeError(f"{response.status}: {body[:300]!r}")
        return elapsed


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def throughput(port, token, clients, seconds):
    """Executions per second over `seconds`, `clients` threads back to back."""
    counts = [0] * clients
    errors = []
    end = time.monotonic() + seconds

    def loop(i):
        client = Client(port, token)
        try:
            while time.monotonic() < end:
                client.run()
                counts[i] += 1
        except Exception as e:  # reported below, the run is then void
            errors.append(repr(e))

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[:3]}")
    return sum(counts) / (time.monotonic() - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--out")
    opts = parser.parse_args()
    sandboxd = os.path.abspath(opts.sandboxd)
    bin_dir, account = fleet_servers.postgres_bin_dir(), fleet_servers.postgres_account()
    haproxy = fleet_servers.haproxy_binary()
    if bin_dir is None or account is None or haproxy is None:
        sys.exit("bench/fleet.py: needs Debian's postgresql and haproxy "
                 "(scripts/install-deps.sh installs them)")
    lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                           text=True).stdout
    token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
    digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
    workdir = tempfile.mkdtemp(prefix="sandboxd-bench-fleet-")
    pg = fleet_servers.Postgres(bin_dir, account)
    servers, proxies = [], []
    try:
        pg.start()
        store = f"[store]\nurl = {pg.url}\nnode = {{}}\n"

        def node(name, with_store):
            server = Server(sandboxd, workdir, name, digest, 2, 8, 4 * opts.clients,
                            extra_config=store.format(name) if with_store else "")
            servers.append(server)
            server.wait_ready(120)
            return server

        # Three nodes, so that each of the three variants' requests drains a pool of its own.
        alone, shared = node("sqlite", False), node("postgresql", True)
        behind = node("postgresql2", True)
        proxy = fleet_servers.HAProxy(haproxy, [behind.port])
        proxies.append(proxy)
        proxy.start()
        samples = {"SQLite (no store)": [], "PostgreSQL store": [],
                   "PostgreSQL store, via HAProxy": []}
        clients = {"SQLite (no store)": Client(alone.port, token),
                   "PostgreSQL store": Client(shared.port, token),
                   "PostgreSQL store, via HAProxy": Client(proxy.port, token)}
        quiet = {"SQLite (no store)": alone, "PostgreSQL store": shared,
                 "PostgreSQL store, via HAProxy": behind}
        for round_ in range(opts.rounds + 10):
            for name, client in clients.items():
                # Every sample from the same state: no execution running, the pool full (its
                # refill after the last sample would otherwise share the CPUs with this one).
                for server in quiet.values():
                    server.wait_quiet(60)
                ms = client.run()
                if round_ >= 10:  # the first ten warm both up
                    samples[name].append(ms)
        alone.stop()
        servers.remove(alone)

        rates = {}
        rates["one node"] = throughput(shared.port, token, opts.clients, opts.seconds)
        shared.wait_quiet(60)
        rates["one via HAProxy"] = throughput(proxy.port, token, opts.clients, opts.seconds)
        more = [behind, node("postgresql3", True)]
        fleet_proxy = fleet_servers.HAProxy(haproxy, [s.port for s in [shared, *more]])
        proxies.append(fleet_proxy)
        fleet_proxy.start()
        for s in [shared, *more]:
            s.wait_quiet(60)
        rates["three via HAProxy"] = throughput(fleet_proxy.port, token, opts.clients,
                                                opts.seconds)
    finally:
        for proxy in proxies:
            proxy.remove()
        for server in servers:
            server.stop()
        pg.remove()
        shutil.rmtree(workdir, ignore_errors=True)

    p50 = {name: statistics.median(v) for name, v in samples.items()}
    p95 = {name: percentile(v, 95) for name, v in samples.items()}
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    added = p50["PostgreSQL store"] - p50["SQLite (no store)"]
    hop = p50["PostgreSQL store, via HAProxy"] - p50["PostgreSQL store"]
    out = [
        "# The fleet's costs: the PostgreSQL store's latency, three nodes behind HAProxy (issue 21)",
        "",
        f"`/usr/bin/python3 bench/fleet.py --sandboxd build/sandboxd --rounds {opts.rounds} "
        f"--clients {opts.clients} --seconds {opts.seconds:g}"
        f"{' --out ' + opts.out if opts.out else ''}`, {when}, {platform.node()}, "
        f"{os.cpu_count()} CPUs. PostgreSQL 15 and HAProxy 2.6 on loopback, on the same CPUs.",
        "",
        f"Warm `print(2+2)` over HTTP, {opts.rounds} requests to each, interleaved, one at a "
        "time on a kept-alive connection, each once every node is quiet: a node on its own, a "
        "node with the store, another node with the store through HAProxy:",
        "",
        "| node | p50 ms | p95 ms |",
        "| --- | ---: | ---: |",
    ]
    for name in samples:
        out.append(f"| {name} | {p50[name]:.2f} | {p95[name]:.2f} |")
    out += [
        "",
        f"The store adds **{added:.2f} ms** at the median (four round trips to PostgreSQL, one "
        f"statement each: the quota's reserve and release, the record's insert and its "
        f"outcome, against two SQLite statements in the node's own file); HAProxy's hop "
        f"**{hop:.2f} ms**.",
        "",
        f"Throughput, {opts.clients} clients back to back for {opts.seconds:g} s each:",
        "",
        "| fleet | executions/s | × one node |",
        "| --- | ---: | ---: |",
    ]
    for name, rate in rates.items():
        out.append(f"| {name} | {rate:.1f} | {rate / rates['one node']:.2f} |")
    out += [
        "",
        "On this machine the three nodes share two CPUs with PostgreSQL, HAProxy and the clients, "
        "so three nodes cannot run more sandboxes than one: the figure is what the fleet costs, "
        "not what it gains. On N machines each node brings its own CPUs, and what the fleet adds "
        f"to a request is the store's {added:.2f} ms and HAProxy's {hop:.2f} ms (measured "
        "above, on loopback); PostgreSQL serialises only the reservations of one tenant (a "
        "per-tenant advisory lock), so tenants do not wait for each other there.",
        "",
    ]
    text = "\n".join(out)
    print(text)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
