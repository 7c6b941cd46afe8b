#!/usr/bin/python3
"""The gVisor backend cold and warm, side by side with `runsc run` as a user would call it and
with the native backend.

Variants, each a fresh process per round, rounds interleaved (the first round discarded), the
wall time from spawn to exit as this script sees it:
  runsc run          `runsc --platform=ptrace --network=none --ignore-cgroups run` of a bundle
                     made here (the host's /usr parts bound read-only, the merged-/usr links):
                     the peer, cold (--ignore-cgroups: runsc would otherwise leave a cgroup
                     named after each container in every v1 hierarchy of this host)
  sandboxd gvisor    `sandboxd run --backend gvisor`: the same runsc, plus sandboxd's slot,
                     cgroups, bundle, stage shell and supervisor
  sandboxd native    `sandboxd run` (the native backend, cold)
for two programs: Python `print(2+2)` and `/bin/true` (under sh's `exec`). Then over HTTP, one
`sandboxd serve` on loopback with two warm pools of 2 entries each, [pool.python] (native) and
[pool.python.gvisor], each request on a kept-alive connection once both pools are full again
(bench/peers.py's server), the wall time of the request and its parsed response:
  http gvisor warm   {"backend": "gvisor"}: a gVisor entry's loader takes the program
  http gvisor cold   the same with disk_mb 63, which no pool entry has: a cold gVisor sandbox
  http native warm   {"backend": "native"}: a native entry
  http native cold   native with disk_mb 63
for Python `print(2+2)`, and the same four for /bin/true as sh's `exec /bin/true` on a second
server with sh pools ([pool.sh] and [pool.sh.gvisor]: gVisor's exec entries). The issue's
targets: sandboxd gvisor cold <= 0.8 x runsc run; gVisor warm p50 <= 0.05 x runsc run and <= 2 x
native warm.

usage: bench/gvisor.py --sandboxd build/sandboxd [--rounds N] [--out FILE]
"""

import argparse
import datetime
import fcntl
import json
import http.client
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

RUNSC = "/usr/bin/runsc"
USR_PARTS = ("bin", "lib", "lib64", "sbin", "share")
PROGRAMS = {
    "python print(2+2)": (["/usr/bin/python3", "-c", "print(2+2)"], ["-c", "print(2+2)"]),
    "/bin/true": (["/bin/true"], ["--lang", "sh", "-c", "exec /bin/true"]),
}


def make_bundle(root, argv):
    """An OCI bundle for runsc run: a read-only root with the host's /usr parts bound."""
    bundle = os.path.join(root, "bundle-" + str(abs(hash(tuple(argv)))))
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, "usr"))
    for name in ("proc", "dev", "tmp", "workspace"):
        os.mkdir(os.path.join(rootfs, name))
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"},
              {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["size=64m", "mode=1777"]},
              {"destination": "/workspace", "type": "tmpfs", "source": "tmpfs",
               "options": ["size=64m"]}]
    for part in USR_PARTS:
        if os.path.isdir(f"/usr/{part}"):
            os.mkdir(os.path.join(rootfs, "usr", part))
            mounts.append({"destination": f"/usr/{part}", "type": "bind",
                           "source": f"/usr/{part}", "options": ["rbind", "ro"]})
        if os.path.islink(f"/{part}"):
            os.symlink(os.readlink(f"/{part}"), os.path.join(rootfs, part))
    spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": True},
            "hostname": "sandbox", "mounts": mounts,
            "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": argv,
                        "env": ["PATH=/usr/bin:/bin"], "cwd": "/workspace"},
            "linux": {"namespaces": [{"type": t} for t in
                                     ("pid", "network", "ipc", "uts", "mount")]}}
    with open(os.path.join(bundle, "config.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    return bundle


def timed(argv):
    started = time.perf_counter()
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:6]}... exited {proc.returncode}: {proc.stderr[-500:]!r}")
    return elapsed * 1000


HTTP_VARIANTS = {
    "http gvisor warm": {"backend": "gvisor"},
    "http gvisor cold": {"backend": "gvisor", "limits": {"disk_mb": 63}},
    "http native warm": {"backend": "native"},
    "http native cold": {"backend": "native", "limits": {"disk_mb": 63}},
}
# /bin/true as PROGRAMS runs it (sh's exec), over HTTP, on a server of its own with sh pools:
# gVisor's exec entries ([pool.sh.gvisor]) and the native backend's.
TRUE = {"language": "sh", "code": "exec /bin/true"}
HTTP_TRUE_VARIANTS = {name: {**fields, **TRUE} for name, fields in HTTP_VARIANTS.items()}


def http_samples(sandboxd, workdir, rounds, variants=None, backends=("native", "gvisor"),
                 name="gvisor-http"):
    """{variant: [ms]} over HTTP, rounds interleaved, the first discarded: variants
    (HTTP_VARIANTS's shape; None: those), each the request's fields, Python print(2+2) unless
    they say another language and code (whose stdout must then be empty), on a server with a
    Python pool for each of backends and a pool for each other language a variant names on its
    backend. name: the server's (its directory's under workdir)."""
    variants = variants or HTTP_VARIANTS
    lines = subprocess.run([sandboxd, "token", "bench"], check=True, capture_output=True,
                           text=True).stdout
    token = re.search(r"^token: (\S+)$", lines, re.M).group(1)
    digest = re.search(r"^token_sha256 = (\S+)$", lines, re.M).group(1)
    def pool(language, backend):
        return language if backend == "native" else f"{language}.{backend}"

    pools = tuple(sorted({pool("python", b) for b in backends} |
                         {pool(f["language"], f["backend"]) for f in variants.values()
                          if "language" in f}))
    server = Server(sandboxd, workdir, name, digest, 2, 8, 8, pool_languages=pools,
                    tier_settings=[("backends", ", ".join(backends))])
    samples = {}
    try:
        server.wait_ready(120)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for round_ in range(rounds + 1):
            for name, fields in variants.items():
                server.wait_quiet(120)
                request = {"language": "python", "code": "print(2+2)", **fields}
                expected = "4\n" if request["code"] == "print(2+2)" else ""
                body = json.dumps(request)
                started = time.perf_counter()
                conn.request("POST", "/v1/executions", body, headers)
                response = conn.getresponse()
                result = json.loads(response.read())
                ms = (time.perf_counter() - started) * 1000
                if (response.status != 200 or result["stdout"] != expected
                        or result["pooled"] != name.endswith("warm")
                        or result["backend"] != fields["backend"]):
                    raise RuntimeError(f"{name}: {response.status} {result}")
                if round_ > 0:
                    samples.setdefault(name, []).append(ms)
        conn.close()
    finally:
        server.stop()
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out")
    args = parser.parse_args()
    if os.geteuid() != 0 or not os.access(RUNSC, os.X_OK):
        print(f"bench/gvisor.py: run as root, with {RUNSC} installed", file=sys.stderr)
        return 2
    sandboxd = os.path.abspath(args.sandboxd)
    # Held while in use: the leak audit passes over held /tmp/sandboxd* paths.
    root = tempfile.mkdtemp(prefix="sandboxd-bench-gvisor-")
    lock = os.open(root, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    samples = {}
    load_before = os.getloadavg()
    try:
        variants = []
        for program, (argv, sandboxd_args) in PROGRAMS.items():
            bundle = make_bundle(root, argv)
            state = os.path.join(root, "state")
            variants.append((program, "runsc run", lambda i, b=bundle, s=state: [
                RUNSC, f"--root={s}", "--platform=ptrace", "--network=none", "--ignore-cgroups",
                "run", f"--bundle={b}", f"bench-{i}"]))
            variants.append((program, "sandboxd gvisor", lambda i, a=sandboxd_args: [
                sandboxd, "run", "--backend", "gvisor", *a]))
            variants.append((program, "sandboxd native", lambda i, a=sandboxd_args: [
                sandboxd, "run", *a]))
        for round_ in range(args.rounds + 1):
            for program, name, argv in variants:
                ms = timed(argv(round_))
                if round_ > 0:
                    samples.setdefault((program, name), []).append(ms)
        for name, values in http_samples(sandboxd, root, args.rounds).items():
            samples[("python print(2+2)", name)] = values
        for name, values in http_samples(sandboxd, root, args.rounds, HTTP_TRUE_VARIANTS,
                                         name="true-http").items():
            samples[("/bin/true", name)] = values
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.close(lock)
    load_after = os.getloadavg()

    def p95(values):
        return sorted(values)[max(0, int(len(values) * 0.95) - 1)]

    lines = ["# The gVisor backend cold and warm, against `runsc run` and the native backend", ""]
    lines.append(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                 f"{os.cpu_count()} CPUs, kernel {platform.release()}, runsc "
                 f"{subprocess.run([RUNSC, '--version'], capture_output=True, text=True).stdout.split()[2]}"
                 f" (--platform=ptrace). Load average (1, 5, 15 min) at the start: "
                 f"{' '.join(f'{x:.2f}' for x in load_before)}, at the end: "
                 f"{' '.join(f'{x:.2f}' for x in load_after)}.")
    lines.append("")
    lines.append(f"Command: `/usr/bin/python3 bench/gvisor.py --sandboxd {args.sandboxd} "
                 f"--rounds {args.rounds}{' --out ' + args.out if args.out else ''}` ({args.rounds} "
                 f"rounds, interleaved, the first discarded). Wall time from spawn to exit, ms; "
                 f"the http rows: of the request on a kept-alive connection, response parsed, "
                 f"each once the server's warm pools are full (2 entries each).")
    lines.append("")
    lines.append("| program | variant | median ms | p95 ms | / runsc run |")
    lines.append("| --- | --- | ---: | ---: | ---: |")
    verdicts = []
    for program in PROGRAMS:
        peer = statistics.median(samples[(program, "runsc run")])
        for name in ("runsc run", "sandboxd gvisor", "sandboxd native", *HTTP_VARIANTS):
            values = samples.get((program, name))
            if values is None:
                continue
            median = statistics.median(values)
            lines.append(f"| {program} | {name} | {median:.1f} | {p95(values):.1f} | "
                         f"{median / peer:.3f} |")
        ratio = statistics.median(samples[(program, "sandboxd gvisor")]) / peer
        verdicts.append(f"| sandboxd gvisor cold <= 0.8 x runsc run ({program}) | {ratio:.3f} | "
                        f"{'met' if ratio <= 0.8 else '**missed**'} |")
    for program in PROGRAMS:
        warm = statistics.median(samples[(program, "http gvisor warm")])
        peer = statistics.median(samples[(program, "runsc run")])
        native_warm = statistics.median(samples[(program, "http native warm")])
        for target, ratio, bound in (("http gvisor warm <= 0.05 x runsc run", warm / peer, 0.05),
                                     ("http gvisor warm <= 2 x http native warm",
                                      warm / native_warm, 2.0)):
            verdicts.append(f"| {target} ({program}) | {ratio:.3f} | "
                            f"{'met' if ratio <= bound else '**missed**'} |")
    lines += ["", "## Targets", "", "| target | measured | verdict |", "| --- | ---: | --- |",
              *verdicts]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
