#!/usr/bin/python3
"""Exec latency of sandboxd against bare exec and bubblewrap, side by side in one run.

Two programs, `/bin/true` and `python3 -c 'print(2+2)'`, each run three ways:
  bare      the program itself
  sandboxd  `sandboxd run` (true: `--lang sh -c 'exec /bin/true'`; python: `-c 'print(2+2)'`)
  bwrap     `bwrap --unshare-all --die-with-parent ...` with a read-only /usr

Each sample is the wall time of one subprocess.run() (fork, exec, wait, output drained), taken
with time.perf_counter_ns(). Variants are interleaved round-robin so drift in the machine's
state hits all of them alike; a few warm-up rounds are discarded. Every run's exit code and
output are checked, so a broken variant aborts the benchmark instead of timing an error.

Called by bench/exec_latency.sh; see there for the knobs.
"""

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

PYTHON = "/usr/bin/python3"
WARMUP_ROUNDS = 3
PHASE_SAMPLES = 20

BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/bin", "/bin",
    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
]  # fmt: skip


# sandboxd runs a shell program as a script through /bin/sh, so every variant of "true" runs
# the same thing: /bin/sh, which execs /bin/true. The comparison is then of the sandboxes alone.
SH_TRUE = ["/bin/sh", "-c", "exec /bin/true"]


def variants(sandboxd, groups):
    """(group, program, argv, expected stdout) for every variant of the selected groups."""
    table = {
        "bare": [
            ("true", SH_TRUE, b""),
            ("python", [PYTHON, "-c", "print(2+2)"], b"4\n"),
        ],
        "sandboxd": [
            ("true", [sandboxd, "run", "--lang", "sh", "-c", "exec /bin/true"], b""),
            ("python", [sandboxd, "run", "-c", "print(2+2)"], b"4\n"),
        ],
        "bwrap": [
            ("true", BWRAP + SH_TRUE, b""),
            ("python", BWRAP + [PYTHON, "-c", "print(2+2)"], b"4\n"),
        ],
    }
    return [(g, prog, argv, out) for g in groups for prog, argv, out in table[g]]


def run_once(argv, expected):
    start = time.perf_counter_ns()
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    elapsed = time.perf_counter_ns() - start
    if proc.returncode != 0 or proc.stdout != expected:
        sys.exit(f"exec_latency: {shlex.join(argv)} failed: exit {proc.returncode}, "
                 f"stdout {proc.stdout[:200]!r}, stderr {proc.stderr[-500:]!r}")
    return elapsed / 1e6


def percentile(samples, fraction):
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def phase_breakdown(sandboxd):
    """Median of sandboxd's own timing fields over a few --json runs per program."""
    rows = {}
    for program, argv in (("true", ["--lang", "sh", "-c", "exec /bin/true"]),
                          ("python", ["-c", "print(2+2)"])):
        fields = {}
        for _ in range(PHASE_SAMPLES):
            proc = subprocess.run([sandboxd, "run", "--json", *argv], stdin=subprocess.DEVNULL,
                                  capture_output=True)
            try:
                timing = json.loads(proc.stdout)["timing"]
            except (ValueError, KeyError):
                sys.exit(f"exec_latency: sandboxd --json gave no timing: {proc.stdout[:300]!r} "
                         f"{proc.stderr[-300:]!r}")
            for key, value in timing.items():
                fields.setdefault(key, []).append(value)
        rows[program] = {k: statistics.median(v) / 1000 for k, v in fields.items()}
    return rows


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    distribution = platform.freedesktop_os_release().get("PRETTY_NAME", "Linux")
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem_kib / 2**20:.0f} GiB RAM, "
            f"kernel {platform.release()}, {distribution}")


def version_of(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (proc.stdout or proc.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--output", required=True)
    parser.add_argument("--variants", default="bare,sandboxd,bwrap")
    parser.add_argument("--command-line", default=" ".join(sys.argv))
    opts = parser.parse_args()

    groups = [g for g in opts.variants.split(",") if g]
    unknown = set(groups) - {"bare", "sandboxd", "bwrap"}
    if unknown or not groups or opts.iterations < 1:
        parser.error(f"bad --variants {opts.variants!r} or --iterations {opts.iterations}")
    if "sandboxd" in groups:
        opts.sandboxd = os.path.abspath(opts.sandboxd)
        if not os.access(opts.sandboxd, os.X_OK):
            sys.exit(f"exec_latency: {opts.sandboxd} is not an executable sandboxd")

    runs = variants(opts.sandboxd, groups)
    samples = {(g, p): [] for g, p, _, _ in runs}
    print(f"exec_latency: {len(runs)} variants x {opts.iterations} iterations "
          f"(+{WARMUP_ROUNDS} warm-up rounds)", file=sys.stderr)
    for round_number in range(WARMUP_ROUNDS + opts.iterations):
        # Rotate the order each round so no variant always runs right after another.
        shift = round_number % len(runs)
        for group, program, argv, expected in runs[shift:] + runs[:shift]:
            ms = run_once(argv, expected)
            if round_number >= WARMUP_ROUNDS:
                samples[(group, program)].append(ms)

    stats = {k: (statistics.median(v), percentile(v, 0.95)) for k, v in samples.items()}
    phases = phase_breakdown(opts.sandboxd) if "sandboxd" in groups else None

    def overhead(group, program):
        if (group, program) not in stats or ("bare", program) not in stats:
            return None
        return stats[(group, program)][0] - stats[("bare", program)][0]

    def fmt(value):
        return "n/a" if value is None else f"{value:.2f}"

    sandboxd_version = (version_of([opts.sandboxd, "version"]) if "sandboxd" in groups
                        else "sandboxd: not run")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Exec latency: sandboxd vs bare exec vs bubblewrap",
        "",
        f"- Command: `ITERATIONS={opts.iterations} {opts.command_line}`",
        f"- Date: {now}",
        f"- Machine: {machine()}",
        f"- Versions: `{sandboxd_version}`, "
        f"`{version_of(['bwrap', '--version'])}`, `{version_of([PYTHON, '--version'])}`",
        f"- Method: {opts.iterations} timed runs per variant (after {WARMUP_ROUNDS} warm-up "
        "rounds), interleaved round-robin; each sample is the wall time of one "
        "`subprocess.run()` from `time.perf_counter_ns()` in /usr/bin/python3, output drained "
        "and checked.",
        "- sandboxd runs with its default limits; its `/bin/true` variant is "
        "`sandboxd run --lang sh -c 'exec /bin/true'`, which starts `/bin/sh` to exec "
        "`/bin/true`; the bare and bwrap variants run the same `/bin/sh -c 'exec /bin/true'`.",
        f"- bwrap: `{shlex.join(BWRAP)} PROGRAM`",
        "",
        "| program | variant | median ms | p95 ms | overhead over bare (median) ms |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for program in ("true", "python"):
        for group in groups:
            if (group, program) not in stats:
                continue
            median, p95 = stats[(group, program)]
            over = "-" if group == "bare" else fmt(overhead(group, program))
            name = "/bin/true" if program == "true" else "python3 -c 'print(2+2)'"
            lines.append(f"| {name} | {group} | {median:.2f} | {p95:.2f} | {over} |")
    lines += [
        "",
        "Overhead ratio (sandboxd overhead / bwrap overhead; the issue's target for /bin/true is "
        "<= 1):",
        "",
        "| program | sandboxd overhead ms | bwrap overhead ms | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for program in ("true", "python"):
        ours, theirs = overhead("sandboxd", program), overhead("bwrap", program)
        ratio = None if ours is None or not theirs else ours / theirs
        lines.append(f"| {program} | {fmt(ours)} | {fmt(theirs)} | {fmt(ratio)} |")
    if phases:
        lines += [
            "",
            f"sandboxd's own phase timing (median of {PHASE_SAMPLES} `--json` runs, ms):",
            "",
            "| program | acquire | setup | run | teardown | total |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for program, row in phases.items():
            cells = " | ".join(fmt(row.get(k)) for k in
                               ("acquire_us", "setup_us", "run_us", "teardown_us", "total_us"))
            lines.append(f"| {program} | {cells} |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(opts.output)), exist_ok=True)
    with open(opts.output, "w") as f:
        f.write(text)
    print(f"exec_latency: wrote {opts.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
