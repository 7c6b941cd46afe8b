#!/usr/bin/python3
"""sandboxd against its peers, side by side in one run: latency, throughput and memory.

1. Latency of `python3 -c 'print(2+2)'` and of `/bin/sh -c 'exec /bin/true'`, each run by:
     bare           the program itself
     sandboxd run   the CLI, a cold sandbox per run
     http cold      POST /v1/executions to a `sandboxd serve` with the Python pool off
     http warm      POST /v1/executions to a `sandboxd serve` with the Python pool on (only Python
                    has a pool: the sh request takes the cold path there too)
     bwrap          bwrap --unshare-all (the flags of bench/exec_latency.py)
     firejail       firejail --quiet --noprofile --net=none
     crun           crun run of a minimal OCI bundle (in a private mount namespace without the
                    controller-less cgroup2 mount: crun 1.8 refuses this machine's hybrid layout)
     runsc          runsc --platform=ptrace --network=none run of the same bundle
   Variants run interleaved round-robin, a few warm-up rounds discarded. HTTP samples are the
   client's wall time of one request on a kept-alive connection (http.client), response parsed
   and checked; before every sample (of any variant) the benchmark waits, untimed, until the warm
   server's pool is full again, so that each warm request finds an idle entry and no refill runs
   in the background of another variant's sample.
2. Throughput of Python print(2+2) over HTTP (wrk, a Lua script that posts the body and checks
   every answer) at several concurrencies, against bare `python3 -c` at the same concurrency
   (threads that posix_spawn, read the output and wait, in a loop) for the same time.
3. Memory: VmRSS of the daemon (engine + sandboxd-api) idle and under load, and of a pooled
   sandbox (loader python3 + the sandbox's init) against the interpreter's own.

Everything it starts (servers, containers, bundles, cgroups, firejail's mounts, temp dirs) is
removed on exit, including on failure and on Ctrl-C / SIGTERM.

Called by bench/peers.sh; see there for the knobs.
"""

import argparse
import datetime
import fcntl
import http.client
import json
import os
import platform
import re
import select
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_latency import BWRAP, SH_TRUE, machine, percentile, version_of  # noqa: E402

PYTHON = "/usr/bin/python3"
PY_CODE = "print(2+2)"
SH_CODE = "exec /bin/true"
PROGRAMS = {
    # program: (argv run bare / inside each peer, expected stdout, sandboxd language, code)
    "python": ([PYTHON, "-c", PY_CODE], b"4\n", "python", PY_CODE),
    "sh": (SH_TRUE, b"", "sh", SH_CODE),
}
WARMUP_ROUNDS = 3
FIREJAIL = ["firejail", "--quiet", "--noprofile", "--net=none"]
RUN_DIR_FIREJAIL = "/run/firejail"
CGROUP_ROOT = "/sys/fs/cgroup"
MIB = 1024 * 1024
TARGETS = {"warm_vs_bare": 0.2, "throughput_c8": 0.9, "idle_rss_mib": 20, "pooled_rss": 1.2}

WRK_SCRIPT = r"""
-- POSTs print(2+2) and classifies every answer; done() prints one line of JSON for peers.py.
wrk.method = "POST"
wrk.body = '{"language":"python","code":"print(2+2)"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("SBX_BENCH_TOKEN")

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  ok, pooled, bad, too_many, other = 0, 0, 0, 0, 0
end

function response(status, headers, body)
  if status == 200 then
    if body:find('"status":"ok"', 1, true) and body:find('"stdout":"4\\n"', 1, true) then
      ok = ok + 1
      if body:find('"pooled":true', 1, true) then pooled = pooled + 1 end
    else
      bad = bad + 1
    end
  elseif status == 429 then
    too_many = too_many + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local t = {ok = 0, pooled = 0, bad = 0, too_many = 0, other = 0}
  for _, thread in ipairs(threads) do
    for name, _ in pairs(t) do t[name] = t[name] + thread:get(name) end
  end
  local e = summary.errors
  io.write(string.format(
    'WRKRESULT {"ok":%d,"pooled":%d,"bad":%d,"too_many":%d,"other":%d,"requests":%d,' ..
    '"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"p50_us":%d,"p95_us":%d,"p99_us":%d}\n',
    t.ok, t.pooled, t.bad, t.too_many, t.other, summary.requests, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


class BenchError(Exception):
    pass


def log(message):
    print(f"peers: {message}", file=sys.stderr, flush=True)


# ---- cleanup ----------------------------------------------------------------------------------


class Cleanup:
    """Undo actions, run last-in first-out exactly once, each protected from the others."""

    def __init__(self):
        self.actions = []

    def push(self, description, function, *args):
        self.actions.append((description, function, args))

    def run(self):
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while self.actions:
            description, function, args = self.actions.pop()
            try:
                function(*args)
            except Exception as exc:  # keep undoing the rest
                log(f"cleanup: {description}: {exc}")


def terminate(proc, grace):
    """SIGTERM proc (our child, by pid), then SIGKILL its process group after grace seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        log(f"pid {proc.pid} ignored SIGTERM for {grace} s; SIGKILL to its group")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def mountpoints_under(prefix):
    """Mount points at or under prefix, deepest (latest mounted) last, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


class FirejailMounts:
    """firejail bind-mounts a few of its own directories under /run/firejail and leaves them (and
    the directory) behind. Remembers what existed first and removes only what it added."""

    def __init__(self):
        self.existed = os.path.lexists(RUN_DIR_FIREJAIL)
        self.before = set(mountpoints_under(RUN_DIR_FIREJAIL))

    def undo(self):
        for point in reversed(mountpoints_under(RUN_DIR_FIREJAIL)):
            if point not in self.before:
                subprocess.run(["umount", point], check=True)
        if not self.existed and os.path.isdir(RUN_DIR_FIREJAIL):
            if mountpoints_under(RUN_DIR_FIREJAIL):
                raise BenchError(f"mounts remain under {RUN_DIR_FIREJAIL}; not removing it")
            shutil.rmtree(RUN_DIR_FIREJAIL)


def remove_cgroup_tree(name):
    """rmdir /sys/fs/cgroup/*/name and its subdirectories (crun and runsc remove a container's
    own cgroup, not the parent cgroupsPath implies)."""
    for hierarchy in sorted(os.listdir(CGROUP_ROOT)):
        top = os.path.join(CGROUP_ROOT, hierarchy, name)
        if not os.path.isdir(top):
            continue
        for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
            os.rmdir(dirpath)


# ---- statistics and small helpers -------------------------------------------------------------


def median(values):
    return statistics.median(values) if values else None


def fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid, field):
    """An integer field of /proc/PID/status in kB (VmRSS) or plain (PPid); None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def proc_pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def children_map():
    """ppid -> [pid] for every process now."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = proc_status(entry, "PPid")
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid, children):
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def run_checked(argv, expected, what):
    """Wall ms of one subprocess.run, output drained and checked (as bench/exec_latency.py)."""
    start = time.perf_counter_ns()
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if proc.returncode != 0 or proc.stdout != expected:
        raise BenchError(f"{what}: {shlex.join(argv)} failed: exit {proc.returncode}, stdout "
                         f"{proc.stdout[:200]!r}, stderr {proc.stderr[-600:]!r}")
    return elapsed


# ---- sandboxd servers -------------------------------------------------------------------------


class Server:
    """One `sandboxd serve` with its own config, port and data dir, in its own session."""

    def __init__(self, sandboxd, workdir, name, token_sha256, pool_min_idle, max_sandboxes,
                 max_concurrency, pool_languages=("python",), session_pools=(),
                 server_settings=(), tier_settings=(), extra_config=""):
        """server_settings and tier_settings: more (key, value) pairs for the [server] and
        [tier.bench] sections (max_sessions, max_episodes, ...); none by default. extra_config:
        sections appended as they are ([store] for bench/fleet.py)."""
        self.name = name
        # What wait_quiet waits for: every pool full (a session pool keeps one).
        self.pool_min_idle = pool_min_idle * len(pool_languages) + len(session_pools)
        self.port = free_port()
        self.dir = os.path.join(workdir, name)
        os.makedirs(os.path.join(self.dir, "data"))
        self.config_path = os.path.join(self.dir, "sandboxd.ini")
        self.config = "\n".join([
            "[server]",
            f"listen = 127.0.0.1:{self.port}",
            f"data_dir = {self.dir}/data",
            f"max_sandboxes = {max_sandboxes}",
        ] + [f"{key} = {value}" for key, value in server_settings] + [
            "",
            "[tier.bench]",
            f"max_concurrency = {max_concurrency}",
            "cpu_budget_ms = 31536000000",
            "cpu_window_s = 60",
        ] + [f"{key} = {value}" for key, value in tier_settings] + [
            "",
            "[tenant.bench]",
            "tier = bench",
            f"token_sha256 = {token_sha256}",
            "",
        ] + [line for language in pool_languages for line in (
            f"[pool.{language}]",
            f"min_idle = {pool_min_idle}",
            "max_idle = 4" if pool_min_idle else "max_idle = 0",
            "max_idle_s = 300",
            "",
        )] + [line for language in session_pools for line in (
            f"[session_pool.{language}]",
            "min_idle = 1",
            "max_idle = 1",
            "",
        )]) + "\n" + extra_config
        with open(self.config_path, "w") as f:
            f.write(self.config)
        self.log_path = os.path.join(self.dir, "serve.log")
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sandboxd, "serve", "--config", self.config_path],
                                     stdin=subprocess.DEVNULL, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.metrics_conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self):
        try:
            terminate(self.proc, 30)
        finally:
            self.log_file.close()
            self.metrics_conn.close()

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def get(self, path):
        for attempt in range(2):
            try:
                self.metrics_conn.request("GET", path)
                response = self.metrics_conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                self.metrics_conn.close()
                if attempt:
                    raise

    def metrics(self):
        status, body = self.get("/metrics")
        if status != 200:
            raise BenchError(f"{self.name}: GET /metrics {status}")
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name}: sandboxd serve exited {self.proc.returncode}:\n"
                                 f"{self.log_tail()}")
            try:
                status, _ = self.get("/health")
                if status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: not healthy after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)
        self.wait_quiet(timeout)

    def wait_quiet(self, timeout=60):
        """Until no execution runs and the pool (if on) is full: the state every sample starts
        from."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = m.get('sandboxd_pool_entries{state="idle"}', 0)
            busy = (m.get('sandboxd_pool_entries{state="in_use"}', 0)
                    + m.get('sandboxd_pool_entries{state="starting"}', 0))
            alive = m.get("sandboxd_sandboxes_alive", 0)
            if busy == 0 and idle >= self.pool_min_idle and alive <= idle:
                return m
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: not quiet after {timeout} s: {m}")
            time.sleep(0.002)

    def pids(self):
        """(engine pid, API pid)."""
        children = children_map()
        for pid in children.get(self.proc.pid, []):
            cmd = proc_cmdline(pid)
            if cmd and os.path.basename(cmd[0].decode()) == "sandboxd-api":
                return self.proc.pid, pid
        raise BenchError(f"{self.name}: no sandboxd-api child of {self.proc.pid}")

    def daemon_rss_kib(self):
        """(engine + API, engine, API) VmRSS in KiB."""
        engine, api = self.pids()
        values = [proc_status(engine, "VmRSS"), proc_status(api, "VmRSS")]
        if None in values:
            raise BenchError(f"{self.name}: cannot read the daemon's VmRSS")
        return (sum(values), *values)

    def pool_entries(self):
        """[(worker, init, loader)] pids of the pool's idle loaders: engine -> worker (outside the
        sandbox) -> init (pid 1 inside) -> loader. An entry forked from the template has the
        engine as its init's parent (CLONE_PARENT): its worker is then one of the engine's
        worker children (all alike). The template itself is not an entry (template())."""
        children = children_map()
        engine, api = self.pids()
        workers = [pid for pid in children.get(engine, [])
                   if pid != api and proc_cmdline(pid)[:1] == proc_cmdline(engine)[:1]]
        entries = []
        for pid in descendants(self.proc.pid, children):
            cmd = proc_cmdline(pid)
            if len(cmd) > 2 and cmd[0] == PYTHON.encode() and cmd[1] == b"-c" \
                    and b"warm-pool loader" in cmd[2]:
                init = proc_status(pid, "PPid")
                if init == engine:
                    continue  # the template (its forks have its cmdline, and init as parent)
                worker = proc_status(init, "PPid") if init else None
                if worker == engine:
                    worker = workers[len(entries) % len(workers)] if workers else None
                entries.append((worker, init, pid))
        return entries

    def template(self):
        """The pid of the engine's python template (DESIGN: templates), or None."""
        for pid in children_map().get(self.pids()[0], []):
            cmd = proc_cmdline(pid)
            # Not an entry's init (a fork of it too, but the engine's child as well): root.
            if cmd[3:4] == [b"template"] and proc_status(pid, "Uid") == 0:
                return pid
        return None


class Client:
    """One kept-alive HTTP/1.1 connection; post() returns (client ms, result object)."""

    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.reconnects = -1  # the first connect is not a reconnect

    def post(self, language, code):
        body = json.dumps({"language": language, "code": code})
        if self.conn.sock is None:
            self.reconnects += 1
            self.conn.connect()  # outside the timed part, as a kept-alive connection would be
        start = time.perf_counter_ns()
        self.conn.request("POST", "/v1/executions", body, self.headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = (time.perf_counter_ns() - start) / 1e6
        if response.status != 200:
            raise BenchError(f"POST /v1/executions {language}: {response.status} {data[:300]!r}")
        return elapsed, json.loads(data)

    def empty_round_trip(self):
        """An HTTP request the API answers alone (GET of an unknown path: 404), in ms: the
        HTTP part of issue 18's shell target."""
        start = time.perf_counter_ns()
        self.conn.request("GET", "/nothing-here", headers=self.headers)
        response = self.conn.getresponse()
        response.read()
        elapsed = (time.perf_counter_ns() - start) / 1e6
        if response.status != 404:
            raise BenchError(f"GET /nothing-here: {response.status}")
        return elapsed

    def close(self):
        self.conn.close()


# ---- OCI bundles ------------------------------------------------------------------------------


def make_bundles(workdir, cgroup_parent, cleanup):
    """A read-only rootfs (empty dirs, /usr bind-mounted read-only at run time, the /bin /lib
    /lib64 /sbin links of a merged-/usr system) and one bundle per runtime and program, from
    `crun spec` with: no terminal, the program's argv, the rootfs, /usr and a /tmp tmpfs added,
    and a cgroupsPath under our own parent."""
    rootfs = os.path.join(workdir, "rootfs")
    for d in ("usr", "proc", "dev", "sys", "tmp", "etc"):
        os.makedirs(os.path.join(rootfs, d))
    for link in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{link}", os.path.join(rootfs, link))
    specdir = os.path.join(workdir, "spec")
    os.makedirs(specdir)
    subprocess.run(["crun", "--root", os.path.join(workdir, "crun-state"), "spec"], cwd=specdir,
                   check=True)
    with open(os.path.join(specdir, "config.json")) as f:
        spec = json.load(f)
    bundles = {}
    for runtime in ("crun", "runsc"):
        for program, (argv, _, _, _) in PROGRAMS.items():
            config = json.loads(json.dumps(spec))
            config["process"]["terminal"] = False
            config["process"]["args"] = argv
            config["root"] = {"path": rootfs, "readonly": True}
            config["mounts"].insert(0, {"destination": "/usr", "type": "bind", "source": "/usr",
                                        "options": ["rbind", "ro", "nosuid", "nodev"]})
            config["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                                     "options": ["nosuid", "nodev", "size=65536k"]})
            config["linux"]["cgroupsPath"] = f"/{cgroup_parent}/{runtime}-{program}"
            bundle = os.path.join(workdir, f"bundle-{runtime}-{program}")
            os.makedirs(bundle)
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(config, f, indent=1)
            bundles[(runtime, program)] = bundle
    return bundles


class CrunNamespace:
    """A process holding a private mount namespace in which /sys/fs/cgroup/unified is unmounted
    (crun 1.8.1 refuses the hybrid layout otherwise: MACHINE.md). crun runs there via nsenter."""

    def __init__(self):
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             "umount /sys/fs/cgroup/unified && echo ready && exec sleep infinity"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
        line = self.proc.stdout.readline()
        if line != b"ready\n":
            self.stop()
            raise BenchError("could not prepare crun's mount namespace")
        self.prefix = ["nsenter", f"--mount=/proc/{self.proc.pid}/ns/mnt", "--"]

    def stop(self):
        terminate(self.proc, 5)


def delete_containers(prefix, runtime_argv, what):
    """Force-delete every container a runtime still lists in our state dir."""
    proc = subprocess.run(prefix + runtime_argv + ["list", "--quiet"], capture_output=True,
                          text=True)
    for container in proc.stdout.split():
        log(f"cleanup: deleting {what} container {container}")
        subprocess.run(prefix + runtime_argv + ["delete", "--force", container],
                       capture_output=True)


# ---- latency ----------------------------------------------------------------------------------


def latency_variants(opts, ctx):
    """[(variant, program, sample function returning ms)] for the selected variants, and the
    dict the HTTP samples fill with each answer's `pooled` and `timing`."""
    container_ids = (f"peers-{os.getpid()}-{n}" for n in range(1 << 30))
    extras = {}  # (variant, program) -> {"pooled": count, "timing": [timing objects]}

    def command(make_argv):
        def variant(name, program):
            expected = PROGRAMS[program][1]
            return lambda: run_checked(make_argv(program), expected, name)
        return variant

    def http(client_key):
        def variant(name, program):
            _, expected, language, code = PROGRAMS[program]

            def sample():
                ms, result = ctx[client_key].post(language, code)
                if result.get("status") != "ok" or result.get("stdout") != expected.decode():
                    raise BenchError(f"{name} {program}: unexpected result {result}")
                extra = extras.setdefault((name, program),
                                          {"pooled": 0, "timing": [], "empty_rtt": []})
                extra["pooled"] += bool(result.get("pooled"))
                extra["timing"].append(result.get("timing", {}))
                # Right after each warm execution, untimed for it: an empty request's round
                # trip on the same connection (issue 18's shell target adds it to bare's).
                if client_key == "warm_client":
                    extra["empty_rtt"].append(ctx[client_key].empty_round_trip())
                return ms
            return sample
        return variant

    builders = {
        "bare": command(lambda program: PROGRAMS[program][0]),
        "sandboxd run (cold)": command(lambda program: [
            opts.sandboxd, "run", "--lang", PROGRAMS[program][2], "-c", PROGRAMS[program][3]]),
        "http cold (pool off)": http("cold_client"),
        "http warm (pool on)": http("warm_client"),
        "bwrap": command(lambda program: BWRAP + PROGRAMS[program][0]),
        "firejail": command(lambda program: FIREJAIL + PROGRAMS[program][0]),
        # A fresh container id per run: `run` deletes the container when it exits.
        "crun": command(lambda program: ctx["crun_ns"].prefix + [
            "crun", "--root", ctx["crun_state"], "run",
            "--bundle", ctx["bundles"][("crun", program)], next(container_ids)]),
        "runsc": command(lambda program: [
            "runsc", "--root", ctx["runsc_state"], "--platform=ptrace", "--network=none", "run",
            "--bundle", ctx["bundles"][("runsc", program)], next(container_ids)]),
    }
    runs = [(name, program, builders[name](name, program))
            for name in opts.variants for program in PROGRAMS]
    return runs, extras


def latency_phase(opts, ctx):
    """Round-robin over every (variant, program), the order rotated each round so that no
    variant always runs right after another; returns the samples and the HTTP extras."""
    runs, extras = latency_variants(opts, ctx)
    samples = {(name, program): [] for name, program, _ in runs}
    log(f"latency: {len(runs)} variants x {opts.iterations} iterations "
        f"(+{WARMUP_ROUNDS} warm-up rounds)")
    for round_number in range(WARMUP_ROUNDS + opts.iterations):
        if round_number == WARMUP_ROUNDS:
            extras.clear()
        shift = round_number % len(runs)
        for name, program, sample in runs[shift:] + runs[:shift]:
            ctx["warm"].wait_quiet()
            ctx["cold"].wait_quiet()
            ms = sample()
            if round_number >= WARMUP_ROUNDS:
                samples[(name, program)].append(ms)
    return samples, extras


# ---- throughput -------------------------------------------------------------------------------


def busy_cpu_ms():
    """Machine-wide non-idle CPU time so far, in ms, from /proc/stat (all CPUs together)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) * 1000 / os.sysconf("SC_CLK_TCK")


def bare_throughput(concurrency, seconds):
    """Executions of `python3 -c 'print(2+2)'` completed by `concurrency` threads in `seconds`.
    Each thread: posix_spawn (vfork-like in glibc), read the pipe to EOF, waitpid; the GIL is
    released while it waits."""
    argv = PROGRAMS["python"][0]
    deadline = time.monotonic() + seconds
    counts = [0] * concurrency
    errors = [0] * concurrency
    latencies = [[] for _ in range(concurrency)]

    def worker(index):
        while time.monotonic() < deadline:
            start = time.perf_counter_ns()
            read_end, write_end = os.pipe()
            try:
                pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[
                    (os.POSIX_SPAWN_DUP2, write_end, 1),
                    (os.POSIX_SPAWN_CLOSE, read_end),
                ])
            finally:
                os.close(write_end)
            output = b""
            while chunk := os.read(read_end, 4096):
                output += chunk
            os.close(read_end)
            _, status = os.waitpid(pid, 0)
            if status == 0 and output == b"4\n":
                counts[index] += 1
                latencies[index].append((time.perf_counter_ns() - start) / 1e6)
            else:
                errors[index] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    flat = [x for per in latencies for x in per]
    return {"ok": sum(counts), "errors": sum(errors), "seconds": elapsed,
            "rate": sum(counts) / elapsed, "p50_ms": median(flat),
            "p95_ms": percentile(flat, 0.95) if flat else None}


class RssSampler:
    """Samples the daemon's RSS every 100 ms in a thread while a load runs."""

    def __init__(self, server):
        self.server, self.values, self.stop_flag = server, [], threading.Event()
        self.engine, self.api = server.pids()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop_flag.wait(0.1):
            a, b = proc_status(self.engine, "VmRSS"), proc_status(self.api, "VmRSS")
            if a is not None and b is not None:
                self.values.append((a + b, a, b))

    def stop(self):
        self.stop_flag.set()
        self.thread.join()
        return self.values


def wrk_throughput(opts, ctx, server, concurrency, seconds, perf_argv=None):
    threads = min(concurrency, os.cpu_count() or 1)
    argv = ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", f"{seconds}s",
            "--timeout", "30s", "-s", ctx["wrk_script"],
            f"http://127.0.0.1:{server.port}/v1/executions"]
    env = dict(os.environ, SBX_BENCH_TOKEN=ctx["token"])
    server.wait_quiet()
    before = server.metrics()
    sampler = RssSampler(server)
    perf = None
    if perf_argv:
        perf = subprocess.Popen(perf_argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        ctx["cleanup"].push("perf", terminate, perf, 10)
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=seconds + 120)
    finally:
        rss = sampler.stop()
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
    match = re.search(r"^WRKRESULT (\{.*\})$", proc.stdout, re.M)
    if proc.returncode != 0 or not match:
        raise BenchError(f"wrk failed: {proc.returncode} {proc.stdout[-800:]} {proc.stderr[-800:]}")
    result = json.loads(match.group(1))
    server.wait_quiet(120)  # also lets the requests wrk abandoned at the end finish
    after = server.metrics()
    result["seconds"] = result["duration_us"] / 1e6
    result["rate"] = result["ok"] / result["seconds"]
    result["errors"] = (result["bad"] + result["other"] + result["connect"] + result["read"]
                        + result["write"] + result["timeout"])
    result["rss_max"] = max(rss) if rss else None  # (total, engine, API) at the peak total
    result["hits"] = (after.get("sandboxd_pool_hits_total", 0)
                      - before.get("sandboxd_pool_hits_total", 0))
    result["misses"] = (after.get("sandboxd_pool_misses_total", 0)
                        - before.get("sandboxd_pool_misses_total", 0))
    result["rejections"] = sum(v - before.get(k, 0) for k, v in after.items()
                               if k.startswith("sandboxd_quota_rejections_total"))
    return result


def throughput_phase(opts, ctx):
    results = {}
    for concurrency in opts.concurrency:
        for target in opts.throughput_targets:
            log(f"throughput: {target} at concurrency {concurrency} for {opts.seconds} s")
            busy_before = busy_cpu_ms()
            if target == "bare":
                r = bare_throughput(concurrency, opts.seconds)
            else:
                server = ctx["warm"] if target == "http warm" else ctx["cold"]
                r = wrk_throughput(opts, ctx, server, concurrency, opts.seconds)
            # Includes the load generator and whatever else runs on the machine; for HTTP also
            # the tail of requests wrk abandoned at the end (wrk_throughput waits for them).
            r["cpu_ms_per_exec"] = (busy_cpu_ms() - busy_before) / max(r["ok"], 1)
            results[(target, concurrency)] = r
            log(f"  {r['rate']:.1f}/s, errors {r['errors']}")
    return results


# ---- memory -----------------------------------------------------------------------------------


def interpreter_rss():
    """VmRSS and Pss (KiB) of a bare `python3 -c 'import time; time.sleep(5)'` once asleep."""
    rss, pss = [], []
    for _ in range(3):
        proc = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(5)"])
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:  # asleep = start-up done
                try:
                    with open(f"/proc/{proc.pid}/wchan") as f:
                        if "nanosleep" in f.read():
                            break
                except OSError:
                    pass
                time.sleep(0.01)
            time.sleep(0.1)
            rss.append(proc_status(proc.pid, "VmRSS"))
            pss.append(proc_pss_kib(proc.pid))
        finally:
            proc.kill()
            proc.wait()
    return round(median(rss)), round(median(pss))


def children_cpu_ms(argv, runs):
    """Median CPU time (user + system, ms) of `runs` sequential runs of argv, from the rusage
    of each waited-for child."""
    import resource
    values = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        values.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
                      * 1000)
    return median(values)


def loader_startup_cost(repo):
    """CPU of `python3 -c 'print(2+2)'` against a python3 that only runs the top-level imports
    of guest/python_loader.py (the part of a pool entry's start-up beyond the interpreter's)."""
    path = os.path.join(repo, "guest", "python_loader.py")
    try:
        with open(path) as f:
            imports = [line.split("#")[0].strip() for line in f
                       if line.startswith(("import ", "from "))]
    except OSError:
        return None
    code = "; ".join(imports)
    return {"imports": code,
            "bare_ms": children_cpu_ms([PYTHON, "-c", PY_CODE], 20),
            "loader_imports_ms": children_cpu_ms([PYTHON, "-c", code], 20)}


def pooled_sandbox_rss(server):
    server.wait_quiet()
    entries = server.pool_entries()
    if not entries:
        raise BenchError(f"{server.name}: no pool entries found")
    rows = {"loader": [], "init": [], "worker": [], "loader_pss": [], "init_pss": []}
    for worker, init, loader in entries:
        rows["loader"].append(proc_status(loader, "VmRSS"))
        rows["init"].append(proc_status(init, "VmRSS"))
        rows["worker"].append(proc_status(worker, "VmRSS"))
        rows["loader_pss"].append(proc_pss_kib(loader))
        rows["init_pss"].append(proc_pss_kib(init))
    out = {k: round(median([x for x in v if x is not None])) for k, v in rows.items()}
    out["entries"] = len(entries)
    template = server.template()
    out["template"] = proc_status(template, "VmRSS") if template else None
    out["template_pss"] = proc_pss_kib(template) if template else None
    return out


# ---- profile ----------------------------------------------------------------------------------


def profile_phase(opts, ctx):
    """perf record during a warm load at concurrency 8: machine-wide by command, and the warm
    server's process tree (inherited) with call graphs. Returns report excerpts."""
    seconds = min(opts.seconds, 10)
    machine_data = os.path.join(ctx["workdir"], "perf-machine.data")
    tree_data = os.path.join(ctx["workdir"], "perf-tree.data")
    engine, api = ctx["warm"].pids()
    log(f"profile: perf record during {seconds} s of warm load at concurrency 8")
    tree = subprocess.Popen(["perf", "record", "-g", "-F", "999", "-p", f"{engine},{api}",
                             "-o", tree_data], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    ctx["cleanup"].push("perf (tree)", terminate, tree, 10)
    try:
        wrk_throughput(opts, ctx, ctx["warm"], 8, seconds,
                       perf_argv=["perf", "record", "-a", "-F", "499", "-o", machine_data])
    finally:
        tree.send_signal(signal.SIGINT)
        tree.wait(60)

    def report(data, *args):
        proc = subprocess.run(["perf", "report", "-i", data, "--stdio", "-g", "none", *args],
                              capture_output=True, text=True)
        lines = [line.rstrip() for line in proc.stdout.splitlines()
                 if line.strip() and not line.startswith("#")]
        # With callees included, the syscall entry frames (and perf's unknown frame) sum every
        # syscall and exceed 100 %: they say nothing, so they go.
        lines = [line for line in lines if not re.search(
            r"\] (do_syscall_64|entry_SYSCALL_64_after_hwframe|0000000000000000)$", line)]
        return "\n".join(lines[:30])

    return {
        "seconds": seconds,
        "machine_by_command": report(machine_data, "--no-children", "--sort", "comm",
                                     "--percent-limit", "0.5"),
        "tree_by_command_dso": report(tree_data, "--no-children", "--sort", "comm,dso",
                                      "--percent-limit", "0.3"),
        "tree_sandboxd_children": report(tree_data, "--children", "--comm", "sandboxd",
                                         "--percentage", "relative", "--sort", "sym",
                                         "--percent-limit", "3"),
        "tree_python_symbols": report(tree_data, "--no-children", "--comm", "python3",
                                      "--sort", "dso,sym", "--percent-limit", "0.7"),
    }


# ---- report -----------------------------------------------------------------------------------


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def versions(opts, ctx):
    crun_root = ["crun", "--root", ctx["crun_state"]]
    return {
        "sandboxd": version_of([opts.sandboxd, "version"]),
        "python3": version_of([PYTHON, "--version"]),
        "bwrap": version_of(["bwrap", "--version"]),
        "firejail": version_of(["firejail", "--version"]),
        "crun": version_of(crun_root + ["--version"]),
        "runsc": " ".join(subprocess.run(["runsc", "--version"], capture_output=True,
                                         text=True).stdout.split()[:3]),
        "wrk": version_of(["wrk", "--version"]).split(" Copyright")[0],
    }


def write_report(opts, ctx, latency, extras, throughput, memory, profile, started_at):
    samples = latency
    stats = {k: (median(v), percentile(v, 0.95)) for k, v in samples.items() if v}
    bare = {p: stats.get(("bare", p), (None, None))[0] for p in PROGRAMS}
    lines = [
        "# sandboxd against its peers: latency, throughput, memory",
        "",
        f"- Command: `{opts.command_line}`",
        f"- Date: {started_at}",
        f"- Machine: {machine()}; `nproc` = {os.cpu_count()}; kernel `{platform.release()}`",
        "- Versions: " + ", ".join(f"{k} `{v}`" for k, v in ctx["versions"].items()),
        f"- Load average (1, 5, 15 min) at the start: {ctx['loadavg_start']}; at the end: "
        f"{loadavg()} (this one includes the benchmark's own load at concurrency 32; the "
        "machine is shared, and anything else running shows up here and in the CPU per "
        "execution below).",
        "- Servers: two `sandboxd serve`, each with its own config (below), on 127.0.0.1; tier "
        f"`max_concurrency = {opts.max_concurrency}`, `max_sandboxes = {opts.max_sandboxes}` and "
        "a CPU budget of a year, so no request of this benchmark can be refused with 429 or "
        "\"engine busy\" (429s are counted anyway).",
        "",
        "```ini",
        "# warm server (pool on, the defaults of [pool.python])",
        ctx["warm"].config.strip().replace(ctx["warm"].dir, "$TMP/warm").replace(
            ctx["token_sha256"], "<sha256 of a fresh token>"),
        "```",
        "",
        "The cold server's config differs only in `[pool.python] min_idle = 0` (pool off).",
        "",
        "## 1. Latency",
        "",
        f"{opts.iterations} timed runs per variant (after {WARMUP_ROUNDS} warm-up rounds), "
        "interleaved round-robin. Subprocess variants: wall time of one `subprocess.run()` "
        "(fork, exec, wait, output drained and checked). HTTP variants: the client's wall time "
        "of one `POST /v1/executions` on a kept-alive `http.client` connection, answer read, "
        "parsed and checked. Before every sample the benchmark waits, untimed, until neither "
        "server runs anything and the warm pool is full again.",
        "",
        "| program | variant | median ms | p95 ms | median / bare | pooled |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for program in PROGRAMS:
        for variant in opts.variants:
            if (variant, program) not in stats:
                continue
            med, p95 = stats[(variant, program)]
            extra = extras.get((variant, program))
            pooled = f"{extra['pooled']}/{len(extra['timing'])}" if extra else "-"
            name = "python3 -c 'print(2+2)'" if program == "python" else \
                "/bin/sh -c 'exec /bin/true'"
            lines.append(f"| {name} | {variant} | {med:.2f} | {p95:.2f} | "
                         f"{fmt(ratio(med, bare[program]))} | {pooled} |")
    lines += [
        "",
        "Ratios to sandboxd's warm HTTP path (peer median / warm median; > 1: sandboxd is faster):",
        "",
        "| program | " + " | ".join(v for v in opts.variants if v != "http warm (pool on)") + " |",
        "| --- |" + " ---: |" * (len(opts.variants) - 1),
    ]
    for program in PROGRAMS:
        warm = stats.get(("http warm (pool on)", program), (None,))[0]
        cells = [fmt(ratio(stats.get((v, program), (None,))[0], warm))
                 for v in opts.variants if v != "http warm (pool on)"]
        lines.append(f"| {program} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Commands: bare `/usr/bin/python3 -c 'print(2+2)'` and `/bin/sh -c 'exec /bin/true'`; "
        "`sandboxd run -c 'print(2+2)'` / `sandboxd run --lang sh -c 'exec /bin/true'`; "
        f"bwrap `{shlex.join(BWRAP)} PROGRAM`; firejail `{shlex.join(FIREJAIL)} PROGRAM`; "
        "crun `nsenter --mount=/proc/HOLDER/ns/mnt -- crun --root $TMP/crun-state run --bundle "
        "B ID`, where HOLDER is `unshare --mount --propagation private` after `umount "
        "/sys/fs/cgroup/unified` in that namespace only (crun 1.8.1 refuses the hybrid layout; "
        "nsenter adds about a millisecond); runsc `runsc --root $TMP/runsc-state "
        "--platform=ptrace --network=none run --bundle B ID`. The OCI bundle is `crun spec` "
        "with `terminal: false`, the program's argv, a read-only root of empty directories and "
        "the merged-/usr links, `/usr` bind-mounted read-only, a `/tmp` tmpfs and a "
        "`cgroupsPath` under a parent of the benchmark's own (removed afterwards); namespaces "
        "as `crun spec` makes them (pid, network, ipc, uts, mount; no user namespace).",
        "",
    ]
    # Server-side timing of the HTTP variants.
    lines += [
        "sandboxd's own timing of the HTTP samples (medians, ms; `client` is the HTTP client's "
        "time, `client - total` is what lies outside the engine's execution: the client's own "
        "work (http.client, json), loopback TCP, the API process (HTTP, JSON, settings, audit) "
        "and the engine protocol hops):",
        "",
        "| program | variant | acquire | setup | run | teardown | total | client "
        "| client - total |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for program in PROGRAMS:
        for variant in ("http cold (pool off)", "http warm (pool on)"):
            extra = extras.get((variant, program))
            if not extra:
                continue
            cells = []
            for key in ("acquire_us", "setup_us", "run_us", "teardown_us", "total_us"):
                cells.append(fmt(median([t.get(key, 0) / 1000 for t in extra["timing"]])))
            client = stats[(variant, program)][0]
            total = median([t.get("total_us", 0) / 1000 for t in extra["timing"]])
            lines.append(f"| {program} | {variant} | " + " | ".join(cells)
                         + f" | {client:.2f} | {fmt(client - total)} |")

    # Throughput.
    if throughput:
        lines += [
            "",
            "## 2. Throughput",
            "",
            f"Python `print(2+2)` for {opts.seconds} s per row. HTTP: `wrk -t min(c,nproc) -c c "
            f"-d {opts.seconds}s --timeout 30s -s peers.lua` (the Lua script posts the body and "
            "counts an answer as done only when it is 200 with status ok and stdout \"4\\n\"); "
            "bare: c threads, each looping posix_spawn `python3 -c 'print(2+2)'`, read the "
            "output, waitpid. Rate = completed, checked executions / elapsed time. Errors = "
            "anything but a checked 200 or a 429 (wrong answers, other statuses, socket errors, "
            "timeouts).",
            "",
            "| c | target | exec/s | vs bare | p50 ms | p95 ms | errors | 429 | pooled | "
            "CPU ms / exec | daemon RSS max MiB |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for concurrency in opts.concurrency:
            bare_rate = throughput.get(("bare", concurrency), {}).get("rate")
            for target in opts.throughput_targets:
                r = throughput.get((target, concurrency))
                if not r:
                    continue
                if target == "bare":
                    lines.append(f"| {concurrency} | bare | {r['rate']:.1f} | 1.00 | "
                                 f"{fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | {r['errors']} | - "
                                 f"| - | {fmt(r['cpu_ms_per_exec'], 1)} | - |")
                else:
                    lines.append(
                        f"| {concurrency} | {target} | {r['rate']:.1f} | "
                        f"{fmt(ratio(r['rate'], bare_rate))} | {r['p50_us'] / 1000:.2f} | "
                        f"{r['p95_us'] / 1000:.2f} | {r['errors']} | {r['too_many']} | "
                        f"{r['pooled']}/{r['ok']} | {fmt(r['cpu_ms_per_exec'], 1)} | "
                        f"{fmt(r['rss_max'][0] / 1024 if r['rss_max'] else None, 1)} |")
        lines += [
            "",
            "`pooled` = answers with `pooled: true` / checked answers. `CPU ms / exec` = the "
            "machine's non-idle CPU time during the row (/proc/stat, both CPUs, load generator "
            "included) / checked executions: with the CPUs saturated, exec/s is about "
            f"{os.cpu_count()} x 1000 / this.",
        ]

    # Memory.
    interp_rss, interp_pss = memory["interpreter"]
    pool = memory["pool"]
    sandbox_rss = pool["loader"] + pool["init"]
    lines += [
        "",
        "## 3. Memory",
        "",
        "VmRSS from /proc/PID/status (Pss from smaps_rollup where shown). The daemon is the "
        "engine (`sandboxd serve`, root) plus the API process (`sandboxd-api`); its per-execution "
        "worker processes and the sandboxes are not the daemon.",
        "",
        "| what | KiB | MiB | engine / API MiB |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, (kib, engine_kib, api_kib) in memory["daemon"]:
        lines.append(f"| {label} | {kib} | {kib / 1024:.1f} | {engine_kib / 1024:.1f} / "
                     f"{api_kib / 1024:.1f} |")
    lines += [
        f"| interpreter alone: `python3 -c 'import time; time.sleep(5)'` (median of 3) | "
        f"{interp_rss} | {interp_rss / 1024:.1f} | |",
        f"| pooled sandbox: loader python3 (median of {pool['entries']} idle entries) | "
        f"{pool['loader']} | {pool['loader'] / 1024:.1f} | |",
        f"| pooled sandbox: its init (pid 1 inside) | {pool['init']} | "
        f"{pool['init'] / 1024:.1f} | |",
        f"| pooled sandbox: loader + init | {sandbox_rss} | {sandbox_rss / 1024:.1f} | |",
        f"| (outside the sandbox: the entry's engine worker) | {pool['worker']} | "
        f"{pool['worker'] / 1024:.1f} | |",
        f"| Pss: interpreter alone / loader / init | {interp_pss} / {pool['loader_pss']} / "
        f"{pool['init_pss']} | | |",
    ]
    if pool.get("template"):
        lines.append(
            f"| the python template (one per daemon; every entry is its fork and shares its "
            f"pages): RSS / Pss | {pool['template']} / {pool['template_pss']} | "
            f"{pool['template'] / 1024:.1f} | |")

    # Targets.
    warm = stats.get(("http warm (pool on)", "python"), (None,))[0]
    c8 = throughput.get(("http warm", 8), {}).get("rate") if throughput else None
    c8_bare = throughput.get(("bare", 8), {}).get("rate") if throughput else None
    idle_kib = memory["daemon"][0][1][0]

    def verdict(ok):
        return "n/a" if ok is None else ("met" if ok else "**missed**")

    def cmp(a, limit, higher_is_better=False):
        if a is None or limit is None:
            return None
        return a >= limit if higher_is_better else a <= limit

    warm_limit = TARGETS["warm_vs_bare"] * bare["python"] if bare["python"] else None
    c8_limit = TARGETS["throughput_c8"] * c8_bare if c8_bare else None
    pool_limit = TARGETS["pooled_rss"] * interp_rss
    target_rows = [
        ("Warm HTTP print(2+2) p50 <= 0.2 x bare python3 -c",
         f"{fmt(warm)} ms vs {fmt(warm_limit)} ms (= {fmt(ratio(warm, bare['python']))} x bare "
         f"{fmt(bare['python'])} ms)", cmp(warm, warm_limit)),
        ("Throughput at c=8 >= 0.9 x bare",
         f"{fmt(c8, 1)}/s vs {fmt(c8_limit, 1)}/s (= {fmt(ratio(c8, c8_bare))} x bare "
         f"{fmt(c8_bare, 1)}/s)", cmp(c8, c8_limit, True)),
        ("Daemon idle RSS <= 20 MiB",
         f"{idle_kib / 1024:.1f} MiB", cmp(idle_kib / 1024, TARGETS["idle_rss_mib"])),
        ("Pooled sandbox RSS <= 1.2 x interpreter",
         f"{sandbox_rss / 1024:.1f} MiB vs {pool_limit / 1024:.1f} MiB (= "
         f"{fmt(sandbox_rss / interp_rss)} x {interp_rss / 1024:.1f} MiB)",
         cmp(sandbox_rss, pool_limit)),
    ]
    lines += ["", "## Targets (issue 4)", "", "| target | measured | verdict |",
              "| --- | --- | --- |"]
    for name, measured, ok in target_rows:
        lines.append(f"| {name} | {measured} | {verdict(ok)} |")
    ctx["missed"] = [name for name, _, ok in target_rows if ok is False]

    # Issue 18's: against bare exec at every concurrency, and the machine's CPU per execution;
    # the shell's warm p50 against bare plus an empty request's round trip; warm p50 at c=2.
    sh_warm = stats.get(("http warm (pool on)", "sh"), (None,))[0]
    rtts = extras.get(("http warm (pool on)", "sh"), {}).get("empty_rtt") or []
    rtt = median(rtts) if rtts else None
    sh_floor = bare["sh"] + rtt if bare["sh"] is not None and rtt is not None else None
    sh_limit = 1.5 * sh_floor if sh_floor is not None else None
    lines += ["", "## Targets (issue 18)", "", "| target | measured | verdict |",
              "| --- | --- | --- |",
              f"| warm `sh -c 'exec /bin/true'` over HTTP p50 <= 1.5 x (bare + an empty HTTP round "
              f"trip) | {fmt(sh_warm)} ms vs 1.5 x ({fmt(bare['sh'])} + {fmt(rtt)}) = "
              f"{fmt(sh_limit)} ms (= {fmt(ratio(sh_warm, sh_floor))}"
              f" x), pooled {extras.get(('http warm (pool on)', 'sh'), {}).get('pooled', 0)}/"
              f"{len(samples.get(('http warm (pool on)', 'sh'), []))} | "
              f"{verdict(cmp(sh_warm, sh_limit))} |"]
    if throughput:
        for c in (2,):
            warm_row, bare_row = throughput.get(("http warm", c)), throughput.get(("bare", c))
            if warm_row and bare_row:
                warm_p50 = warm_row["p50_us"] / 1000  # wrk's; bare's rows are in ms
                p50 = ratio(warm_p50, bare_row["p50_ms"])
                lines.append(f"| c={c}: warm p50 <= 0.2 x bare's | {fmt(warm_p50)} ms "
                             f"vs {fmt(bare_row['p50_ms'])} ms (= {fmt(p50)} x) | "
                             f"{verdict(p50 is not None and p50 <= 0.2)} |")
        for c in sorted({c for _, c in throughput}):
            warm_row, bare_row = throughput.get(("http warm", c)), throughput.get(("bare", c))
            if not warm_row or not bare_row:
                continue
            rate = ratio(warm_row["rate"], bare_row["rate"])
            cpu = ratio(warm_row["cpu_ms_per_exec"], bare_row["cpu_ms_per_exec"])
            lines.append(f"| c={c}: throughput >= 1.5 x bare, 0 errors | {fmt(rate)} x, "
                         f"{warm_row.get('errors')} errors, pooled {warm_row.get('pooled')}/"
                         f"{warm_row['ok']} | "
                         f"{verdict(rate is not None and rate >= 1.5 and not warm_row.get('errors'))} |")
            lines.append(f"| c={c}: CPU per execution <= 0.5 x bare | {fmt(cpu)} x | "
                         f"{verdict(cpu is not None and cpu <= 0.5)} |")

    lines += ["", "## Where the time goes", ""]
    cost = memory.get("loader_cost")
    if cost:
        lines += [
            "Start-up CPU of a pool entry's interpreter beyond a plain one (measured by this "
            "run; median of 20 sequential runs each, user + system from the child's rusage):",
            "",
            "| process | CPU ms |",
            "| --- | ---: |",
            f"| `python3 -c 'print(2+2)'` | {fmt(cost['bare_ms'])} |",
            f"| `python3 -c '{cost['imports']}'` (the loader's top-level imports, "
            f"guest/python_loader.py) | {fmt(cost['loader_imports_ms'])} |",
            "",
        ]
    if profile:
        lines += [
            f"`perf record` over {profile['seconds']} s of warm load (wrk, concurrency 8). "
            "Machine-wide (`-a`), samples by command:",
            "",
            "```",
            profile["machine_by_command"],
            "```",
            "",
            "Only the warm server's processes and everything they start (`-p ENGINE,API -g`, "
            "inherited by workers, inits and loaders), by command and object:",
            "",
            "```",
            profile["tree_by_command_dso"],
            "```",
            "",
            "The same, the sandboxd processes (engine, workers, inits) only, by symbol with "
            "callees included (where their time goes; shares overlap, as a function's includes "
            "its callees', and are relative to these processes' own samples; >= 3 %):",
            "",
            "```",
            profile["tree_sandboxd_children"],
            "```",
            "",
            "The same, the python3 processes (loaders) only, by object and symbol (>= 0.7 %):",
            "",
            "```",
            profile["tree_python_symbols"],
            "```",
        ]
    return "\n".join(lines) + "\n"


# ---- main -------------------------------------------------------------------------------------

ALL_VARIANTS = ["bare", "sandboxd run (cold)", "http cold (pool off)", "http warm (pool on)",
                "bwrap", "firejail", "crun", "runsc"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--concurrency", default="1,2,8,32")
    parser.add_argument("--throughput-targets", default="bare,http warm,http cold")
    parser.add_argument("--variants", default=",".join(ALL_VARIANTS))
    parser.add_argument("--profile", default="auto", choices=("auto", "always", "never"))
    parser.add_argument("--output", required=True)
    parser.add_argument("--command-line", default=" ".join(sys.argv))
    opts = parser.parse_args()
    opts.sandboxd = os.path.abspath(opts.sandboxd)
    opts.concurrency = [int(c) for c in opts.concurrency.split(",") if c]
    opts.throughput_targets = [t for t in opts.throughput_targets.split(",") if t]
    opts.variants = [v for v in ALL_VARIANTS if v in opts.variants.split(",")]
    bad_targets = set(opts.throughput_targets) - {"bare", "http warm", "http cold"}
    if (opts.iterations < 1 or opts.seconds < 1 or not opts.variants or bad_targets
            or any(c < 1 for c in opts.concurrency)):
        parser.error("bad --iterations, --seconds, --concurrency, --variants or "
                     "--throughput-targets")
    if os.geteuid() != 0:
        sys.exit("peers: run as root (sandboxd serve, crun, runsc and firejail's --net need it)")
    if not os.access(opts.sandboxd, os.X_OK):
        sys.exit(f"peers: {opts.sandboxd} is not an executable sandboxd")
    for tool in ("bwrap", "firejail", "crun", "runsc", "wrk", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            sys.exit(f"peers: {tool} is missing: run scripts/install-deps.sh --bench")
    opts.max_concurrency = max(64, 2 * max(opts.concurrency))
    opts.max_sandboxes = max(128, 4 * max(opts.concurrency))

    # Ctrl-C, SIGTERM and SIGHUP unwind, so that the cleanup below runs (SIGINT explicitly too:
    # a shell starts background jobs with it ignored, and Python would keep it so).
    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)

    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cleanup = Cleanup()
    ctx = {"cleanup": cleanup, "loadavg_start": loadavg()}
    try:
        workdir = tempfile.mkdtemp(prefix="sandboxd-bench-peers-")
        cleanup.push("temp dir", shutil.rmtree, workdir)
        # In use while this process lives: the leak audit passes over held temp dirs.
        workdir_lock = os.open(workdir, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(workdir_lock, fcntl.LOCK_EX)
        cleanup.push("temp dir lock", os.close, workdir_lock)
        # The API process runs as an unprivileged uid and must reach its data dir inside.
        os.chmod(workdir, 0o711)
        ctx["workdir"] = workdir
        cgroup_parent = f"sandboxd-bench-peers-{os.getpid()}"
        cleanup.push("cgroups", remove_cgroup_tree, cgroup_parent)
        firejail_mounts = FirejailMounts()
        cleanup.push("firejail mounts", firejail_mounts.undo)

        token_lines = subprocess.run([opts.sandboxd, "token", "bench"], check=True,
                                     capture_output=True, text=True).stdout
        ctx["token"] = re.search(r"^token: (\S+)$", token_lines, re.M).group(1)
        ctx["token_sha256"] = re.search(r"^token_sha256 = (\S+)$", token_lines, re.M).group(1)
        with open(os.path.join(workdir, "peers.lua"), "w") as f:
            f.write(WRK_SCRIPT)
        ctx["wrk_script"] = os.path.join(workdir, "peers.lua")

        ctx["crun_state"] = os.path.join(workdir, "crun-state")
        ctx["runsc_state"] = os.path.join(workdir, "runsc-state")
        ctx["bundles"] = make_bundles(workdir, cgroup_parent, cleanup)
        ctx["crun_ns"] = CrunNamespace()
        cleanup.push("crun namespace holder", ctx["crun_ns"].stop)
        cleanup.push("crun containers", delete_containers, ctx["crun_ns"].prefix,
                     ["crun", "--root", ctx["crun_state"]], "crun")
        cleanup.push("runsc containers", delete_containers, [],
                     ["runsc", "--root", ctx["runsc_state"]], "runsc")
        ctx["versions"] = versions(opts, ctx)

        # The warm server pools sh too (exec entries): the shell's warm row is pooled.
        for name, min_idle in (("warm", 2), ("cold", 0)):
            server = Server(opts.sandboxd, workdir, name, ctx["token_sha256"], min_idle,
                            opts.max_sandboxes, opts.max_concurrency,
                            pool_languages=("python", "sh"))
            cleanup.push(f"{name} server", server.stop)
            ctx[name] = server
        for name in ("warm", "cold"):
            ctx[name].wait_ready()
        memory = {"daemon": []}
        memory["daemon"].append(("daemon idle, warm server (pool full, before any request)",
                                 ctx["warm"].daemon_rss_kib()))
        memory["daemon"].append(("daemon idle, cold server (pool off, before any request)",
                                 ctx["cold"].daemon_rss_kib()))
        memory["pool"] = pooled_sandbox_rss(ctx["warm"])
        memory["interpreter"] = interpreter_rss()
        memory["loader_cost"] = loader_startup_cost(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))

        ctx["warm_client"] = Client(ctx["warm"].port, ctx["token"])
        ctx["cold_client"] = Client(ctx["cold"].port, ctx["token"])
        cleanup.push("http clients", lambda: (ctx["warm_client"].close(),
                                              ctx["cold_client"].close()))

        latency, extras = latency_phase(opts, ctx)
        throughput = throughput_phase(opts, ctx) if opts.concurrency else {}
        for target in ("http warm", "http cold"):
            runs = [throughput[(target, c)] for c in opts.concurrency if (target, c) in throughput]
            if runs:
                peak = max((r["rss_max"] for r in runs if r["rss_max"]), default=None)
                if peak:
                    memory["daemon"].append((f"daemon under load, {target} (max over all "
                                             "concurrencies, sampled every 100 ms)", peak))
        ctx["warm"].wait_quiet()
        memory["daemon"].append(("daemon idle again, warm server (after the load, pool full)",
                                 ctx["warm"].daemon_rss_kib()))

        text = write_report(opts, ctx, latency, extras, throughput, memory, None, started_at)
        profile = None
        want_profile = opts.profile == "always" or (opts.profile == "auto" and ctx["missed"])
        if want_profile and shutil.which("perf"):
            profile = profile_phase(opts, ctx)
            text = write_report(opts, ctx, latency, extras, throughput, memory, profile,
                                started_at)
        reconnects = ctx["warm_client"].reconnects + ctx["cold_client"].reconnects
        if reconnects:
            text += (f"\nNote: the HTTP clients had to reconnect {reconnects} times (untimed).\n")
        print(text)
        os.makedirs(os.path.dirname(os.path.abspath(opts.output)), exist_ok=True)
        with open(opts.output, "w") as f:
            f.write(text)
        log(f"wrote {opts.output}")
        return 0
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        cleanup.run()


if __name__ == "__main__":
    sys.exit(main())
