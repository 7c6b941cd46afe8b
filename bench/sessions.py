#!/usr/bin/python3
"""A session cell against bare exec and a local Jupyter kernel, side by side in one run.

Variants, interleaved round-robin (a few warm-up rounds discarded), each sample the client's wall
time of one round trip:
  bare python3 -c pass     subprocess.run of the interpreter: what one-shot execution costs
                           at the very least
  session cell             `sandboxd session`: the cell `x += 1` sent as a JSON line, its result
                           line read back (the engine's session code; no HTTP)
  http session cell        POST /v1/sessions/{id}/run to a `sandboxd serve` on loopback, on a
                           kept-alive connection (bench/peers.py's server), response parsed
  jupyter cell             a local, unsandboxed ipykernel (Debian python3-ipykernel) driven by
                           jupyter_client: execute `x += 1` and wait for its reply and idle state
then the three cell variants again, each back to back (a cell right after the one before) and
each after a 20 ms idle pause, and the cost of a plot cell (a line plot shown as PNG) in the
session and in the kernel.

usage: bench/sessions.py --sandboxd build/sandboxd [--rounds N] [--out FILE]
Everything it starts (the session, the kernel) is stopped on exit.
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import Server  # noqa: E402

PYTHON = "/usr/bin/python3"
CELL = "x += 1"
PLOT = ("import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([3, 1, 2, 5, 4])\n"
        "plt.show()")


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Session:
    def __init__(self, sandboxd):
        self.process = subprocess.Popen([sandboxd, "session"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        assert self.send({"op": "open", "language": "python"})["ok"]
        assert self.send({"op": "run", "code": "x = 0"})["status"] == "ok"

    def send(self, line):
        self.process.stdin.write(json.dumps(line).encode() + b"\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def cell(self, code):
        result = self.send({"op": "run", "code": code})
        assert result["status"] == "ok", result
        return result

    def close(self):
        self.process.stdin.close()
        self.process.wait(30)


class HttpSession:
    """A session of a `sandboxd serve` on loopback, on one kept-alive connection."""

    def __init__(self, sandboxd, workdir, name="sessions", session_pools=()):
        lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                               text=True).stdout
        token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
        digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
        self.server = Server(sandboxd, workdir, name, digest, 0, 8, 8,
                             session_pools=session_pools)
        self.server.wait_ready()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        opened = self.post("/v1/sessions", {"language": "python"}, 201)
        self.path = f"/v1/sessions/{opened['id']}/run"
        self.cell("x = 0")

    def post(self, path, body, want=200):
        self.conn.request("POST", path, json.dumps(body), self.headers)
        response = self.conn.getresponse()
        data = response.read()
        assert response.status == want, (response.status, data[:300])
        return json.loads(data)

    def cell(self, code):
        result = self.post(self.path, {"code": code})
        assert result["status"] == "ok", result
        return result

    def open_and_close(self):
        """Opens a python session, closes it; (ms the open took, whether it was pooled). Each
        open starts once the session pool (if any) is full and nothing else is starting."""
        deadline = time.monotonic() + 60
        while True:
            m = self.server.metrics()
            if (m.get('sandboxd_pool_entries{state="idle"}', 0) >= self.server.pool_min_idle
                    and m.get('sandboxd_pool_entries{state="starting"}', 0) == 0):
                break
            assert time.monotonic() < deadline, f"{self.server.name}: the pool never filled"
            time.sleep(0.002)
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        conn.connect()
        start = time.perf_counter_ns()
        conn.request("POST", "/v1/sessions", json.dumps({"language": "python"}), self.headers)
        response = conn.getresponse()
        opened = json.loads(response.read())
        ms = (time.perf_counter_ns() - start) / 1e6
        assert response.status == 201, opened
        conn.request("DELETE", f"/v1/sessions/{opened['id']}",
                     headers={"Authorization": self.headers["Authorization"]})
        response = conn.getresponse()
        response.read()
        assert response.status in (200, 204), response.status
        conn.close()
        return ms, opened["pooled"]

    def close(self):
        self.conn.close()
        self.server.stop()


class Kernel:
    def __init__(self):
        from jupyter_client.manager import start_new_kernel
        self.manager, self.client = start_new_kernel(kernel_name="python3")
        self.cell("x = 0")
        self.cell("%matplotlib inline")

    def cell(self, code):
        outputs = []
        reply = self.client.execute_interactive(code, timeout=60,
                                                output_hook=outputs.append)
        assert reply["content"]["status"] == "ok", reply["content"]
        return outputs

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def timed(fn):
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--plot-rounds", type=int, default=20)
    parser.add_argument("--out")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="bench-sessions-")
    os.chmod(workdir, 0o711)  # the API process (an unprivileged uid) reaches its data dir
    session = kernel = served = None
    try:
        # Inside the try: a kernel that cannot start (no jupyter_client) must not leave the
        # session or the temp dir behind.
        session = Session(os.path.abspath(args.sandboxd))
        kernel = Kernel()
        served = HttpSession(os.path.abspath(args.sandboxd), workdir)
        variants = {
            "bare python3 -c pass": lambda: subprocess.run([PYTHON, "-c", "pass"], check=True),
            "session cell x += 1": lambda: session.cell(CELL),
            "http session cell x += 1": lambda: served.cell(CELL),
            "jupyter cell x += 1": lambda: kernel.cell(CELL),
        }
        samples = {name: [] for name in variants}
        for round_ in range(args.rounds + 5):
            for name, fn in variants.items():
                ms = timed(fn)
                if round_ >= 5:
                    samples[name].append(ms)
        # The same cells back to back: each right after the one before, as a loop of cells
        # runs (the interleaved rounds above find the caches cold, as after an agent's pause).
        back_to_back = {}
        for name in ("session cell x += 1", "http session cell x += 1", "jupyter cell x += 1"):
            for _ in range(5):
                variants[name]()
            back_to_back[name + ", back to back"] = [timed(variants[name])
                                                     for _ in range(args.rounds)]
        # ... and each after a 20 ms pause with nothing to do: what waking idle CPUs costs,
        # alone (an agent's cell comes after a pause, and every hop of a round trip wakes a
        # process).
        after_pause = {}
        for name in ("session cell x += 1", "http session cell x += 1", "jupyter cell x += 1"):
            samples_after = []
            for _ in range(args.rounds):
                time.sleep(0.02)
                samples_after.append(timed(variants[name]))
            after_pause[name + ", after 20 ms idle"] = samples_after
        plots = {"session plot cell": [], "jupyter plot cell": []}
        for round_ in range(args.plot_rounds + 2):
            session_ms = timed(lambda: session.cell(PLOT))
            kernel_ms = timed(lambda: kernel.cell(PLOT))
            if round_ >= 2:
                plots["session plot cell"].append(session_ms)
                plots["jupyter plot cell"].append(kernel_ms)
        # Opening a session: its own sandbox (no session pool) against one of a session pool
        # (sessions opened ahead of time).
        pooled_server = HttpSession(os.path.abspath(args.sandboxd), workdir, "session-pool",
                                    session_pools=("python",))
        try:
            opens = {"http session open, its own sandbox": [],
                     "http session open, from a session pool": []}
            for _ in range(args.plot_rounds + 2):
                ms, pooled = served.open_and_close()
                assert not pooled
                opens["http session open, its own sandbox"].append(ms)
                ms, pooled = pooled_server.open_and_close()
                assert pooled
                opens["http session open, from a session pool"].append(ms)
            for values in opens.values():
                del values[:2]
        finally:
            pooled_server.close()
        # The plot cells did make a PNG each.
        assert "image/png" in session.cell(PLOT)["results"][0]
        assert any("image/png" in (o.get("content", {}).get("data") or {})
                   for o in kernel.cell(PLOT))
    finally:
        for started in (session, kernel, served):
            if started is not None:
                started.close()
        shutil.rmtree(workdir, ignore_errors=True)

    bare = statistics.median(samples["bare python3 -c pass"])
    jupyter = statistics.median(samples["jupyter cell x += 1"])
    lines = [
        "# Session cells against bare exec and a local Jupyter kernel",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, Linux {platform.release()}; "
        f"`bench/sessions.py --sandboxd {args.sandboxd} --rounds {args.rounds}` "
        f"(interleaved rounds, 5 warm-up rounds discarded; then each cell variant as many times "
        f"back to back, and after a 20 ms pause; client wall time per round trip).",
        "",
        "| variant | median ms | p95 ms | / bare exec | / jupyter cell |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    jupyter_back_to_back = statistics.median(back_to_back["jupyter cell x += 1, back to back"])
    jupyter_after_pause = statistics.median(after_pause["jupyter cell x += 1, after 20 ms idle"])
    for name, values in {**samples, **back_to_back, **after_pause, **plots, **opens}.items():
        median = statistics.median(values)
        reference = (statistics.median(opens["http session open, its own sandbox"])
                     if "open" in name
                     else statistics.median(plots["jupyter plot cell"]) if "plot" in name
                     else jupyter_back_to_back if "back to back" in name
                     else jupyter_after_pause if "idle" in name else jupyter)
        lines.append(f"| {name} | {median:.3f} | {percentile(values, 95):.3f} | "
                     f"{median / bare:.3f} | {median / reference:.2f} |")
    lines += ["", "The session runs with every isolation layer of a cold sandbox; the Jupyter "
              "kernel runs unsandboxed on the host. Interleaved, each cell follows the other "
              f"variants' work (a {bare:.0f} ms interpreter start among them) and finds the "
              "caches cold, "
              "as a cell does after an agent's pause; back to back, each follows the one before; "
              "after 20 ms idle, each follows a pause with nothing running, which shows what "
              "waking idle CPUs costs alone (each hop of a round trip wakes a process: eight "
              "over HTTP, four through `sandboxd session`). Those rows' last column compares "
              "with the kernel's cell measured the same way. "
              "Plot cells: a 5-point line plot shown as PNG "
              f"({args.plot_rounds} rounds; the last column compares with the kernel's plot "
              "cell). Session opens: POST /v1/sessions (python) and its DELETE, each open "
              "after the server is quiet (its session pool full), "
              f"{args.plot_rounds} rounds; the last column compares with an open in a sandbox "
              "of its own."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)


if __name__ == "__main__":
    sys.exit(main())
