#!/usr/bin/python3
"""The uml backend cold, side by side with the gVisor and native backends cold and warm and with
`runsc run` as a user would call it.

Variants, each a fresh process per round, rounds interleaved (the first round discarded), the
wall time from spawn to exit as this script sees it:
  runsc run          `runsc --platform=ptrace --network=none --ignore-cgroups run` of a bundle
                     made here (bench/gvisor.py's): the gVisor peer, cold
  sandboxd uml       `sandboxd run --backend uml`: a user-mode-linux kernel booted in a native
                     sandbox, its init, the program, the report; also split in two from the
                     result: the program's own wall time in the guest (usage.wall_ms) and the
                     rest (the boot, the files' copy, the power-off and sandboxd's own part)
  sandboxd gvisor    `sandboxd run --backend gvisor`
  sandboxd native    `sandboxd run`
for Python `print(2+2)` and `/bin/true` (under sh's `exec`); then rows over HTTP as
bench/gvisor.py measures them (a server with a pool per backend, each request once the pools
are full): `http uml warm` (a booted guest whose loader waits, Python's, or whose init waits to
start the program, sh's exec entry: uml.c's pool mode), `http uml cold` (a request the pool
cannot take: disk 63 MiB), `http gvisor warm` (Python's loader, or sh's exec entry there) and
`http native warm`. The issue's targets: uml warm <= 0.1 x its own cold boot (`sandboxd uml`),
and <= 2 x gVisor's warm.

usage: bench/uml.py --sandboxd build/sandboxd [--rounds N] [--out FILE]
"""

import argparse
import datetime
import fcntl
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gvisor import PROGRAMS, RUNSC, http_samples, make_bundle, timed  # noqa: E402

HTTP_VARIANTS = {
    "http uml warm": {"backend": "uml"},
    "http uml cold": {"backend": "uml", "limits": {"disk_mb": 63}},
    "http gvisor warm": {"backend": "gvisor"},
    "http native warm": {"backend": "native"},
}
# /bin/true as PROGRAMS runs it (sh's exec), over HTTP: uml's exec entries (a [pool.sh.uml]);
# gVisor's and the native backend's rows are their sh pools'.
TRUE = {"language": "sh", "code": "exec /bin/true"}
HTTP_TRUE_VARIANTS = {
    "http uml warm": {"backend": "uml", **TRUE},
    "http uml cold": {"backend": "uml", "limits": {"disk_mb": 63}, **TRUE},
    "http gvisor warm": {"backend": "gvisor", **TRUE},
    "http native warm": {"backend": "native", **TRUE},
}

UML_KERNEL = "/usr/bin/linux.uml"


def timed_uml(argv):
    """(wall ms, the program's own wall ms in the guest) of a `sandboxd run --json` of uml."""
    started = time.perf_counter()
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    result = json.loads(proc.stdout)
    if proc.returncode != 0 or result["status"] != "ok" or result["backend"] != "uml":
        raise RuntimeError(f"{argv[:6]}... exited {proc.returncode}: {proc.stdout[-500:]!r}")
    return elapsed, float(result["usage"]["wall_ms"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()
    if os.geteuid() != 0 or not os.access(RUNSC, os.X_OK) or not os.access(UML_KERNEL, os.X_OK):
        print(f"bench/uml.py: run as root, with {RUNSC} and {UML_KERNEL} installed",
              file=sys.stderr)
        return 2
    sandboxd = os.path.abspath(args.sandboxd)
    # Held while in use: the leak audit passes over held /tmp/sandboxd* paths.
    root = tempfile.mkdtemp(prefix="sandboxd-bench-uml-")
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
            variants.append((program, "sandboxd uml", lambda i, a=sandboxd_args: [
                sandboxd, "run", "--json", "--backend", "uml", *a]))
            variants.append((program, "sandboxd gvisor", lambda i, a=sandboxd_args: [
                sandboxd, "run", "--backend", "gvisor", *a]))
            variants.append((program, "sandboxd native", lambda i, a=sandboxd_args: [
                sandboxd, "run", *a]))
        for round_ in range(args.rounds + 1):
            for program, name, argv in variants:
                if name == "sandboxd uml":
                    ms, program_ms = timed_uml(argv(round_))
                    if round_ > 0:
                        samples.setdefault((program, "uml: the program in the guest"),
                                           []).append(program_ms)
                        samples.setdefault((program, "uml: the rest (boot, power-off)"),
                                           []).append(ms - program_ms)
                else:
                    ms = timed(argv(round_))
                if round_ > 0:
                    samples.setdefault((program, name), []).append(ms)
        for name, values in http_samples(sandboxd, root, args.rounds, HTTP_VARIANTS,
                                         ("native", "gvisor", "uml")).items():
            samples[("python print(2+2)", name)] = values
        for name, values in http_samples(sandboxd, root, args.rounds, HTTP_TRUE_VARIANTS,
                                         ("native", "gvisor", "uml"), "true-http").items():
            samples[("/bin/true", name)] = values
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.close(lock)
    load_after = os.getloadavg()

    def p95(values):
        return sorted(values)[max(0, int(len(values) * 0.95) - 1)]

    version = subprocess.run([UML_KERNEL, "--version"], capture_output=True, text=True)
    lines = ["# The uml backend cold, against gVisor, native and `runsc run`", ""]
    lines.append(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                 f"{os.cpu_count()} CPUs, kernel {platform.release()}, linux.uml "
                 f"{version.stdout.strip() or '?'}, runsc "
                 f"{subprocess.run([RUNSC, '--version'], capture_output=True, text=True).stdout.split()[2]}"
                 f" (--platform=ptrace). Load average (1, 5, 15 min) at the start: "
                 f"{' '.join(f'{x:.2f}' for x in load_before)}, at the end: "
                 f"{' '.join(f'{x:.2f}' for x in load_after)}.")
    lines.append("")
    lines.append(f"Command: `/usr/bin/python3 bench/uml.py --sandboxd {args.sandboxd} "
                 f"--rounds {args.rounds}{' --out ' + args.out if args.out else ''}` ({args.rounds} "
                 f"rounds, interleaved, the first discarded). Wall time from spawn to exit, ms; "
                 f"the http rows: of the request on a kept-alive connection, response parsed, "
                 f"each once the warm pools are full (bench/gvisor.py's server).")
    lines.append("")
    lines.append("| program | variant | median ms | p95 ms | / sandboxd uml | / runsc run |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    names = ("sandboxd uml", "uml: the program in the guest", "uml: the rest (boot, power-off)",
             "runsc run", "sandboxd gvisor", "sandboxd native", *HTTP_VARIANTS)
    # (HTTP_TRUE_VARIANTS's names are HTTP_VARIANTS's.)
    for program in PROGRAMS:
        uml = statistics.median(samples[(program, "sandboxd uml")])
        peer = statistics.median(samples[(program, "runsc run")])
        for name in names:
            values = samples.get((program, name))
            if values is None:
                continue
            median = statistics.median(values)
            lines.append(f"| {program} | {name} | {median:.1f} | {p95(values):.1f} | "
                         f"{median / uml:.3f} | {median / peer:.3f} |")
    def verdict(ratio, bound):
        return f"{ratio:.3f} | {'met' if ratio <= bound else '**missed**'}"

    def median(program, name):
        return statistics.median(samples[(program, name)])

    lines += ["", "## Targets", "", "| target | measured | verdict |", "| --- | ---: | --- |"]
    for program in PROGRAMS:
        warm = median(program, "http uml warm")
        lines.append(f"| {program}: http uml warm <= 0.1 x sandboxd uml (cold) | "
                     f"{verdict(warm / median(program, 'sandboxd uml'), 0.1)} |")
    for program in PROGRAMS:
        ratio = median(program, "http uml warm") / median(program, "http gvisor warm")
        lines.append(f"| {program}: http uml warm <= 2 x http gvisor warm | "
                     f"{verdict(ratio, 2.0)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
