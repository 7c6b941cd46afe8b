#!/usr/bin/python3
"""RL episodes over HTTP (`sandboxd serve`, /v1/episodes) against bare exec and in-process steps.

The environment is trivial, so that what is measured is the cost of a step's round trip and not
the environment's own work: reset returns (0, {}), step does self.t += 1 and returns
(self.t, 1.0, False, False, {}) (it never terminates). Every action is 0.

Variants, interleaved round-robin (a few warm-up rounds discarded), each sample the client's wall
time of one call:
  bare python3 -c pass     subprocess.run of the interpreter: what one-shot execution costs at
                           the very least (the reference)
  in-process env.step      the same environment class, made in this Python process, one
                           env.step(0) call timed alone (perf_counter_ns; the timer's own cost
                           is shown apart, and the mean of a tight loop of steps too): the floor
  http step                POST /v1/episodes/{id}/step {"action": 0} on a kept-alive connection
                           (http.client), the JSON answer parsed and checked
  http batch step          POST /v1/episodes/step with one step for each of 16 episodes (opened
                           by one POST /v1/episodes with count 16: a sandbox each), on its own
                           kept-alive connection, the answer parsed and each result checked;
                           env steps/s = 16 / the call's time
  http batch step, shared  the same for 16 episodes opened with "sandbox": "shared" (one
                           sandbox and interpreter for the 16, as Gymnasium's SyncVectorEnv)
then the single step again back to back (each call right after the one before), and the
sustained throughput of batch calls: a fixed number of calls back to back from 1 client, then
from 2 client threads at once, each with its own connection and its own 16 episodes (total env
steps / wall time from the start of the first call to the end of the last), for episodes with a
sandbox each and for shared ones. During the
sustained runs the machine's CPU time (/proc/stat, both CPUs, this client included) and the
client's own CPU time (getrusage) are read, and every step answer's `timing.total_us` (the time
inside the engine's session worker) is kept: they say where a call's time goes. When the batch
target is missed (--profile auto; or always), `perf record -a -g` runs over a few more seconds
of 1-client batch load, and the report gives the machine's time by role (engine, session
workers, sandboxed interpreters, API, this client, idle) and the hottest symbols.

The server runs with a tier that allows it: max_episodes 80, max_concurrency 32 (a batch runs in
waves of it: 16 steps are one wave, and so are the 2 clients' 16 each), server max_sessions 64
and max_sandboxes 96.

usage: bench/episodes.py --sandboxd build/sandboxd [--rounds N] [--batch-rounds N]
                         [--sustained-calls N] [--profile auto|always|never] [--out FILE]
Run as root (sandboxd serve needs it). Everything it starts (the episodes, the server, its temp
dir) is stopped and removed on exit, on failure and on Ctrl-C / SIGTERM too.
"""

import argparse
import datetime
import http.client
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_latency import machine  # noqa: E402
from peers import Server, children_map, descendants, proc_cmdline, terminate  # noqa: E402

PYTHON = "/usr/bin/python3"
ENV_CODE = """\
class Env:
    def __init__(self):
        self.t = 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return self.t, 1.0, False, False, {}
"""
BATCH = 16
WARMUP_ROUNDS = 5
FLOOR_LOOP_STEPS = 100_000
TARGETS = {"step_vs_bare": 0.05, "batch_steps_per_s": 10_000}
# The server's settings: room for 1 + 2 x 16 episodes, and a wave for 32 steps at once.
MAX_SANDBOXES = 96
MAX_SESSIONS = 64
MAX_EPISODES = 80
MAX_CONCURRENCY = 32

BARE = "bare python3 -c pass"
FLOOR = "in-process env.step"
STEP = "http step"
BATCHED = f"http batch step ({BATCH} episodes)"
BATCHED_SHARED = f"http batch step ({BATCH} episodes, shared sandbox)"
STEP_B2B = "http step, back to back"


class BenchError(Exception):
    pass


def log(message):
    print(f"episodes: {message}", file=sys.stderr, flush=True)


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def median(values):
    return statistics.median(values) if values else None


def fmt(value, digits=3):
    return "n/a" if value is None else f"{value:.{digits}f}"


def cpu_ticks():
    """(busy, total) jiffies of the whole machine, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # without guest time, which user time includes already
    return total - idle, total


def self_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Client:
    """One kept-alive HTTP/1.1 connection to the server; call() returns (ms, parsed answer), the
    time from sending the request to the parsed answer (the body is encoded before)."""

    def __init__(self, port, token):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.connect()
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.reconnects = 0

    def call(self, method, path, body=None, want=200):
        if self.conn.sock is None:  # the server closed it: reconnect, untimed
            self.reconnects += 1
            self.conn.connect()
        start = time.perf_counter_ns()
        try:
            self.conn.request(method, path, body, self.headers)
            response = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed it while it was idle (a kept-alive connection must send its
            # next request head within 10 s, http_guard.h; this client waited through the
            # other variants' rounds): again on a new one, untimed.
            self.reconnects += 1
            self.conn.close()
            self.conn.connect()
            start = time.perf_counter_ns()
            self.conn.request(method, path, body, self.headers)
            response = self.conn.getresponse()
        data = response.read()
        parsed = json.loads(data) if data else None
        ms = (time.perf_counter_ns() - start) / 1e6
        if response.status != want:
            raise BenchError(f"{method} {path}: {response.status} {data[:400]!r}")
        return ms, parsed

    def close(self):
        self.conn.close()


class Episodes:
    """count episodes of ENV_CODE opened on one client, stepped one at a time or as a batch."""

    def __init__(self, client, count, counted, shared=False):
        self.client = client
        self.shared = shared
        body = {"code": ENV_CODE, "env_class": "Env", "seed": 0}
        if counted:
            body["count"] = count
        if shared:
            body["sandbox"] = "shared"
        self.open_ms, opened = client.call("POST", "/v1/episodes", json.dumps(body), 201)
        listed = opened["episodes"] if counted else [opened]
        if len(listed) != count or any(e["observation"] != 0 for e in listed):
            raise BenchError(f"open: unexpected answer {opened}")
        self.ids = [e["id"] for e in listed]
        self.steps = 0  # steps each has had (all step together)
        self.step_body = json.dumps({"action": 0})
        self.batch_body = json.dumps({"steps": [{"id": i, "action": 0} for i in self.ids]})

    def step(self, engine_us):
        ms, result = self.client.call("POST", f"/v1/episodes/{self.ids[0]}/step", self.step_body)
        self.steps += 1
        self.check(result, self.ids[0])
        engine_us.append(result["timing"]["total_us"])
        return ms

    def batch(self, engine_us):
        """One batch call; engine_us gets the wave's longest step's timing.total_us (the steps
        of a wave run side by side)."""
        ms, answer = self.client.call("POST", "/v1/episodes/step", self.batch_body)
        self.steps += 1
        results = answer["results"]
        if len(results) != len(self.ids):
            raise BenchError(f"batch: {len(results)} results for {len(self.ids)} steps")
        for episode_id, result in zip(self.ids, results):
            self.check(result, episode_id)
        engine_us.append(max(r["timing"]["total_us"] for r in results))
        return ms

    def check(self, result, episode_id):
        if (result.get("status") != "ok" or result.get("id") != episode_id
                or result.get("observation") != self.steps or result.get("reward") != 1.0
                or result.get("terminated") or result.get("truncated")):
            raise BenchError(f"step {self.steps} of {episode_id}: unexpected answer {result}")

    def delete(self):
        """DELETE each (on a fresh connection if this one broke); the ids not deleted stay."""
        failed = []
        for episode_id in self.ids:
            try:
                self.client.call("DELETE", f"/v1/episodes/{episode_id}", want=204)
            except (OSError, http.client.HTTPException, BenchError) as exc:
                self.client.conn.close()
                failed.append(f"{episode_id}: {exc}")
        self.ids = []
        if failed:
            raise BenchError("DELETE failed: " + "; ".join(failed))


def sustained(clients, calls):
    """Each of clients (Episodes of BATCH) makes calls batch calls back to back, each in its own
    thread; the run's figures."""
    barrier = threading.Barrier(len(clients) + 1)
    per_call = [[] for _ in clients]
    engine_us = [[] for _ in clients]
    ends = [None] * len(clients)
    errors = []

    def run(index):
        try:
            barrier.wait()
            for _ in range(calls):
                per_call[index].append(clients[index].batch(engine_us[index]))
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            ends[index] = time.perf_counter()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    busy0, total0 = cpu_ticks()
    client0 = self_cpu_s()
    start = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    wall = max(ends) - start
    busy1, total1 = cpu_ticks()
    client_cpu = self_cpu_s() - client0
    if errors:
        raise BenchError(f"sustained run: {errors[0]}")
    steps = len(clients) * calls * BATCH
    hz = os.sysconf("SC_CLK_TCK")
    machine_cpu_s = (busy1 - busy0) / hz
    calls_ms = [ms for samples in per_call for ms in samples]
    wave_us = [us for samples in engine_us for us in samples]
    return {
        "clients": len(clients), "calls": calls * len(clients), "steps": steps, "wall_s": wall,
        "rate": steps / wall, "p50_ms": median(calls_ms), "p95_ms": percentile(calls_ms, 95),
        "busy_pct": 100 * (busy1 - busy0) / max(1, total1 - total0),
        "cpu_us_per_step": machine_cpu_s * 1e6 / steps,
        "client_cpu_us_per_call": client_cpu * 1e6 / (calls * len(clients)),
        "client_cpu_pct": 100 * client_cpu / (wall * os.cpu_count()),
        "engine_wave_us": median(wave_us),
    }


def tasks(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def perf_lines(data, *args):
    proc = subprocess.run(["perf", "report", "-i", data, "--stdio", "-q", "-g", "none", *args],
                          capture_output=True, text=True)
    lines = [line.rstrip() for line in proc.stdout.splitlines()
             if line.strip() and not line.startswith("#")]
    # With callees included, the syscall entry frames (and perf's unknown frames) sum every
    # syscall and say nothing: they go (as in bench/peers.py).
    frames = r"do_syscall_64|entry_SYSCALL_64_after_hwframe|x64_sys_call|0x[0-9a-f]+|[0-9a-f]{16}"
    return [line for line in lines if not re.search(rf"\] ({frames})$", line)]


def profile(server, workdir, episodes, seconds):
    """perf record -a -g while one client makes batch calls back to back for about seconds:
    the machine's time by role (per thread, classified by process), and the hottest symbols of
    the sandboxd processes and of the sandboxed interpreters."""
    data = os.path.join(workdir, "perf.data")
    engine, api = server.pids()
    roles = {}  # tid -> role
    for tid in tasks(engine):
        roles[tid] = "engine (sandboxd serve)"
    for tid in tasks(api):
        roles[tid] = "API (sandboxd-api, its HTTP threads)"
    for tid in tasks(os.getpid()):
        roles[tid] = "this client (python3)"
    workers, interpreters = [], []
    for pid in descendants(engine, children_map()):
        if pid == api:
            continue
        name = os.path.basename((proc_cmdline(pid) or [b""])[0].decode(errors="replace"))
        if name == "sandboxd":
            role, group = "session workers + sandbox inits (sandboxd)", workers
        elif name.startswith("python3"):
            role, group = "sandboxed python3 (keepers + environments)", interpreters
        else:
            role, group = f"other sandbox processes ({name})", None
        if group is not None:
            group.append(pid)
        for tid in tasks(pid):
            roles[tid] = role
    perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "999", "-o", data, "--",
                             "sleep", str(seconds)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    discard_us = []
    calls = 0
    try:
        time.sleep(0.3)  # perf is recording
        start = time.perf_counter()
        while perf.poll() is None:
            episodes.batch(discard_us)
            calls += 1
        wall = time.perf_counter() - start
    finally:
        terminate(perf, 10)
    if perf.returncode != 0:
        raise BenchError(f"perf record exited {perf.returncode}")
    steps = calls * len(episodes.ids)
    shares, others = {}, {}
    for line in perf_lines(data, "--no-children", "--sort", "pid"):
        match = re.match(r"\s*([\d.]+)%\s+(\d+):(.*)$", line)
        if not match:
            continue
        pct, tid = float(match.group(1)), int(match.group(2))
        role = "idle" if tid == 0 else roles.get(tid, "other (kernel threads, other processes)")
        shares[role] = shares.get(role, 0.0) + pct
        if tid != 0 and tid not in roles:
            # Which: kworker/1:2 and kworker/u8:0 are one kworker.
            comm = re.split(r"[/:]", match.group(3).strip())[0]
            others[comm] = others.get(comm, 0.0) + pct
    # The record lasted about `seconds` of which the calls ran `wall`: shares are of all CPUs'
    # time over the record.
    cpu_us = seconds * os.cpu_count() * 1e6
    return {
        "seconds": seconds, "calls": calls, "steps": steps, "rate": steps / wall if wall else 0,
        "roles": sorted(((pct, role, pct / 100 * cpu_us / steps if steps else 0)
                         for role, pct in shares.items()), reverse=True),
        "others": ", ".join(f"{comm} {pct:.1f} %" for comm, pct in
                            sorted(others.items(), key=lambda item: -item[1])[:6]),
        "sandboxd": "\n".join(perf_lines(
            data, "--children", "--pid", ",".join(map(str, [engine] + workers)),
            "--percentage", "relative", "--sort", "sym", "--percent-limit", "3")[:30]),
        "python": "\n".join(perf_lines(
            data, "--no-children", "--pid", ",".join(map(str, interpreters)),
            "--percentage", "relative", "--sort", "dso,sym", "--percent-limit", "1")[:25]),
    }


def floor_timer_ns():
    """Median cost of timing nothing with perf_counter_ns: what each in-process sample adds."""
    samples = []
    for _ in range(1000):
        start = time.perf_counter_ns()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples)


def floor_loop_us(env):
    env.reset(seed=0)
    step = env.step
    start = time.perf_counter_ns()
    for _ in range(FLOOR_LOOP_STEPS):
        step(0)
    return (time.perf_counter_ns() - start) / 1e3 / FLOOR_LOOP_STEPS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=300,
                        help="interleaved rounds of bare exec, in-process and single HTTP steps")
    parser.add_argument("--batch-rounds", type=int, default=300,
                        help="interleaved rounds of batch calls")
    parser.add_argument("--sustained-calls", type=int, default=300,
                        help="batch calls per client in each sustained run")
    parser.add_argument("--profile", default="auto", choices=("auto", "always", "never"),
                        help="perf record a batch load (auto: when the batch target is missed)")
    parser.add_argument("--profile-seconds", type=float, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    if min(args.rounds, args.batch_rounds, args.sustained_calls) < 1:
        parser.error("--rounds, --batch-rounds and --sustained-calls must be >= 1")
    command = shlex.join([sys.executable] + sys.argv)
    sandboxd = os.path.abspath(args.sandboxd)
    if os.geteuid() != 0:
        sys.exit("episodes: run as root (sandboxd serve needs it)")
    if not os.access(sandboxd, os.X_OK):
        sys.exit(f"episodes: {sandboxd} is not an executable sandboxd")

    # Ctrl-C, SIGTERM and SIGHUP unwind, so that the cleanup below runs.
    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)

    started_at = datetime.datetime.now(datetime.timezone.utc)
    loadavg_start = loadavg()
    busy_before = machine_busy_pct(1.0)
    if busy_before > 20:
        log(f"the machine is {busy_before:.0f} % busy before the start: figures will suffer")
    workdir = tempfile.mkdtemp(prefix="bench-episodes-")
    os.chmod(workdir, 0o711)  # the API process (an unprivileged uid) reaches its data dir
    server = None
    clients, episode_sets = [], []
    try:
        lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                               text=True).stdout
        token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
        digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
        server = Server(sandboxd, workdir, "episodes", digest, 0, MAX_SANDBOXES, MAX_CONCURRENCY,
                        server_settings=[("max_sessions", MAX_SESSIONS)],
                        tier_settings=[("max_episodes", MAX_EPISODES)])
        server.wait_ready()

        # One client for the single steps, one for the batches; the second sustained client
        # has its own connection and 16 episodes too.
        clients = [Client(server.port, token) for _ in range(5)]
        single = Episodes(clients[0], 1, counted=False)
        episode_sets.append(single)
        batched = Episodes(clients[1], BATCH, counted=True)
        episode_sets.append(batched)
        second = Episodes(clients[2], BATCH, counted=True)
        episode_sets.append(second)
        shared = Episodes(clients[3], BATCH, counted=True, shared=True)
        episode_sets.append(shared)
        second_shared = Episodes(clients[4], BATCH, counted=True, shared=True)
        episode_sets.append(second_shared)
        open_ms = {"open 1 episode": single.open_ms,
                   f"open {BATCH} episodes (count {BATCH})": batched.open_ms,
                   f"open {BATCH} episodes in a shared sandbox": shared.open_ms}

        namespace = {}
        exec(ENV_CODE, namespace)
        env = namespace["Env"]()
        env.reset(seed=0)

        engine_us = {STEP: [], BATCHED: [], BATCHED_SHARED: []}
        discard_us = []

        def floor_sample():
            start = time.perf_counter_ns()
            env.step(0)
            return (time.perf_counter_ns() - start) / 1e6

        def bare_sample():
            start = time.perf_counter_ns()
            subprocess.run([PYTHON, "-c", "pass"], check=True)
            return (time.perf_counter_ns() - start) / 1e6

        variants = {
            BARE: (args.rounds, bare_sample),
            FLOOR: (args.rounds, floor_sample),
            STEP: (args.rounds, lambda: single.step(engine_us[STEP])),
            BATCHED: (args.batch_rounds, lambda: batched.batch(engine_us[BATCHED])),
            BATCHED_SHARED: (args.batch_rounds,
                             lambda: shared.batch(engine_us[BATCHED_SHARED])),
        }
        samples = {name: [] for name in variants}
        for round_ in range(WARMUP_ROUNDS + max(args.rounds, args.batch_rounds)):
            for name, (rounds, sample) in variants.items():
                if round_ >= WARMUP_ROUNDS + rounds:
                    continue
                ms = sample()
                if round_ >= WARMUP_ROUNDS:
                    samples[name].append(ms)
        # The warm-up rounds' engine timings go too.
        for name in engine_us:
            del engine_us[name][:WARMUP_ROUNDS]

        # Single steps back to back: each call right after the one before.
        for _ in range(WARMUP_ROUNDS):
            single.step(discard_us)
        engine_us[STEP_B2B] = []
        samples[STEP_B2B] = [single.step(engine_us[STEP_B2B]) for _ in range(args.rounds)]

        timer_ns = floor_timer_ns()
        loop_us = floor_loop_us(env)

        # Sustained batch throughput, 1 client then 2.
        for _ in range(WARMUP_ROUNDS):
            second.batch(discard_us)
            second_shared.batch(discard_us)
        runs = [sustained([batched], args.sustained_calls),
                sustained([batched, second], args.sustained_calls),
                sustained([shared], args.sustained_calls),
                sustained([shared, second_shared], args.sustained_calls)]
        for run, sandbox in zip(runs, ("a sandbox each", "a sandbox each", "shared", "shared")):
            run["sandbox"] = sandbox
        missed = max(runs[0]["rate"], runs[1]["rate"]) < TARGETS["batch_steps_per_s"]
        profiled = None
        if args.profile == "always" or (args.profile == "auto" and missed):
            if shutil.which("perf"):
                profiled = profile(server, workdir, batched, args.profile_seconds)
            else:
                log("perf is missing: no profile")

        # How long parsing one batch answer takes in this client (its share of a call).
        _, answer = clients[1].call("POST", "/v1/episodes/step", batched.batch_body)
        batched.steps += 1
        raw = json.dumps(answer).encode()
        parse_start = time.perf_counter_ns()
        for _ in range(200):
            json.loads(raw)
        parse_us = (time.perf_counter_ns() - parse_start) / 1e3 / 200

        reconnects = sum(c.reconnects for c in clients)
        for episodes in episode_sets:
            episodes.delete()
        if server.metrics().get("sandboxd_sandboxes_alive", 0) != 0:
            # Closing is asynchronous at most briefly: wait, then tell.
            deadline = time.monotonic() + 10
            while server.metrics().get("sandboxd_sandboxes_alive", 0) != 0:
                if time.monotonic() > deadline:
                    log("sandboxes still alive 10 s after the episodes were deleted")
                    break
                time.sleep(0.05)
    except BenchError as exc:
        log(f"error: {exc}")
        if server is not None:
            log(f"server log tail:\n{server.log_tail()}")
        return 1
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for episodes in episode_sets:
            if episodes.ids:
                try:
                    episodes.delete()
                except Exception as exc:  # the server's stop closes them anyway
                    log(f"cleanup: {exc}")
        for client in clients:
            client.close()
        if server is not None:
            try:
                server.stop()
            except Exception as exc:
                log(f"cleanup: server: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)

    text = report(args, command, started_at, loadavg_start, busy_before, samples, engine_us,
                  open_ms, timer_ns, loop_us, runs, parse_us, reconnects, profiled)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as out:
            out.write(text)
        log(f"wrote {args.out}")
    return 0


def machine_busy_pct(seconds):
    """How busy all CPUs are over the next seconds (/proc/stat), in %."""
    busy0, total0 = cpu_ticks()
    time.sleep(seconds)
    busy1, total1 = cpu_ticks()
    return 100 * (busy1 - busy0) / max(1, total1 - total0)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def report(args, command, started_at, loadavg_start, busy_before, samples, engine_us, open_ms,
           timer_ns, loop_us, runs, parse_us, reconnects, profiled):
    bare = median(samples[BARE])
    floor = median(samples[FLOOR])
    step = median(samples[STEP])
    batch = median(samples[BATCHED])
    lines = [
        "# RL episodes over HTTP against bare exec and in-process steps",
        "",
        f"{started_at:%Y-%m-%d %H:%M} UTC, {machine()}. Load average (1, 5, 15 min) at the "
        f"start: {loadavg_start}, at the end: {loadavg()} (the benchmark's own load included); "
        f"CPUs busy during the second before the start: {busy_before:.0f} %.",
        "",
        f"Command: `{command}` (rounds {args.rounds}, batch rounds {args.batch_rounds}, "
        f"sustained calls {args.sustained_calls} per client; {WARMUP_ROUNDS} warm-up rounds "
        "discarded). Server: `sandboxd serve` on loopback, tier max_episodes "
        f"{MAX_EPISODES}, max_concurrency {MAX_CONCURRENCY}, server max_sessions {MAX_SESSIONS}, "
        f"max_sandboxes {MAX_SANDBOXES}; default episode limits (one sandbox each). "
        "Environment: a class whose reset returns (0, {}) and whose step returns "
        "(t, 1.0, False, False, {}) after t += 1; every action is 0.",
        "",
        "## Latency",
        "",
        "Interleaved round-robin (bare exec, in-process step, HTTP step, HTTP batch step, in "
        "that order each round), then the single HTTP step back to back. Client wall time per "
        "call, from sending the request to the parsed JSON answer, on a kept-alive connection "
        "(http.client). `engine` = median of the answers' `timing.total_us` (the time inside "
        "the engine's session worker; for a batch, the wave's longest step).",
        "",
        "| variant | median ms | p95 ms | / bare exec | / in-process step | env steps/s at "
        "median | engine median ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    steps_per_call = {BARE: None, FLOOR: 1, STEP: 1, BATCHED: BATCH, BATCHED_SHARED: BATCH,
                      STEP_B2B: 1}
    for name in (BARE, FLOOR, STEP, BATCHED, BATCHED_SHARED, STEP_B2B):
        values = samples[name]
        m = median(values)
        per_call = steps_per_call[name]
        rate = f"{per_call / m * 1000:.0f}" if per_call else "-"
        engine = median(engine_us.get(name, []))
        lines.append(f"| {name} | {m:.4f} | {percentile(values, 95):.4f} | {m / bare:.4f} | "
                     f"{m / floor:.0f} | {rate} | "
                     f"{fmt(engine / 1000 if engine is not None else None)} |")
    lines += [
        "",
        f"The in-process row times one `env.step(0)` call alone, so it includes the timer's own "
        f"cost (perf_counter_ns back to back: median {timer_ns:.0f} ns); the mean of a tight "
        f"loop of {FLOOR_LOOP_STEPS} steps is {loop_us * 1000:.0f} ns a step. "
        "Opening (setup, one sample each): "
        + ", ".join(f"{name} {ms:.1f} ms" for name, ms in open_ms.items()) + ".",
        "",
        "## Sustained batch throughput",
        "",
        f"Batch calls of {BATCH} steps back to back, {args.sustained_calls} per client; with 2 "
        f"clients, two threads of this process at once, each with its own connection and its "
        f"own {BATCH} episodes (the server runs their waves side by side: max_concurrency "
        f"{MAX_CONCURRENCY}). Env steps/s = all steps / wall time. Machine CPU = non-idle time "
        f"of all {os.cpu_count()} CPUs over the run (/proc/stat), this client included; client "
        "CPU = this process's user + system time.",
        "",
        "| sandboxes | clients | calls | env steps | wall s | env steps/s | call p50 ms | "
        "call p95 ms | "
        "engine wave median ms | machine busy % | machine CPU us / env step | client CPU us / "
        "call | client share of CPUs % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r['sandbox']} | {r['clients']} | {r['calls']} | {r['steps']} | "
            f"{r['wall_s']:.2f} | "
            f"{r['rate']:.0f} | {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | "
            f"{r['engine_wave_us'] / 1000:.3f} | {r['busy_pct']:.0f} | "
            f"{r['cpu_us_per_step']:.0f} | {r['client_cpu_us_per_call']:.0f} | "
            f"{r['client_cpu_pct']:.0f} |")
    lines += [
        "",
        f"Parsing one batch answer ({BATCH} results) with json.loads takes {parse_us:.0f} us "
        "in this client (part of each call's time and of the client CPU).",
    ]

    ratio = step / bare
    batch_rate = BATCH / batch * 1000

    def verdict(ok):
        return "met" if ok else "**missed**"

    lines += [
        "",
        "## Targets",
        "",
        "| target | measured | verdict |",
        "| --- | --- | --- |",
        f"| single HTTP step p50 <= {TARGETS['step_vs_bare']} x bare exec p50 | "
        f"{step:.3f} ms / {bare:.3f} ms = {ratio:.4f} | "
        f"{verdict(ratio <= TARGETS['step_vs_bare'])} |",
        f"| batched env steps/s >= {TARGETS['batch_steps_per_s']}, a sandbox each (sustained, "
        f"best of 1 and 2 clients) | {max(runs[0]['rate'], runs[1]['rate']):.0f}/s (1 client "
        f"{runs[0]['rate']:.0f}/s, 2 clients {runs[1]['rate']:.0f}/s; interleaved p50: "
        f"{batch_rate:.0f}/s) | "
        f"{verdict(max(runs[0]['rate'], runs[1]['rate']) >= TARGETS['batch_steps_per_s'])} |",
        f"| batched env steps/s >= {TARGETS['batch_steps_per_s']}, a shared sandbox (sustained, "
        f"best of 1 and 2 clients) | {max(runs[2]['rate'], runs[3]['rate']):.0f}/s (1 client "
        f"{runs[2]['rate']:.0f}/s, 2 clients {runs[3]['rate']:.0f}/s; interleaved p50: "
        f"{BATCH / median(samples[BATCHED_SHARED]) * 1000:.0f}/s) | "
        f"{verdict(max(runs[2]['rate'], runs[3]['rate']) >= TARGETS['batch_steps_per_s'])} |",
        f"| (no target) single HTTP step p50 / in-process step | {step:.3f} ms / "
        f"{floor * 1000:.2f} us = {step / floor:.0f} x (vs the loop mean "
        f"{loop_us * 1000:.0f} ns: {step * 1000 / loop_us:.0f} x) | - |",
    ]
    step_b2b = median(samples[STEP_B2B])
    lines += [
        "",
        "## Where the time goes",
        "",
        f"- Single step: of the client's {step:.3f} ms (interleaved; {step_b2b:.3f} ms back to "
        f"back), the engine's session worker accounts for {median(engine_us[STEP]) / 1000:.3f} ms "
        f"({median(engine_us[STEP_B2B]) / 1000:.3f} ms back to back): that includes sending the "
        "step to the sandboxed interpreter, its answer, and the cgroup counters read before and "
        "after (the answer's `evidence`). The rest is HTTP, the API process, its request to the "
        "engine and the engine's to the session worker, and back.",
        f"- Batch: one call of {BATCH} steps takes {batch:.3f} ms (interleaved median), its wave's "
        f"slowest step {median(engine_us[BATCHED]) / 1000:.3f} ms in its session worker. The "
        f"sustained runs keep the machine {runs[0]['busy_pct']:.0f} % / {runs[1]['busy_pct']:.0f} "
        f"% busy (1 / 2 clients) at {runs[0]['cpu_us_per_step']:.0f} / "
        f"{runs[1]['cpu_us_per_step']:.0f} us of CPU per env step: with {os.cpu_count()} CPUs "
        f"that allows at most about {os.cpu_count() * 1e6 / runs[1]['cpu_us_per_step']:.0f} "
        "env steps/s, whatever the number of clients (the client itself takes "
        f"{runs[1]['client_cpu_pct']:.0f} % of the CPUs).",
    ]
    if profiled:
        lines += [
            "",
            f"`perf record -a -g -F 999` for {profiled['seconds']:g} s while one client made "
            f"batch calls back to back ({profiled['calls']} calls, {profiled['steps']} env "
            f"steps, {profiled['rate']:.0f} env steps/s under perf). The machine's time by role "
            "(per thread, classified by process; CPU us / env step = share x the record's "
            "CPU time / env steps):",
            "",
            "| role | share of all CPUs' time % | CPU us / env step |",
            "| --- | ---: | ---: |",
        ]
        for pct, role, per_step in profiled["roles"]:
            lines.append(f"| {role} | {pct:.1f} | {per_step:.0f} |")
        if profiled["others"]:
            lines += ["", f"Other, by command (largest first): {profiled['others']}."]
        lines += [
            "",
            "The sandboxd processes (engine and session workers), by symbol with callees "
            "included (shares of their own samples, overlapping; >= 3 %):",
            "",
            "```",
            profiled["sandboxd"],
            "```",
            "",
            "The sandboxed python3 processes, by object and symbol (shares of their own "
            "samples; >= 1 %):",
            "",
            "```",
            profiled["python"],
            "```",
        ]
    if reconnects:
        lines += ["", f"Note: the HTTP clients had to reconnect {reconnects} times (untimed)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
