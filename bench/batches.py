#!/usr/bin/python3
"""A batch of 1000 `print(input())` test cases against the same 1000 bare `python3` processes,
side by side (issue 17), and the queue's own overhead.

Variants, rounds interleaved (the first round discarded), the wall time of the whole 1000 as
this script sees it, reported as cases per second:
  bare loop        a shell loop running `printf N | /usr/bin/python3 -c 'print(input())'` 1000 times, one
                   after the other, its output compared with the expected (the issue's baseline)
  bare xargs -P2   the same 1000 processes two at a time (`xargs -P 2`): as parallel as this
                   2-core machine goes, no isolation
  sandboxd batch   POST /v1/batches with the 1000 cases (expected_stdout each), then GET
                   /v1/batches/{id}?fields=verdict every 20 ms until done, every case accepted;
                   one `sandboxd serve` on loopback, a warm Python pool (min_idle 4), the tier's
                   max_concurrency 8 (each case in a fresh sandbox of its own)
Then the queue's overhead with idle capacity: N single asynchronous executions, each submitted
once the previous one has ended, and `sandboxd_queue_wait_seconds` (accepted to started, in the
API process) read from /metrics before and after: its mean, and the p50 bound its histogram
gives. The issue's targets: sandboxd batch >= 0.9 x the bare loop; queue overhead p50 <= 1 ms.

usage: bench/batches.py --sandboxd build/sandboxd [--rounds N] [--singles N] [--out FILE]
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

CASES = 1000
CODE = "print(input())"
BARE_LOOP = (
    "i=0; bad=0\n"
    f"while [ $i -lt {CASES} ]; do\n"
    "  out=$(printf '%s\\n' $i | /usr/bin/python3 -c 'print(input())')\n"
    "  [ \"$out\" = \"$i\" ] || bad=$((bad+1))\n"
    "  i=$((i+1))\n"
    "done\n"
    "[ $bad -eq 0 ]\n"
)
BARE_XARGS = (
    f"seq 0 {CASES - 1} | xargs -P 2 -I N sh -c "
    "'[ \"$(printf \"%s\\n\" N | /usr/bin/python3 -c \"print(input())\")\" = N ]'"
)


class Api:
    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          self.headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())


def run_shell(script):
    started = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", script], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def run_batch(api, server):
    server.wait_quiet(120)
    body = {"program": {"language": "python", "code": CODE},
            "cases": [{"stdin": f"{i}\n", "expected_stdout": f"{i}\n"} for i in range(CASES)],
            "compare": "exact"}
    started = time.perf_counter()
    status, answer = api.call("POST", "/v1/batches", body)
    if status != 202:
        raise RuntimeError(f"POST /v1/batches: {status} {answer}")
    while True:
        status, batch = api.call("GET", f"/v1/batches/{answer['id']}?fields=verdict")
        if status != 200:
            raise RuntimeError(f"GET batch: {status} {batch}")
        if batch["done"]:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if batch["summary"] != {"accepted": CASES}:
        raise RuntimeError(f"batch: {batch['summary']}")
    return elapsed


def queue_wait(server):
    """(count, sum in s, [(le seconds, cumulative count)]) of sandboxd_queue_wait_seconds."""
    m = server.metrics()
    buckets = sorted((float(re.search(r'le="([^"]+)"', key).group(1)), value)
                     for key, value in m.items()
                     if key.startswith("sandboxd_queue_wait_seconds_bucket")
                     and 'le="+Inf"' not in key)
    return (m.get("sandboxd_queue_wait_seconds_count", 0),
            m.get("sandboxd_queue_wait_seconds_sum", 0), buckets)


def singles(api, server, n):
    """Queue overhead with idle capacity: (mean ms, p50 upper bound ms, n)."""
    count0, sum0, buckets0 = queue_wait(server)
    for i in range(n):
        server.wait_quiet(120)
        status, answer = api.call("POST", "/v1/executions",
                                  {"language": "python", "code": CODE, "stdin": f"{i}\n",
                                   "wait": False})
        if status != 202:
            raise RuntimeError(f"POST: {status} {answer}")
        status, record = api.call("GET", f"/v1/executions/{answer['id']}?wait=30")
        if record["status"] != "ok" or record["stdout"] != f"{i}\n":
            raise RuntimeError(f"single: {record}")
    count1, sum1, buckets1 = queue_wait(server)
    count = count1 - count0
    deltas = [(le, c1 - c0) for (le, c1), (_, c0) in zip(buckets1, buckets0)]
    p50 = next((le for le, cumulative in deltas if cumulative >= count / 2), float("inf"))
    return (sum1 - sum0) / count * 1000, p50 * 1000, int(count)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--out")
    opts = parser.parse_args()
    sandboxd = os.path.abspath(opts.sandboxd)
    lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                           text=True).stdout
    token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
    digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
    workdir = tempfile.mkdtemp(prefix="sandboxd-bench-batches-")
    samples = {"bare loop": [], "bare xargs -P2": [], "sandboxd batch": []}
    server = Server(sandboxd, workdir, "batches", digest, 4, 8, 8,
                    tier_settings=[("max_queued", 100000)])
    try:
        server.wait_ready(120)
        api = Api(server.port, token)
        for round_ in range(opts.rounds + 1):
            for name in samples:
                if name == "sandboxd batch":
                    seconds = run_batch(api, server)
                else:
                    seconds = run_shell(BARE_LOOP if name == "bare loop" else BARE_XARGS)
                if round_ > 0:
                    samples[name].append(seconds)
                print(f"round {round_} {name}: {CASES / seconds:.1f} cases/s", file=sys.stderr)
        mean_ms, p50_ms, n = singles(api, server, opts.singles)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    rate = {name: CASES / statistics.median(values) for name, values in samples.items()}
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# A batch of 1000 test cases against the same 1000 bare processes (issue 17)",
        "",
        f"`/usr/bin/python3 bench/batches.py --sandboxd build/sandboxd --rounds {opts.rounds} "
        f"--singles {opts.singles}{' --out ' + opts.out if opts.out else ''}`, {when}, "
        f"{platform.node()}, {os.cpu_count()} CPUs, rounds interleaved (the first discarded), "
        "medians. Each case is `print(input())` with its number on stdin; every output is "
        "checked (the batch: every case `accepted` against its expected_stdout).",
        "",
        "| variant | cases/s | × bare loop |",
        "| --- | ---: | ---: |",
    ]
    for name in samples:
        out.append(f"| {name} | {rate[name]:.1f} | {rate[name] / rate['bare loop']:.2f} |")
    out += [
        "",
        f"Queue overhead with idle capacity (accepted to started, `sandboxd_queue_wait_seconds`, "
        f"{n} single asynchronous executions one after another): mean **{mean_ms:.3f} ms**, "
        f"p50 ≤ **{p50_ms:g} ms** (the histogram bucket holding the median).",
        "",
        f"Targets: sandboxd batch ≥ 0.9 × the bare loop: "
        f"**{rate['sandboxd batch'] / rate['bare loop']:.2f} ×** "
        f"({'met' if rate['sandboxd batch'] >= 0.9 * rate['bare loop'] else 'missed'}); "
        f"queue overhead p50 ≤ 1 ms: {'met' if p50_ms <= 1 else 'missed'}. Against the bare "
        f"processes two at a time: {rate['sandboxd batch'] / rate['bare xargs -P2']:.2f} ×.",
        "",
    ]
    text = "\n".join(out)
    print(text)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
