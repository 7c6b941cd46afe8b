#!/usr/bin/python3
"""The hostile suite of sandboxd (issue 5): run every hostile payload through `sandboxd run --json`
exactly as a client would, judge containment on kernel and host evidence only, run every payload's
control and fail when a control does not flip the verdict.

    /usr/bin/python3 tests/hostile/harness.py --sandboxd build/sandboxd [--report PATH]
        [--only NAME[,NAME]] [--class CLASS[,CLASS]] [--no-controls]
        [--controls-class CLASS[,CLASS]] [--no-pooled] [-j N] [--list] [-v]

Every payload runs cold (`sandboxd run`); a payload that a warm pool can take (Python's loader,
any other language's exec entry) also runs through a pool entry (`sandboxd run --pooled`: the
service's warm path), judged the same way; on another backend (--backends) too, cold and,
for the languages that backend has entries for, pooled, and a limit's control (lift) must flip
there as well. A
session payload (`session = true`, below) runs its cells through `sandboxd session`.

Stdlib only. Must run as root (cgroups, setpriv, canaries).

Declaration: payloads/<class>/<name>.toml next to its payload file
---------------------------------------------------------------------
  name = "fork_bomb_sh"            unique
  class = "resource"               = the directory name
  description = "..."
  language = "bash"                python | bash | sh | c | cpp | rust | go   (c is compiled on
                                   the host with `gcc -O2 -pthread ... -lrt` and run as
                                   `--lang sh -c 'exec ./NAME'` with `--file BINARY:NAME`, NAME =
                                   the C file's stem; cpp, rust and go are compiled by sandboxd's
                                   own compile stage, the payloads of class "compile": their
                                   `limits` may set compile_timeout, compile_memory... (`sandboxd
                                   run --compile-OPTION`), the result's compile stage is
                                   `compile.*` in evidence paths; no outside control, no pooled
                                   run (a compile stage is always a fresh sandbox))
  file = "fork_bomb.sh"            relative to the declaration
  limits = { pids = 16, timeout = "2s", ... }   `sandboxd run` flags without "--" (underscores ok:
                                   cpu_time -> --cpu-time, open_files -> --open-files)
  args = []                        optional, after `--`; {variables} substituted (see below)
  stdin = ""                       optional; {variables} substituted; fed with --stdin FILE
  probes = ["no_leftover_processes", { name = "host_disk_unchanged", max_drop = "8M" }]
                                   host-side evidence (probes.py lists them and their variables)
  [expect]                         containment: ALL must hold
  status = ["pids_limit"]          allowed statuses
  evidence = { pids_max_events = ">0" }
        key: a field path. A bare name is looked up in evidence, then usage, then the top level,
        then host; a dotted path walks the combined object (result JSON + host + probes + before).
        value: ">0" "==0" "<=N" ">=N" "<N" "!=N" (N: a number with optional K/M/G suffix, or an
        arithmetic expression of numbers and field paths: "<=500*usage.wall_ms+60000"),
        a TOML bool/number (equality), or a list of such (all must hold). true/false count as 1/0.
  reports = { fork = ["EAGAIN"] }  payload stdout JSON lines {"op": .., "ret": .., "errno": ..}:
                                   every line with that op has an errno in the list and at least
                                   one exists. "none" in the list matches errno null/absent.
  stdout_max = 1048576             stdout length <= N  (lengths: characters of the decoded string)
  stdout_len = 65536               stdout length == N

Optional fields ADDED by the harness (all optional, nothing above renamed):
  exclusive = true                 run with no other payload in parallel (kill(-1), residue pairs)
  cflags = ["-static"]             extra gcc flags for a C payload
  files = ["helper.py"]            extra files (beside the declaration) put into /workspace
  stdin_file = "data.bin"          a file beside the declaration fed as stdin (instead of stdin)
  stdin_repeat = 100000            feed `stdin` repeated that many times (large inputs)
  host_timeout = "30s"             hard host-side bound on one sandboxd run (default: timeout+20s);
                                   sandboxd still running then is killed and the run is an ESCAPE
  [before]                         a run that precedes the judged one, e.g. tenant A planting
                                   residue for tenant B: file, language, args, stdin, limits
                                   (default: the payload's), cflags. Same variables; its result is
                                   `before.*` in evidence paths. The outside control runs it outside.
                                   Residue pairs: A = [before], B = the payload. Between the two
                                   runs the harness records, from the host, `before.between`:
                                     sandboxd_cgroups   per-sandbox cgroups left once A returned
                                                        (empty ones, or ones holding processes no
                                                        live supervisor owns: A's supervisor has
                                                        exited, so all of A's would count)
                                     sandbox_processes  processes of a sandbox uid no live
                                                        supervisor owns (outside: what A left
                                                        running in its safety cgroup)
                                     uids               A's host uid(s), seen while it ran (their
                                                        range names its cgroup slot; without them every
                                                        sandbox's leftovers count)
                                     details            what they were
                                   In the outside control, what A left running is kept alive (in
                                   A's safety cgroup) until B has finished, as a lingering process
                                   would be without a sandbox, then killed.
  [without_kernel.FEATURE]         the kernel lacks FEATURE (tests/uml's 6.1 lacks all of them):
                                   landlock        any Landlock ABI
                                   landlock_scope  Landlock ABI 6 (signal and abstract-socket scope)
                                   ia32            the i386 syscall ABI (int $0x80)
                                   tmpfs_user_xattr  user.* xattrs on tmpfs (Linux 6.6)
                                   An expectation that holds only with that feature says so here
                                   (HOSTILE.md "As sandboxd grows"):
    reason = "..."                 required: what differs, and which layer contains the payload
    skip = true                    the attack does not exist on such a kernel: SKIP (not run)
    needs = true                   only that layer refuses part of it: judged by `expect` below
                                   (what another layer still guarantees), control not run
    [without_kernel.FEATURE.expect]   replaces those keys of [expect]
    [without_kernel.FEATURE.control]  replaces those keys of [control]
  [backend.NAME]                   how the payload is judged on another backend, gvisor or uml
                                   (--backends), where it differs from the native one (every
                                   difference is a finding, explained here and in README's
                                   findings):
    reason = "..."                 required: what differs, and what still contains the payload
    skip = true                    it cannot apply to that backend (not run there)
    [backend.NAME.expect]          replaces those keys of [expect] for that backend's run
    limits = { ... }, args = [...]  replace those keys of limits, and args, for that backend's
                                   run and its control (the attack the same, smaller where
                                   that backend makes it slow)
  fail_step = "seccomp"            run the payload with `--test-fail-step STEP` (fail-closed tests);
                                   also its [before] run and its without:<layer> control, if any
  [expect]
  stderr_max / stderr_len          like stdout_max / stdout_len
  stdout_match / stderr_match      a Python regex that must fullmatch the stream (re.DOTALL)
  stdout_absent = ["text"]         strings that must not occur in stdout or stderr
  matches = { "compile.stderr" = "no space left" }   the string at each field path contains a
                                   match of its Python regex (re.search)
  error_match = "setup step 'x'.*" a Python regex that must fullmatch the result's "error" (re.DOTALL;
                                   a result without "error" matches as "")
  report_checks = { "fill.bytes" = "<=16M" }   for every report line of op "fill", its field
                                   "bytes" satisfies the comparison (and one such line exists)
  [control]
  kind = "lift" | "outside" | "without:<layer>" | "no_fail_step"
                                   no_fail_step: the same sandboxed run without the payload's
                                   fail_step (the token a fail-closed payload prints appears)
  limits = { ... }                 lift: overrides of the payload's limits (also allowed with
                                   without:<layer>, e.g. to shorten a timeout)
  args = [...] / stdin = "..."     override the payload's for the control run
  inherit_fds = 3                  outside only: the unsandboxed run inherits that many extra open
                                   descriptors (fds 3.., /dev/null) like a runner that forgets
                                   O_CLOEXEC would hand them on
  expect_contained = false         implied; the control must be judged NOT contained

Sessions (issue 13): `session = true`
  language = "python" | "bash"; `file` holds the cells, cut at lines `# %%` (the percent format
  of Jupytext and editors, a comment in both languages; what precedes the first is a header, not
  run). A marker line may set the cell's run fields: `# %% timeout_ms=1500`. {variables} are
  substituted into each cell's code (write TOKEN = "{token}" once, not f"{token}").
  limits = { memory_mb = 128, pids = 16, wall_ms = 5000 }   the session's open line: the API's
                                   names (output_bytes, disk_mb, open_files too; no cpu_ms)
  The harness feeds `sandboxd session` {"op": "open", "language", "limits"}, one {"op": "run",
  "code", "timeout_ms"} per cell, then end of input (the session ends), and judges the LAST
  run's answer (status, stdout with the report lines, evidence, usage); every run's answer is
  `cells` (`cells.0.status`, `cells.0.restarted`, `cells.0.timing.total_us`). The probes look
  once `sandboxd session` has exited. No args, stdin, files, cflags or fail_step; the control is
  `outside` or `lift` (`sandboxd session` has no test hooks).
  Outside control: the cells run one after another unsandboxed as uid 65534 in the safety
  cgroups and one working directory, each its own interpreter process (so each cell must be
  self-contained: variables do not carry over, files and processes do); a cell past its deadline
  gets SIGINT, then SIGKILL after the engine's 2 s grace (`restarted` true). A runner without a
  sandbox reaches only the process it started: what the cells left running stays alive until the
  probes have looked, then it is killed.
  [before] of a session payload is a session too (file, language, limits): tenant A's, ended
  before B opens, with `before.between` as above plus `token_processes` (host processes whose
  command line holds the token, read then). With
    keep_open = true               A stays open while B runs (outside: what A's cells left stays
                                   alive); the host pids of A's processes that carry the token
                                   are recorded once A's cells ran ({peer_pid}: the lowest, "0"
                                   if none), then, once B has finished, `before.open`:
                                     seen         how many there were
                                     alive_after  how many are the same process (pid and start
                                                  time) still alive
                                     pids         their host pids
                                     exit_code    A's `sandboxd session` exit code (sandbox)

Variables for args/stdin: {token} (random per payload run, shared with [before]), {workdir}
(harness temp dir, host path) and every variable the declared probes offer (probes.py), e.g.
{tcp_port} {host_ip} {canary_path} {canary_token} {ipc_key} {mq_name} {canary_pid}; {peer_pid}
with a [before] keep_open session.
Unknown {names} are left as they are.

Host facts every run records (usable in evidence as host.*):
  host.wall_ms                     sandboxd's wall time as the harness measured it
  host.exit_code                   sandboxd's own exit code
  host.hung                        sandboxd had to be killed at host_timeout
  host.supervisor_vmhwm_bytes      peak RSS of the sandboxd process (sampled /proc VmHWM)
  host.supervisor_cgroup_peak_bytes   the memory peak (v1 memory.max_usage_in_bytes, v2
                                   memory.peak) of a cgroup holding only the sandboxd process (its
                                   sandbox is born in sandboxd's own cgroups)
  host.stdout_lines                lines sandboxd printed on its stdout (--json: exactly 1)
  host.raw_stdout_control_bytes    bytes < 0x20 (except the final newline) in sandboxd's raw
                                   stdout: JSON must escape them (RFC 8259 lets DEL 0x7f through)
  host.stdout_bytes / host.stderr_bytes   UTF-8 length of the result's stdout / stderr strings
  host.reports                     number of report lines the payload printed

Verdict: contained = every [expect] item holds AND every probe is clean AND sandboxd returned a
result by itself. The control run is judged with the same [expect] and probes and must be NOT
contained ("flipped"); a control run that produced no result, or internal_error (or, for a
session, a cell's error) when that is not an expected status, is invalid and does not count as
flipped. A payload passes when it is contained and its control flipped. Exit status 1 when any payload fails or the leak audit finds something.
"""

import argparse
import concurrent.futures
import copy
import ctypes
import errno
import fcntl
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probes  # noqa: E402  (the harness's sibling module)

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD_DIR = os.path.join(HERE, "payloads")
CLASSES = ("resource", "supervisor", "filesystem", "privilege", "kernel", "infoleak", "network",
           "residue", "failclosed", "session", "compile")
# Compiled by sandboxd's compile stage (class "compile"), not on the host as "c" is.
SANDBOXD_COMPILED = ("cpp", "rust", "go")
LANGUAGES = ("python", "bash", "sh", "c") + SANDBOXD_COMPILED
KNOWN_FIELDS = {"name", "class", "description", "language", "file", "limits", "args", "stdin",
                "probes", "expect", "control", "exclusive", "cflags", "files", "stdin_file",
                "host_timeout", "before", "fail_step", "stdin_repeat", "without_kernel", "session",
                "backend"}
# The backends a payload runs on besides the native one (--backends): `sandboxd run --backend`.
OTHER_BACKENDS = ("gvisor", "uml")
BACKEND_FIELDS = {"reason", "skip", "expect", "limits", "args"}
RUNSC = "/usr/bin/runsc"  # src/sandbox/gvisor/gvisor.c
UML_KERNEL = "/usr/bin/linux.uml"  # src/sandbox/uml/uml.c
# The classes a backend runs by default (no --backends): every guest boot of the uml backend
# costs ~0.7 s of two CPUs, and its caps are the guest cgroup's, which
# tests/integration/test_uml_backend.py hits one by one: by default it runs the classes where
# the guest kernel and its init are the whole answer (what the program can reach, call, read and
# become). `--backends native,uml` runs every class (README, The hostile suite).
BACKEND_DEFAULT_CLASSES = {"uml": ("kernel", "privilege", "filesystem", "infoleak")}
# The languages each other backend has warm-pool entries for (sbx_backend_pools_language) whose
# payloads run pooled there too, as BACKEND-pooled. uml's sh and bash entries are exec entries
# whose guest init starts the program itself, as a cold guest's does (the same kernel, the same
# init, after the boot): tests/integration/test_uml_backend.py runs them against cold; their 14
# payloads' second guest boots and runs took ~55 s of payload wall time (at -j 4) for nothing a
# cold run does not show. uml's Python entries run the program in the guest's loader.
BACKEND_POOLED_LANGUAGES = {"gvisor": ("python", "sh", "bash"), "uml": ("python",)}
# A gVisor entry waits in Python's loader, sh's and bash's exec entries too (gvisor/spec.h): a
# payload asking for less memory than the loader's minimum (execution.c) runs cold only.
GVISOR_POOL_MIN_MEMORY = 32 << 20
# A uml entry's guest boots with the default memory cap (execution.c's pool_memory_bytes): a
# payload asking for more runs cold only.
UML_POOL_MEMORY = 256 << 20
KERNEL_FEATURES = ("landlock", "landlock_scope", "ia32", "tmpfs_user_xattr")
VARIANT_FIELDS = {"reason", "skip", "needs", "expect", "control"}
EXPECT_FIELDS = {"status", "evidence", "reports", "stdout_max", "stdout_len", "stderr_max",
                 "stderr_len", "stdout_match", "stderr_match", "stdout_absent", "report_checks",
                 "error_match", "matches"}
CONTROL_FIELDS = {"kind", "limits", "expect_contained", "args", "stdin", "inherit_fds"}
SANDBOX_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
OUTSIDE_SETPRIV = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                   "--inh-caps=-all"]
SAFETY_PARENT = "sandboxd-hostile"
DEFAULT_TIMEOUT_S = 10.0
SESSION_LANGUAGES = ("python", "bash")
# A cell's run fields a `# %%` marker line may set.
CELL_FIELDS = ("timeout_ms",)
# engine/session.h: a run that ignores its interrupt this long gets a fresh interpreter.
SESSION_INTERRUPT_GRACE_S = 2.0
SESSION_DEFAULT_WALL_MS = 10000
# How much slower than this host's the host's own timing may be (--host-time-scale): upper
# bounds on host.*wall_ms (sandboxd's whole run as the harness saw it) are multiplied by it, and
# so is the deadline (limits.timeout) of a payload that must not time out: there the deadline
# only bounds the run, and a guest under qemu's emulation starts interpreters several times
# slower, slower still when the host deschedules its CPU threads (host_secrets' 8 s and
# symlink_plant's 30 s were overrun on a slower host). The sandbox's own usage.wall_ms bounds
# and the deadline of a payload whose expected status includes timeout are not scaled.
HOST_TIME_SCALE = 1.0

print_lock = threading.Lock()


def say(*parts, err=False):
    with print_lock:
        print(*parts, file=sys.stderr if err else sys.stdout, flush=True)


def parse_duration(value):
    """'500ms' / '5s' / '2m' / '1h' / 3 -> seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(value))
    if not match:
        raise ValueError(f"bad duration {value!r}")
    factor = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return float(match.group(1)) * factor


def substitute(text, variables):
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}",
                  lambda m: variables.get(m.group(1), m.group(0)), text)


# ---------------------------------------------------------------------------------------------
# expressions in [expect] evidence


class Missing(Exception):
    pass


_TOKEN_RE = re.compile(r"\s*(?:(\d+(?:\.\d+)?)([KMG])?(?![A-Za-z0-9_])|"
                       r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)|([-+*/()]))")
_CONSTANTS = {"true": 1, "false": 0}
_UNITS = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def evaluate(expression, resolve):
    """Numbers (K/M/G suffixes), field paths, + - * / and parentheses."""
    tokens, pos = [], 0
    text = str(expression)
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN_RE.match(text, pos)
        if not match:
            raise ValueError(f"bad expression {expression!r} at {text[pos:]!r}")
        pos = match.end()
        if match.group(1) is not None:
            tokens.append(("num", float(match.group(1)) * _UNITS[match.group(2)]))
        elif match.group(3) is not None:
            name = match.group(3)
            tokens.append(("num", _CONSTANTS[name]) if name in _CONSTANTS else ("name", name))
        else:
            tokens.append(("op", match.group(4)))
    index = [0]

    def peek():
        return tokens[index[0]] if index[0] < len(tokens) else (None, None)

    def take():
        index[0] += 1
        return tokens[index[0] - 1]

    def factor():
        kind, value = take() if index[0] < len(tokens) else (None, None)
        if kind == "num":
            return value
        if kind == "name":
            return number(resolve(value))
        if (kind, value) == ("op", "-"):
            return -factor()
        if (kind, value) == ("op", "("):
            result = expr()
            if take() != ("op", ")"):
                raise ValueError(f"missing ) in {expression!r}")
            return result
        raise ValueError(f"bad expression {expression!r}")

    def term():
        result = factor()
        while peek() in (("op", "*"), ("op", "/")):
            op = take()[1]
            rhs = factor()
            result = result * rhs if op == "*" else result / rhs
        return result

    def expr():
        result = term()
        while peek() in (("op", "+"), ("op", "-")):
            op = take()[1]
            rhs = term()
            result = result + rhs if op == "+" else result - rhs
        return result

    value = expr()
    if index[0] != len(tokens):
        raise ValueError(f"trailing tokens in {expression!r}")
    return value


def number(value):
    if value is None:
        raise Missing("null")
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (int, float)):
        return value
    raise Missing(f"not a number: {value!r}")


class Subject:
    """The object [expect] paths are resolved in."""

    def __init__(self, result, host, probe_findings, before):
        self.root = dict(result or {})
        self.root["host"] = host
        self.root["probes"] = probe_findings
        if before is not None:
            self.root["before"] = before

    def resolve(self, path):
        parts = path.split(".")
        if len(parts) == 1:
            for section in ("evidence", "usage"):
                inner = self.root.get(section)
                if isinstance(inner, dict) and path in inner:
                    return inner[path]
            if path in self.root:
                return self.root[path]
            if path in self.root["host"]:
                return self.root["host"][path]
            raise Missing(path)
        node = self.root
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise Missing(path)
        return node


_COMPARISON_RE = re.compile(r"\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*$")


def compare(actual, spec, resolve):
    """(ok, text) for one comparison spec against an actual value."""
    if isinstance(spec, list):
        results = [compare(actual, one, resolve) for one in spec]
        return all(ok for ok, _ in results), "; ".join(text for _, text in results)
    if isinstance(spec, bool) or isinstance(spec, (int, float)):
        try:
            ok = number(actual) == number(spec)
        except Missing:
            ok = False
        return ok, f"{actual!r} == {spec!r}"
    match = _COMPARISON_RE.match(str(spec))
    if not match:
        return actual == spec, f"{actual!r} == {spec!r}"
    op, rhs_text = match.groups()
    try:
        lhs = number(actual)
    except Missing:
        return False, f"{actual!r} {op} {rhs_text} (not a number)"
    try:
        rhs = evaluate(rhs_text, resolve)
    except Missing as exc:
        return False, f"{actual!r} {op} {rhs_text} (missing {exc})"
    ok = {"==": lhs == rhs, "!=": lhs != rhs, "<=": lhs <= rhs, ">=": lhs >= rhs,
          "<": lhs < rhs, ">": lhs > rhs}[op]
    shown = rhs_text if re.fullmatch(r"[\d.KMG]+", rhs_text) else f"{rhs_text} (={rhs:g})"
    return ok, f"{actual!r} {op} {shown}"


def rewrite_upper_bounds(spec, rewrite):
    """spec with the right-hand side of its upper bounds ("<=N", "<N") rewritten; others as
    they are."""
    if isinstance(spec, list):
        return [rewrite_upper_bounds(one, rewrite) for one in spec]
    match = _COMPARISON_RE.match(str(spec)) if isinstance(spec, str) else None
    if not match or match.group(1) not in ("<=", "<"):
        return spec
    return f"{match.group(1)}{rewrite(match.group(2))}"


def scaled_upper_bound(spec, scale):
    """spec with its upper bounds multiplied by scale."""
    return spec if scale == 1.0 else rewrite_upper_bounds(spec, lambda rhs: f"({rhs})*{scale:g}")


# ---------------------------------------------------------------------------------------------
# declarations


class DeclarationError(Exception):
    pass


def split_cells(path):
    """A session payload's cells: its file cut at lines `# %%` (the percent format of Jupytext and
    editors; a comment in Python and bash). A marker line may set the cell's run fields:
    `# %% timeout_ms=1500`. What comes before the first marker is the file's header, not run."""
    with open(path, encoding="utf-8") as f:
        parts = re.split(r"^# %%([^\n]*)\n?", f.read(), flags=re.M)
    cells = []
    for fields, code in zip(parts[1::2], parts[2::2]):
        cell = {"code": code}
        for item in fields.split():
            key, _, value = item.partition("=")
            if key not in CELL_FIELDS or not value.isdigit():
                raise DeclarationError(f"{path}: cell {len(cells) + 1}: {item!r} is not one of "
                                       f"{', '.join(f + '=N' for f in CELL_FIELDS)}")
            cell[key] = int(value)
        cells.append(cell)
    if not cells:
        raise DeclarationError(f"{path}: a session payload needs cells (lines `# %%`)")
    return cells


class Payload:
    def __init__(self, toml_path):
        self.toml_path = toml_path
        self.dir = os.path.dirname(toml_path)
        with open(toml_path, "rb") as f:
            decl = tomllib.load(f)
        self.decl = decl
        self.warnings = []
        self.name = decl.get("name") or os.path.splitext(os.path.basename(toml_path))[0]
        self.klass = decl.get("class") or os.path.basename(self.dir)
        unknown = set(decl) - KNOWN_FIELDS
        if unknown:
            self.warnings.append(f"unknown fields {sorted(unknown)}")
        for field in ("name", "class", "language", "file", "expect", "control"):
            if field not in decl:
                raise DeclarationError(f"{toml_path}: missing {field}")
        if decl["language"] not in LANGUAGES:
            raise DeclarationError(f"{toml_path}: language must be one of {LANGUAGES}")
        self.session = bool(decl.get("session", False))
        if self.session and decl["language"] not in SESSION_LANGUAGES:
            raise DeclarationError(f"{toml_path}: a session runs {' or '.join(SESSION_LANGUAGES)}")
        if self.klass != os.path.basename(self.dir):
            self.warnings.append(f"class {self.klass!r} but directory {os.path.basename(self.dir)!r}")
        self.description = decl.get("description", "")
        self.language = decl["language"]
        self.file = os.path.join(self.dir, decl["file"])
        if not os.path.isfile(self.file):
            raise DeclarationError(f"{toml_path}: no payload file {decl['file']}")
        self.limits = dict(decl.get("limits", {}))
        self.args = [str(a) for a in decl.get("args", [])]
        self.stdin = decl.get("stdin")
        self.stdin_file = decl.get("stdin_file")
        self.stdin_repeat = int(decl.get("stdin_repeat", 1))
        self.probe_specs = list(decl.get("probes", []))
        self.expect = dict(decl["expect"])
        unknown = set(self.expect) - EXPECT_FIELDS
        if unknown:
            self.warnings.append(f"unknown [expect] fields {sorted(unknown)}")
        self.control = dict(decl["control"])
        unknown = set(self.control) - CONTROL_FIELDS
        if unknown:
            self.warnings.append(f"unknown [control] fields {sorted(unknown)}")
        kind = self.control.get("kind", "")
        if kind not in ("lift", "outside", "no_fail_step") and not kind.startswith("without:"):
            raise DeclarationError(f"{toml_path}: control kind must be lift, outside, "
                                   f"without:<layer> or no_fail_step, not {kind!r}")
        if decl["language"] in SANDBOXD_COMPILED and kind == "outside":
            raise DeclarationError(f"{toml_path}: a payload sandboxd compiles has no outside "
                                   f"control (no compile stage runs outside a sandbox)")
        self.fail_step = decl.get("fail_step")
        if kind == "no_fail_step" and not self.fail_step:
            raise DeclarationError(f"{toml_path}: control no_fail_step needs fail_step")
        if self.control.get("expect_contained", False):
            raise DeclarationError(f"{toml_path}: a control must expect NOT contained")
        self.exclusive = bool(decl.get("exclusive", False))
        self.cflags = [str(f) for f in decl.get("cflags", [])]
        self.files = [os.path.join(self.dir, f) for f in decl.get("files", [])]
        self.host_timeout = decl.get("host_timeout")
        self.before = decl.get("before")
        if self.before is not None:
            for field in ("file", "language"):
                if field not in self.before:
                    raise DeclarationError(f"{toml_path}: [before] needs {field}")
        self.cells = None
        if self.session:
            self.cells = split_cells(self.file)
            if kind not in ("outside", "lift"):
                raise DeclarationError(f"{toml_path}: a session payload's control is outside or "
                                       f"lift (`sandboxd session` has no test hooks)")
            refused = {"args", "stdin", "stdin_file", "files", "cflags", "fail_step",
                       "stdin_repeat"} & set(decl)
            if refused:
                raise DeclarationError(f"{toml_path}: a session payload has no {sorted(refused)}")
            if self.before is not None:
                if self.before["language"] not in SESSION_LANGUAGES:
                    raise DeclarationError(f"{toml_path}: [before] is a session: "
                                           f"{' or '.join(SESSION_LANGUAGES)}")
                self.before = dict(self.before, cells=split_cells(
                    os.path.join(self.dir, self.before["file"])))
        elif self.before is not None and self.before.get("keep_open"):
            raise DeclarationError(f"{toml_path}: [before] keep_open is for session payloads")
        for spec in self.probe_specs:  # fail on a typo now, not mid-run
            probes.make_probe(spec)
        self.without_kernel = dict(decl.get("without_kernel", {}))
        for feature, variant in self.without_kernel.items():
            if feature not in KERNEL_FEATURES:
                raise DeclarationError(f"{toml_path}: without_kernel.{feature}: not one of "
                                       f"{KERNEL_FEATURES}")
            if not isinstance(variant, dict) or not variant.get("reason"):
                raise DeclarationError(f"{toml_path}: without_kernel.{feature} needs a reason")
            unknown = set(variant) - VARIANT_FIELDS
            if unknown:
                self.warnings.append(f"unknown without_kernel.{feature} fields {sorted(unknown)}")
        # By backend name: {"reason", "skip" or "expect"}: how the payload is judged there.
        self.backends = dict(decl.get("backend", {}))
        for name, variant in self.backends.items():
            if name not in OTHER_BACKENDS:
                raise DeclarationError(f"{toml_path}: backend.{name}: not one of {OTHER_BACKENDS}")
            if not isinstance(variant, dict) or not variant.get("reason"):
                raise DeclarationError(f"{toml_path}: backend.{name} needs a reason")
            unknown = set(variant) - BACKEND_FIELDS
            if unknown:
                self.warnings.append(f"unknown backend.{name} fields {sorted(unknown)}")
        self.variants = []  # (feature, reason) that apply on this kernel: apply_kernel()
        self.skip_reason = None
        self.control_skip_reason = None

    def apply_kernel(self, features):
        """Adopts the declared variant of every feature this kernel lacks."""
        for feature, variant in sorted(self.without_kernel.items()):
            if features.get(feature, True):
                continue
            reason = f"no {feature}: {variant['reason']}"
            self.variants.append((feature, variant["reason"]))
            if variant.get("skip"):
                self.skip_reason = reason
            if variant.get("needs"):
                self.control_skip_reason = reason
            self.expect.update(variant.get("expect", {}))
            self.control.update(variant.get("control", {}))


def load_payloads():
    found, errors = [], []
    for root, _, names in os.walk(PAYLOAD_DIR):
        for name in sorted(names):
            if name.endswith(".toml"):
                path = os.path.join(root, name)
                try:
                    found.append(Payload(path))
                except (DeclarationError, probes.ProbeError, tomllib.TOMLDecodeError,
                        OSError, ValueError) as exc:
                    errors.append((path, str(exc)))
    found.sort(key=lambda p: (CLASSES.index(p.klass) if p.klass in CLASSES else 99, p.name))
    return found, errors


# ---------------------------------------------------------------------------------------------
# cgroups the harness owns (supervisor measurement, outside safety)


def cgroup_dir(hierarchy, name):
    """The harness's cgroup `name` in the hierarchy carrying `hierarchy`: on the pure v2 layout
    one directory serves every name."""
    return os.path.join(probes.hierarchy_dir(hierarchy), SAFETY_PARENT, name)


def safety_parents():
    """The harness's parent directory in each hierarchy it uses, each once."""
    return sorted({os.path.join(probes.hierarchy_dir(h), SAFETY_PARENT)
                   for h in ("pids", "memory", "unified")})


def is_unified(path):
    return probes.CGROUP_V2 or f"{os.sep}unified{os.sep}" in path


# The files of a memory cgroup, v2 and v1: the cap (and the swap cap that makes a hog be
# OOM-killed, not swapped), the OOM-kill counter's file, the peak.
MEMORY_FILES = ({"max": "memory.max", "swap": "memory.swap.max", "swap_value": "0",
                 "oom": "memory.events", "peak": "memory.peak"} if probes.CGROUP_V2 else
                {"max": "memory.limit_in_bytes", "swap": "memory.memsw.limit_in_bytes",
                 "swap_value": None, "oom": "memory.oom_control",
                 "peak": "memory.max_usage_in_bytes"})


def enable_v2_controllers(parent):
    """Pure v2: a child has the memory and pids files only when its parent enables them."""
    try:
        wanted = set(read_file(os.path.join(parent, "cgroup.controllers")).split())
        missing = {"memory", "pids"} & wanted - set(
            read_file(os.path.join(parent, "cgroup.subtree_control")).split())
        if missing:
            write_file(os.path.join(parent, "cgroup.subtree_control"),
                       " ".join("+" + c for c in sorted(missing)))
    except OSError:
        pass  # the writes below then fail and say why


# Every cgroup this harness created and has not removed yet: Harness.close() kills and removes
# what an exception or an interruption left behind.
_live_cgroups = set()
_live_cgroups_lock = threading.Lock()


def make_cgroup(hierarchy, name):
    path = cgroup_dir(hierarchy, name)
    with _live_cgroups_lock:
        _live_cgroups.add(path)
    for _ in range(3):  # another harness may remove the shared parent between our two mkdirs
        try:
            os.makedirs(path, exist_ok=True)
            if probes.CGROUP_V2:
                enable_v2_controllers(os.path.dirname(path))
            return path
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=True)
    return path


def remove_live_cgroups():
    with _live_cgroups_lock:
        left = sorted(_live_cgroups)
    for path in left:
        if is_unified(path):
            kill_cgroup(path, [])  # cgroup.kill first: nothing can fork out of it
    kill_cgroup(None, [p for p in left if not is_unified(p)])


def write_file(path, value):
    with open(path, "w", encoding="ascii") as f:
        f.write(str(value))


def read_file(path, default=""):
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return default


def kill_cgroup(unified_path, others):
    """Kill everything in a harness cgroup (cgroup.kill of the unified one, then the v1 ones by
    pid) and remove the directories."""
    paths = list(dict.fromkeys(p for p in [unified_path] + others if p))  # v2: one dir
    if unified_path and os.path.exists(os.path.join(unified_path, "cgroup.kill")):
        try:
            write_file(os.path.join(unified_path, "cgroup.kill"), 1)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = set()
        for path in paths:
            alive.update(probes.cgroup_procs(path))
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.02)
    for path in paths:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
        if not os.path.exists(path):
            with _live_cgroups_lock:
                _live_cgroups.discard(path)


def remove_safety_parents():
    for parent in safety_parents():
        try:
            os.rmdir(parent)
        except OSError:
            pass  # another harness still uses it, or it never existed


# ---------------------------------------------------------------------------------------------
# running


def process_start(pid):
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with its pid,
    it names one process; None when it is gone (or dead, a zombie not reaped yet)."""
    text = read_file(f"/proc/{pid}/stat")
    try:
        fields = text.rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (IndexError, ValueError):
        return None


def slot_of(uid):
    """The slot whose id range (userns.h) holds host uid `uid`, as the cgroup's name."""
    return str((uid - probes.SANDBOX_UID_BASE) // probes.SANDBOX_IDS_PER_SLOT)


def tenant_leftovers(uids):
    """({cgroup path: text}, {pid: text}) of a finished run with host uids `uids` (any sandbox
    when empty): its slot's cgroups and its processes (any id of its range) that no live
    supervisor owns."""
    slots = {slot_of(uid) for uid in uids}
    cgroups = {path: text for path, text in probes.orphan_cgroups(strict=False).items()
               if not slots or os.path.basename(path) in slots}
    processes = {pid: text for pid, text in probes.sandbox_orphans().items()
                 if not uids or re.search(r" uid (\d+) ", text)
                 and slot_of(int(re.search(r" uid (\d+) ", text).group(1))) in slots}
    return cgroups, processes


class RunContext:
    """What probes see about one run."""

    def __init__(self, mode, workdir, token, exclusive):
        self.mode = mode
        self.workdir = workdir
        self.token = token
        self.exclusive = exclusive
        self.outside_leftovers = None
        self.outside_pids = set()  # outside: the main process's pid (setpriv execs in place)


class Outcome:
    def __init__(self):
        self.result = None
        self.host = {}
        self.error = None
        self.raw_stderr = ""

    @property
    def valid(self):
        return self.result is not None and not self.host.get("hung")


class Harness:
    def __init__(self, args):
        self.sandboxd = os.path.abspath(args.sandboxd)
        self.verbose = args.verbose
        self.pooled = not args.no_pooled
        self.pooled_languages = (set(args.pooled_languages.split(","))
                                 if args.pooled_languages else None)
        self.backends = [b for b in (args.backends or "").split(",") if b and b != "native"]
        # By backend: the classes it runs, where it runs a subset (a default run only).
        self.backend_classes = dict(BACKEND_DEFAULT_CLASSES) if args.default_backends else {}
        self.workdir = tempfile.mkdtemp(prefix="sandboxd-hostile-")
        os.chmod(self.workdir, 0o711)  # the outside control's uid must traverse to its own dir
        # In use while this process lives: the leak audit passes over held temp dirs.
        self.workdir_lock = os.open(self.workdir, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(self.workdir_lock, fcntl.LOCK_EX)
        self.counter = 0
        self.counter_lock = threading.Lock()
        self.binaries = {}
        self.compile_lock = threading.Lock()
        self.tag = f"{os.getpid()}"

    def next_id(self, prefix):
        with self.counter_lock:
            self.counter += 1
            return f"{prefix}-{self.tag}-{self.counter}"

    def close(self):
        remove_live_cgroups()
        shutil.rmtree(self.workdir, ignore_errors=True)
        remove_safety_parents()

    # ---- C payloads

    def compile(self, source, cflags):
        key = (source, tuple(cflags))
        with self.compile_lock:
            if key in self.binaries:
                return self.binaries[key]
            stem = os.path.splitext(os.path.basename(source))[0]
            out_dir = os.path.join(self.workdir, "bin", f"{len(self.binaries)}")
            os.makedirs(out_dir)
            binary = os.path.join(out_dir, stem)
            cmd = ["gcc", "-O2", "-w", "-pthread", "-o", binary, source] + cflags + ["-lrt"]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"gcc failed for {source}: {proc.stderr.strip()[:2000]}")
            os.chmod(binary, 0o755)
            self.binaries[key] = binary
            return binary

    # ---- one sandboxed run

    def sandbox_command(self, spec, limits, extra, args, stdin_path):
        if spec.get("cells") is not None:  # the session's limits are in its open line
            return [self.sandboxd, "session"] + extra
        cmd = [self.sandboxd, "run", "--json"]
        for key, value in limits.items():
            cmd += ["--" + key.replace("_", "-"), str(value)]
        cmd += extra
        if stdin_path:
            cmd += ["--stdin", stdin_path]
        for extra_file in spec["files"]:
            cmd += ["--file", extra_file]
        language = spec["language"]
        if language == "c":
            binary = self.compile(spec["file"], spec["cflags"])
            stem = os.path.basename(binary)
            cmd += ["--file", f"{binary}:{stem}", "--lang", "sh",
                    "-c", f'exec ./{stem} "$@"']
        else:
            cmd += ["--lang", language, spec["file"]]
        cmd += ["--"] + args
        return cmd

    def run_sandboxed(self, spec, limits, extra, args, stdin_path, host_timeout):
        outcome = Outcome()
        cmd = self.sandbox_command(spec, limits, extra, args, stdin_path)
        outcome.host["command"] = " ".join(shlex.quote(c) for c in cmd)
        sup_name = self.next_id("sup")
        sup_cgroup = None
        try:
            sup_cgroup = make_cgroup("memory", sup_name)
        except OSError:
            pass
        if sup_cgroup:
            wrapper = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', sup_cgroup]
        else:
            wrapper = []
        session = spec.get("cells") is not None
        started = time.monotonic()
        # A session reads its JSON lines (session_input) on stdin; a run gets --stdin FILE.
        stdin = open(stdin_path, "rb") if session else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(wrapper + cmd, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        finally:
            if session:
                stdin.close()
        hwm = [0]
        done = threading.Event()

        sandbox_uids = set()

        def sample():
            path = f"/proc/{proc.pid}/status"
            children = f"/proc/{proc.pid}/task/{proc.pid}/children"
            while not done.is_set():
                text = read_file(path)
                if not text:
                    break
                match = re.search(r"VmHWM:\s+(\d+) kB", text)
                if match:
                    hwm[0] = max(hwm[0], int(match.group(1)) * 1024)
                if not sandbox_uids:  # the sandbox's host uid names its slot (residue pairs)
                    for child in read_file(children).split():
                        match = re.search(r"Uid:\s+(\d+)", read_file(f"/proc/{child}/status"))
                        if match and int(match.group(1)) >= probes.SANDBOX_UID_BASE:
                            sandbox_uids.add(int(match.group(1)))
                done.wait(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        hung = False
        try:
            stdout, stderr = proc.communicate(timeout=host_timeout)
        except subprocess.TimeoutExpired:
            hung = True
            proc.kill()
            try:
                stdout, stderr = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # something sandboxd started still holds the pipes
                proc.wait()
                stdout, stderr = b"", b""
        wall = time.monotonic() - started
        done.set()
        sampler.join()
        outcome.host.update({"wall_ms": round(wall * 1000, 1), "exit_code": proc.returncode,
                             "hung": hung, "supervisor_vmhwm_bytes": hwm[0],
                             "sandbox_uids": sorted(sandbox_uids)})
        if sup_cgroup:
            peak = read_file(os.path.join(sup_cgroup, MEMORY_FILES["peak"])).strip()
            outcome.host["supervisor_cgroup_peak_bytes"] = int(peak) if peak.isdigit() else None
            kill_cgroup(None, [sup_cgroup])
        outcome.raw_stderr = stderr.decode("utf-8", "replace")
        lines = stdout.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        outcome.host["stdout_lines"] = len(lines)
        body = stdout[:-1] if stdout.endswith(b"\n") else stdout
        outcome.host["raw_stdout_control_bytes"] = sum(
            1 for b in body if b < 0x20 and not (session and b == 0x0A))
        if hung:
            outcome.error = f"sandboxd still running after {host_timeout:.1f}s (killed)"
            return outcome
        if session:
            self.session_result(outcome, lines, proc.returncode)
            return outcome
        try:
            result = json.loads(stdout.decode("utf-8"))
            if not isinstance(result, dict) or "status" not in result:
                raise ValueError("not a result object")
            outcome.result = result
        except (ValueError, UnicodeDecodeError) as exc:
            outcome.error = (f"no JSON result (exit {proc.returncode}): {exc}; stderr: "
                             f"{outcome.raw_stderr.strip()[:500]}")
        return outcome

    # ---- sessions (`sandboxd session`)

    @staticmethod
    def session_input(spec, limits, variables):
        """The JSON lines that drive one session: open, then a run per cell ({variables}
        substituted into its code); end of input ends the session."""
        lines = [{"op": "open", "language": spec["language"], "limits": limits}]
        for cell in spec["cells"]:
            lines.append({"op": "run", "code": substitute(cell["code"], variables),
                          **{k: v for k, v in cell.items() if k != "code"}})
        return "".join(json.dumps(line) + "\n" for line in lines)

    @staticmethod
    def session_result(outcome, lines, exit_code):
        """The judged result of a session: its last run's answer, with every run's answer as
        `cells` (cells.0 is the first); none when the session did not open or answer every op."""
        answers = []
        for line in lines:
            try:
                answers.append(json.loads(line.decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as exc:
                outcome.error = f"a session answer that is not JSON: {exc}: {line[:200]!r}"
                return
        runs = answers[1:]
        if not answers or answers[0].get("ok") is not True or not runs or not all(
                isinstance(r, dict) and "status" in r for r in runs):
            outcome.error = (f"session (exit {exit_code}) did not answer every run: "
                             f"{json.dumps(answers)[:300]}; stderr: "
                             f"{outcome.raw_stderr.strip()[:300]}")
            return
        outcome.result = dict(runs[-1], cells=runs)

    def open_session(self, spec, limits, variables, host_timeout):
        """A session that stays open (a [before] with keep_open): its cells have run when this
        returns; close_session ends it. Returns (process, outcome)."""
        outcome = Outcome()
        cmd = self.sandbox_command(spec, limits, [], [], None)
        outcome.host["command"] = " ".join(shlex.quote(c) for c in cmd)
        text = self.session_input(spec, limits, variables)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        guard = threading.Timer(host_timeout, proc.kill)  # a hung session ends the wait
        guard.start()
        lines = []
        try:
            proc.stdin.write(text.encode())
            proc.stdin.flush()
            for _ in range(len(spec["cells"]) + 1):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip(b"\n"))
        except OSError as exc:
            outcome.error = f"session: {exc}"
        finally:
            guard.cancel()
        if outcome.error is None:
            self.session_result(outcome, lines, None)
        return proc, outcome

    @staticmethod
    def close_session(proc, host_timeout):
        """Ends an open session (end of input); sandboxd's exit code, None when it hung."""
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            return proc.wait(timeout=host_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
        finally:
            proc.stdout.close()

    def run_outside_session(self, spec, limits, variables, ctx, keep_alive=None):
        """A session's cells unsandboxed as uid 65534 in the safety cgroups, one after another in
        one working directory, each its own interpreter process (variables do not carry over;
        files and processes do). A cell past its deadline is interrupted (SIGINT), then killed
        after the session's grace, as `restarted`: a runner without a sandbox reaches only the
        process it started, so what a cell left running stays (ctx.outside_leftovers); kept for
        the caller to kill when keep_alive is a list, as in run_outside."""
        outcome = Outcome()
        run_name = self.next_id("out")
        cwd = os.path.join(self.workdir, run_name)
        os.mkdir(cwd)
        os.chown(cwd, probes.OUTSIDE_UID, probes.OUTSIDE_UID)
        # The cells' files beside the working directory, not in it: in a session the code is
        # no file, and a search of the workspace must not find the token in it.
        cells_dir = cwd + "-cells"
        os.mkdir(cells_dir)
        python = spec["language"] == "python"
        wall_ms = int(limits.get("wall_ms", SESSION_DEFAULT_WALL_MS))
        output_cap = int(limits.get("output_bytes", 1 << 20))
        pids_cg = make_cgroup("pids", run_name)
        mem_cg = make_cgroup("memory", run_name)
        uni_cg = make_cgroup("unified", run_name)
        write_file(os.path.join(pids_cg, "pids.max"), int(limits.get("pids", 64)))
        memory = int(limits.get("memory_mb", 256)) << 20
        write_file(os.path.join(mem_cg, MEMORY_FILES["max"]), memory)
        swap = os.path.join(mem_cg, MEMORY_FILES["swap"])
        if os.path.exists(swap):
            write_file(swap, MEMORY_FILES["swap_value"] or memory)
        script = ('for c in "$1" "$2" "$3"; do echo $$ > "$c/cgroup.procs" || exit 111; done; '
                  'shift 3; exec "$@"')
        env = {"PATH": SANDBOX_ENV_PATH, "HOME": cwd, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        outcome.host["command"] = f"outside session: {len(spec['cells'])} cells in {cwd}"

        def counter(path, pattern):
            match = re.search(pattern, read_file(path))
            return int(match.group(1)) if match else 0

        runs = []
        started = time.monotonic()
        for index, cell in enumerate(spec["cells"], 1):
            name = os.path.join(cells_dir, f"cell-{index}.{'py' if python else 'sh'}")
            with open(name, "w", encoding="utf-8") as f:
                f.write(substitute(cell["code"], variables))
            os.chmod(name, 0o644)
            cmd = (["/bin/sh", "-c", script, "sh", pids_cg, mem_cg, uni_cg] + OUTSIDE_SETPRIV +
                   ["--", "/usr/bin/python3" if python else "/bin/bash", name])
            events = (counter(os.path.join(pids_cg, "pids.events"), r"max (\d+)"),
                      counter(os.path.join(mem_cg, MEMORY_FILES["oom"]), r"oom_kill (\d+)"))
            cell_started = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            ctx.outside_pids.add(proc.pid)
            streams = {"stdout": bytearray(), "stderr": bytearray()}

            def drain(stream, pipe):
                while chunk := pipe.read1(65536):
                    streams[stream] += chunk

            readers = [threading.Thread(target=drain, args=(n, getattr(proc, n)), daemon=True)
                       for n in ("stdout", "stderr")]
            for reader in readers:
                reader.start()
            timed_out = restarted = False
            try:
                proc.wait(timeout=cell.get("timeout_ms", wall_ms) / 1000)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=SESSION_INTERRUPT_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    restarted = True
            total_us = round((time.monotonic() - cell_started) * 1e6)
            for reader in readers:  # a process the cell left may hold its pipes: not waited for
                reader.join(timeout=0.5)
            out, err = (bytes(streams[n]) for n in ("stdout", "stderr"))
            pids_events = counter(os.path.join(pids_cg, "pids.events"), r"max (\d+)") - events[0]
            oom_kills = counter(os.path.join(mem_cg, MEMORY_FILES["oom"]),
                                r"oom_kill (\d+)") - events[1]
            code = proc.returncode
            truncated = {"stdout": len(out) > output_cap, "stderr": len(err) > output_cap}
            status = ("memory_limit" if oom_kills else "timeout" if timed_out else
                      "output_limit" if any(truncated.values()) else
                      "pids_limit" if pids_events else
                      ("error" if python else "exit_nonzero") if code else "ok")
            peak = read_file(os.path.join(mem_cg, MEMORY_FILES["peak"])).strip()
            runs.append({
                "id": f"{run_name}-{index}", "status": status,
                "stdout": out[:output_cap].decode("utf-8", "replace"),
                "stderr": err[:output_cap].decode("utf-8", "replace"), "truncated": truncated,
                "results": [], "error": None, "exit_code": None if python else code,
                "execution_count": index, "restarted": restarted,
                "evidence": {"oom_kills": oom_kills, "pids_max_events": pids_events},
                "usage": {"memory_peak_bytes": int(peak) if peak.isdigit() else None},
                "timing": {"total_us": total_us}, "backend": "outside"})
            if code == 111 and not out:
                kill_cgroup(uni_cg, [pids_cg, mem_cg])
                outcome.error = "outside: could not enter the safety cgroup"
                return outcome
        time.sleep(0.3)  # what the cells started and left running
        table = probes.read_process_table()
        ctx.outside_leftovers = [
            f"pid {pid} uid {table.get(pid, {}).get('uids', ['?'])[0]} comm "
            f"{table.get(pid, {}).get('comm')} state {table.get(pid, {}).get('state')}"
            for pid in probes.cgroup_procs(pids_cg)]
        if keep_alive is not None:
            keep_alive.append((uni_cg, [pids_cg, mem_cg]))
        else:
            kill_cgroup(uni_cg, [pids_cg, mem_cg])
        outcome.result = dict(runs[-1], cells=runs)
        outcome.host.update({"wall_ms": round((time.monotonic() - started) * 1000, 1),
                             "exit_code": 0, "hung": False, "stdout_lines": len(runs) + 1,
                             "raw_stdout_control_bytes": 0})
        return outcome

    # ---- one outside run (the `outside` control)

    def run_outside(self, spec, limits, args, stdin_path, ctx, inherit_fds, keep_alive=None):
        """keep_alive: a list; when given, what the run left running is not killed: its cgroups
        are appended for the caller to kill (kill_cgroup) once it is done with them."""
        outcome = Outcome()
        run_name = self.next_id("out")
        cwd = os.path.join(self.workdir, run_name)
        os.mkdir(cwd)
        language = spec["language"]
        if language == "c":
            binary = self.compile(spec["file"], spec["cflags"])
            stem = os.path.basename(binary)
            shutil.copy2(binary, os.path.join(cwd, stem))
            main, interpreter = "main.sh", ["/bin/sh"]
            with open(os.path.join(cwd, main), "w", encoding="utf-8") as f:
                f.write(f'exec ./{stem} "$@"\n')
        else:
            main = "main.py" if language == "python" else "main.sh"
            interpreter = {"python": ["/usr/bin/python3"], "bash": ["/bin/bash"],
                           "sh": ["/bin/sh"]}[language]
            shutil.copy2(spec["file"], os.path.join(cwd, main))
        for extra_file in spec["files"]:
            shutil.copy2(extra_file, os.path.join(cwd, os.path.basename(extra_file)))
        for root, dirs, names in os.walk(cwd):
            for name in dirs + names:
                os.chown(os.path.join(root, name), probes.OUTSIDE_UID, probes.OUTSIDE_UID)
        os.chown(cwd, probes.OUTSIDE_UID, probes.OUTSIDE_UID)

        timeout = parse_duration(limits.get("timeout", DEFAULT_TIMEOUT_S))
        output_cap = probes.parse_size(limits.get("output", "1M"))
        memory = probes.parse_size(limits.get("memory", "256M"))
        pids = int(limits.get("pids", 64))
        pids_cg = make_cgroup("pids", run_name)
        mem_cg = make_cgroup("memory", run_name)
        uni_cg = make_cgroup("unified", run_name)
        write_file(os.path.join(pids_cg, "pids.max"), pids)
        write_file(os.path.join(mem_cg, MEMORY_FILES["max"]), memory)
        swap = os.path.join(mem_cg, MEMORY_FILES["swap"])
        if os.path.exists(swap):
            write_file(swap, MEMORY_FILES["swap_value"] or memory)
        redirects = " ".join(f"{3 + i}>/dev/null" for i in range(inherit_fds))
        script = ('for c in "$1" "$2" "$3"; do echo $$ > "$c/cgroup.procs" || exit 111; done; '
                  'shift 3; ' + (f"exec {redirects}; " if redirects else "") + 'exec "$@"')
        env = {"PATH": SANDBOX_ENV_PATH, "HOME": cwd, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        cmd = (["/bin/sh", "-c", script, "sh", pids_cg, mem_cg, uni_cg] + OUTSIDE_SETPRIV +
               ["--"] + interpreter + [main] + args)
        outcome.host["command"] = "outside: " + " ".join(shlex.quote(c) for c in cmd)
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        started = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            ctx.outside_pids.add(proc.pid)
        finally:
            if stdin_path:
                stdin.close()
        streams = {"stdout": bytearray(), "stderr": bytearray()}
        truncated = {"stdout": False, "stderr": False}

        def drain(name, pipe):
            # Read to EOF but keep at most the cap, like a bounded supervisor would.
            while True:
                chunk = pipe.read1(65536)
                if not chunk:
                    break
                room = output_cap - len(streams[name])
                if len(chunk) > room:
                    truncated[name] = True
                streams[name] += chunk[:max(room, 0)]

        readers = [threading.Thread(target=drain, args=(n, getattr(proc, n)), daemon=True)
                   for n in ("stdout", "stderr")]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_cgroup(uni_cg, [])  # the deadline: the run is over, nothing is a leftover
            proc.wait()
        wall = time.monotonic() - started
        if not timed_out:
            time.sleep(0.3)  # what the payload started and left running
            table = probes.read_process_table()
            leftovers = []
            for pid in probes.cgroup_procs(pids_cg):
                info = table.get(pid, {})
                leftovers.append(f"pid {pid} uid {info.get('uids', ['?'])[0]} "
                                 f"comm {info.get('comm')} state {info.get('state')}")
            ctx.outside_leftovers = leftovers
        else:
            ctx.outside_leftovers = []
        pids_events = read_file(os.path.join(pids_cg, "pids.events"))
        oom = read_file(os.path.join(mem_cg, MEMORY_FILES["oom"]))
        peak = read_file(os.path.join(mem_cg, MEMORY_FILES["peak"])).strip()
        if keep_alive is not None and not timed_out:
            keep_alive.append((uni_cg, [pids_cg, mem_cg]))
        else:
            kill_cgroup(uni_cg, [pids_cg, mem_cg])
        for reader in readers:
            reader.join(timeout=5)
        match = re.search(r"max (\d+)", pids_events)
        pids_max_events = int(match.group(1)) if match else 0
        match = re.search(r"oom_kill (\d+)", oom)
        oom_kills = int(match.group(1)) if match else 0
        code = proc.returncode
        if code == 111 and not streams["stdout"]:
            outcome.error = "outside: could not enter the safety cgroup"
            return outcome
        if any(truncated.values()):
            status = "output_limit"
        elif timed_out:
            status = "timeout"
        elif oom_kills:
            status = "memory_limit"
        elif pids_max_events:
            status = "pids_limit"
        elif code < 0:
            status = "signaled"
        elif code:
            status = "exit_nonzero"
        else:
            status = "ok"
        outcome.result = {
            "id": run_name, "status": status,
            "exit_code": code if code is not None and code >= 0 and not timed_out else None,
            "signal": -code if code is not None and code < 0 else (9 if timed_out else None),
            "stdout": bytes(streams["stdout"]).decode("utf-8", "replace"),
            "stderr": bytes(streams["stderr"]).decode("utf-8", "replace"),
            "truncated": truncated,
            "usage": {"wall_ms": round(wall * 1000), "memory_peak_bytes":
                      int(peak) if peak.isdigit() else None},
            "evidence": {"oom_kills": oom_kills, "pids_max_events": pids_max_events,
                         "wall_timeout": timed_out, "output_limit": any(truncated.values())},
            "backend": "outside"}
        outcome.host.update({"wall_ms": round(wall * 1000, 1), "exit_code": code,
                             "hung": False, "stdout_lines": 1, "raw_stdout_control_bytes": 0})
        return outcome

    # ---- a payload run or its control, with probes

    def execute(self, payload, mode, limits, extra, args, stdin_text, inherit_fds=0):
        """One judged run (plus its [before] run). Returns (outcome, before_result, probes)."""
        token = secrets.token_hex(12)
        ctx = RunContext(mode, self.workdir, token, payload.exclusive)
        variables = {"token": token, "workdir": self.workdir}
        live = []
        probe_findings, probe_clean = {}, {}
        lingering = []  # outside: cgroups of what the [before] run left running
        peer = None  # a [before] session kept open while the payload runs: (process, pids)
        try:
            for spec in payload.probe_specs:
                probe = probes.make_probe(spec)
                variables.update(probe.setup(ctx))
                live.append(probe)
            before_result = None
            if payload.before is not None:
                before = payload.before
                before_spec = {"file": os.path.join(payload.dir, before["file"]),
                               "language": before["language"], "files": [],
                               "cflags": [str(f) for f in before.get("cflags", [])],
                               "cells": before.get("cells")}
                before_limits = dict(before.get("limits", limits))
                before_args = [substitute(str(a), variables) for a in before.get("args", [])]
                if payload.session:  # the session's JSON lines are its input
                    before_stdin = self.stdin_path(
                        self.session_input(before_spec, before_limits, variables), None,
                        payload, {})
                else:
                    before_stdin = self.stdin_path(before.get("stdin"), None, payload, variables)
                if payload.session and before.get("keep_open"):
                    # Session A stays open (sandbox) or its leftovers alive (outside) while B
                    # runs; the host pids of A's processes that carry the token are recorded
                    # now and looked at again once B has finished (before.open).
                    if mode == "outside":
                        before_outcome = self.run_outside_session(
                            before_spec, before_limits, variables,
                            RunContext(mode, self.workdir, token, payload.exclusive),
                            keep_alive=lingering)
                        proc = None
                    else:
                        proc, before_outcome = self.open_session(
                            before_spec, before_limits, variables,
                            self.host_timeout(payload, before_limits, before_spec))
                    time.sleep(0.2)  # what A's last cell started is up
                    pids = {pid: process_start(pid) for pid in probes.token_processes(token)}
                    peer = (proc, pids)
                    variables["peer_pid"] = str(min(pids)) if pids else "0"
                    between = None
                elif payload.session and mode == "outside":
                    before_ctx = RunContext(mode, self.workdir, token, payload.exclusive)
                    before_outcome = self.run_outside_session(
                        before_spec, before_limits, variables, before_ctx, keep_alive=lingering)
                    left = before_ctx.outside_leftovers or []
                    between = {"sandboxd_cgroups": 0, "sandbox_processes": len(left),
                               "details": left[:8]}
                elif mode == "outside":
                    before_ctx = RunContext(mode, self.workdir, token, payload.exclusive)
                    before_outcome = self.run_outside(before_spec, before_limits, before_args,
                                                      before_stdin, before_ctx, 0,
                                                      keep_alive=lingering)
                    left = before_ctx.outside_leftovers or []
                    between = {"sandboxd_cgroups": 0, "sandbox_processes": len(left),
                               "details": left[:8]}
                else:
                    before_outcome = self.run_sandboxed(
                        before_spec, before_limits, extra, before_args, before_stdin,
                        self.host_timeout(payload, before_limits, before_spec))
                    # Read at once: B would start now. A's host uid (seen while it ran) names
                    # its slot, i.e. its cgroup directories; without it every sandbox counts.
                    # Other live runs' cgroups are owned by their supervisors and do not count;
                    # A's supervisor has exited, so anything of A's does. One re-read 0.2 s
                    # later drops what only looked unowned because it was being born as the
                    # process table was read; a leftover of A's is still there.
                    uids = before_outcome.host.get("sandbox_uids") or []
                    cgroups, processes = tenant_leftovers(uids)
                    if cgroups or processes:
                        time.sleep(0.2)
                        again_c, again_p = tenant_leftovers(uids)
                        cgroups = {k: v for k, v in cgroups.items() if k in again_c}
                        processes = {k: v for k, v in processes.items() if k in again_p}
                    between = {"sandboxd_cgroups": len(cgroups),
                               "sandbox_processes": len(processes), "uids": uids,
                               "details": (sorted(cgroups.values()) +
                                           sorted(processes.values()))[:8]}
                if between is not None:
                    # Processes carrying the token, whoever runs them (a session's daemon).
                    between["token_processes"] = len(probes.token_processes(token))
                before_result = before_outcome.result
                if before_result is None:
                    before_result = {"status": "harness_error", "error": before_outcome.error}
                if between is not None:
                    before_result["between"] = between
            spec = {"file": payload.file, "language": payload.language, "files": payload.files,
                    "cflags": payload.cflags, "cells": payload.cells}
            args = [substitute(a, variables) for a in args]
            stdin_path = self.stdin_path(stdin_text, payload.stdin_file, payload, variables,
                                         payload.stdin_repeat)
            if payload.session and mode == "sandbox":
                stdin_path = self.stdin_path(self.session_input(spec, limits, variables), None,
                                             payload, {})
            if payload.session and mode == "outside":
                # Kept alive until the probes have looked (token_processes_absent).
                outcome = self.run_outside_session(spec, limits, variables, ctx,
                                                   keep_alive=lingering)
            elif mode == "outside":
                outcome = self.run_outside(spec, limits, args, stdin_path, ctx, inherit_fds)
            else:
                outcome = self.run_sandboxed(spec, limits, extra, args, stdin_path,
                                             self.host_timeout(payload, limits, spec))
            if peer is not None:
                # A's processes once B has finished: the same process (pid and start time) alive.
                proc, pids = peer
                alive = [pid for pid, start in pids.items()
                         if start is not None and process_start(pid) == start]
                before_result["open"] = {"seen": len(pids), "alive_after": len(alive),
                                         "pids": sorted(pids)}
                if proc is not None:
                    before_result["open"]["exit_code"] = self.close_session(
                        proc, self.host_timeout(payload, before_limits, before_spec))
                peer = None
            for probe in live:
                clean, findings = probe.check(ctx, outcome.result)
                probe_clean[probe.name] = clean
                probe_findings[probe.name] = findings
            return outcome, before_result, probe_clean, probe_findings
        finally:
            if peer is not None and peer[0] is not None:  # an exception before B finished
                self.close_session(peer[0], 30)
            for unified, others in lingering:
                kill_cgroup(unified, others)
            for probe in live:
                try:
                    probe.cleanup(ctx)
                except Exception as exc:  # noqa: BLE001  (cleanup must try every probe)
                    say(f"warning: cleanup of probe {probe.name} failed: {exc}", err=True)

    def stdin_path(self, text, file_name, payload, variables, repeat=1):
        if file_name:
            return os.path.join(payload.dir, file_name)
        if text is None:
            return None
        path = os.path.join(self.workdir, self.next_id("stdin"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(substitute(str(text), variables) * repeat)
        os.chmod(path, 0o644)
        return path

    @staticmethod
    def host_timeout(payload, limits, spec=None):
        if payload.host_timeout is not None:
            return parse_duration(payload.host_timeout)
        if spec is not None and spec.get("cells") is not None:
            # every cell to its deadline, its interrupt's grace and a restart, and the opening
            wall_ms = int(limits.get("wall_ms", SESSION_DEFAULT_WALL_MS))
            return sum(c.get("timeout_ms", wall_ms) / 1000 + SESSION_INTERRUPT_GRACE_S + 5
                       for c in spec["cells"]) + 20
        return parse_duration(limits.get("timeout", DEFAULT_TIMEOUT_S)) + 20


# ---------------------------------------------------------------------------------------------
# judging


def parse_reports(stdout):
    reports = []
    for line in (stdout or "").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "op" in obj:
            reports.append(obj)
    return reports


def normalise_errno(value):
    if value in (None, "", 0, False):
        return "none"
    return str(value)


def cell_verdicts(result):
    """A session's runs as the report keeps them: their verdict fields, no output."""
    return [{k: run.get(k) for k in ("status", "restarted", "exit_code", "evidence", "usage",
                                     "timing")} for run in result["cells"]]


def judge(payload, outcome, before_result, probe_clean, probe_findings):
    """(contained, reasons, evidence) for one run."""
    reasons = []
    result = outcome.result
    host = dict(outcome.host)
    host.pop("command", None)
    reports = parse_reports(result.get("stdout") if result else "")
    host["reports"] = len(reports)
    if result:
        host["stdout_bytes"] = len((result.get("stdout") or "").encode("utf-8"))
        host["stderr_bytes"] = len((result.get("stderr") or "").encode("utf-8"))
    subject = Subject(result, host, probe_findings, before_result)
    evidence = {"status": result.get("status") if result else None,
                "exit_code": result.get("exit_code") if result else None,
                "signal": result.get("signal") if result else None,
                "evidence": result.get("evidence") if result else None,
                "usage": result.get("usage") if result else None,
                "truncated": result.get("truncated") if result else None,
                # a compile stage's, its output cut (class "compile")
                "compile": ({k: (v[-2000:] if isinstance(v, str) else v)
                             for k, v in result["compile"].items()}
                            if result and result.get("compile") else None),
                "host": host, "probes": probe_findings,
                "probes_clean": probe_clean, "reports": reports[:50],
                # every errno seen per op, over ALL report lines (reports above is cut at 50)
                "report_errnos": {op: sorted({normalise_errno(r.get("errno")) for r in reports
                                              if r.get("op") == op})
                                  for op in payload.expect.get("reports", {})}}
    if result and result.get("error"):
        evidence["error"] = result["error"]
    if result and "cells" in result:  # a session: every run's verdict fields
        evidence["cells"] = cell_verdicts(result)
    if before_result is not None:
        evidence["before"] = {k: before_result.get(k) for k in
                              ("status", "exit_code", "evidence", "usage", "error", "between",
                               "open", "restarted")
                              if k in before_result}
        if "cells" in before_result:
            evidence["before"]["cells"] = cell_verdicts(before_result)
    if not outcome.valid:
        reasons.append(outcome.error or "no result")
        return False, reasons, evidence
    expect = payload.expect
    statuses = expect.get("status")
    if statuses is not None:
        if isinstance(statuses, str):
            statuses = [statuses]
        if result["status"] not in statuses:
            reasons.append(f"status {result['status']} not in {statuses}")
    for path, spec in expect.get("evidence", {}).items():
        if is_host_wall_time(path):
            spec = scaled_upper_bound(spec, HOST_TIME_SCALE)
        try:
            actual = subject.resolve(path)
        except Missing:
            reasons.append(f"{path} missing")
            continue
        try:
            ok, text = compare(actual, spec, subject.resolve)
        except ValueError as exc:
            reasons.append(f"{path}: {exc}")
            continue
        if not ok:
            reasons.append(f"{path}: {text} fails")
    for op, allowed in expect.get("reports", {}).items():
        allowed = [allowed] if isinstance(allowed, str) else list(allowed)
        lines = [r for r in reports if r.get("op") == op]
        if not lines:
            reasons.append(f"no report for op {op}")
            continue
        bad = sorted({normalise_errno(r.get("errno")) for r in lines} - set(allowed))
        if bad:
            reasons.append(f"op {op}: errno {','.join(bad)} not in {allowed}")
    for key, spec in expect.get("report_checks", {}).items():
        op, _, field = key.partition(".")
        lines = [r for r in reports if r.get("op") == op]
        if not lines:
            reasons.append(f"no report for op {op}")
            continue
        for line in lines:
            ok, text = compare(line.get(field), spec, subject.resolve)
            if not ok:
                reasons.append(f"report {op}.{field}: {text} fails")
                break
    for stream in ("stdout", "stderr"):
        text = result.get(stream) or ""
        if f"{stream}_max" in expect and len(text) > expect[f"{stream}_max"]:
            reasons.append(f"{stream} length {len(text)} > {expect[stream + '_max']}")
        if f"{stream}_len" in expect and len(text) != expect[f"{stream}_len"]:
            reasons.append(f"{stream} length {len(text)} != {expect[stream + '_len']}")
        if f"{stream}_match" in expect and not re.fullmatch(expect[f"{stream}_match"], text,
                                                            re.DOTALL):
            reasons.append(f"{stream} does not match {expect[stream + '_match']!r}")
    for path, pattern in expect.get("matches", {}).items():
        try:
            actual = subject.resolve(path)
        except Missing:
            reasons.append(f"{path} missing")
            continue
        if not re.search(pattern, str(actual)):
            reasons.append(f"{path} {str(actual)[:200]!r} does not contain {pattern!r}")
    if "error_match" in expect and not re.fullmatch(expect["error_match"],
                                                    result.get("error") or "", re.DOTALL):
        reasons.append(f"error {result.get('error')!r} does not match {expect['error_match']!r}")
    for needle in expect.get("stdout_absent", []):
        if needle in (result.get("stdout") or "") + (result.get("stderr") or ""):
            reasons.append(f"output contains {needle!r}")
    for name, clean in probe_clean.items():
        if not clean:
            reasons.append(f"probe {name}: {json.dumps(probe_findings[name])[:300]}")
    return not reasons, reasons, evidence


def summarise(payload, evidence):
    parts = [f"status={evidence['status']}"]
    inner = evidence.get("evidence") or {}
    for key in payload.expect.get("evidence", {}):
        value = inner.get(key)
        if value is None:
            try:
                value = Subject({"evidence": inner, "usage": evidence.get("usage") or {},
                                 "truncated": evidence.get("truncated"),
                                 "compile": evidence.get("compile"),
                                 "cells": evidence.get("cells"),
                                 "exit_code": evidence.get("exit_code"),
                                 "signal": evidence.get("signal")},
                                evidence["host"], evidence["probes"],
                                evidence.get("before")).resolve(key)
            except Missing:
                value = None
        label = key.split(".")[-1] if key.startswith(("evidence.", "usage.")) else key
        if key.startswith("before."):  # tenant A's figure beside B's of the same name
            label = "A." + (key[len("before."):] if key.startswith("before.cells.")
                            else key.split(".")[-1])
        parts.append(f"{label}={value}")
    for op in payload.expect.get("reports", {}):
        errnos = (evidence.get("report_errnos") or {}).get(op) or sorted(
            {normalise_errno(r.get("errno")) for r in evidence["reports"] if r.get("op") == op})
        parts.append(f"{op}:{'/'.join(errnos) or '-'}")
    text = " ".join(parts)
    return text if len(text) <= 400 else text[:397] + "..."


# ---------------------------------------------------------------------------------------------
# scheduling


class ExclusiveLock:
    """Many shared holders or one exclusive holder."""

    def __init__(self):
        self.cond = threading.Condition()
        self.shared = 0
        self.exclusive = False
        self.waiting_exclusive = 0

    def acquire(self, exclusive):
        with self.cond:
            if exclusive:
                self.waiting_exclusive += 1
                self.cond.wait_for(lambda: not self.exclusive and self.shared == 0)
                self.waiting_exclusive -= 1
                self.exclusive = True
            else:
                self.cond.wait_for(lambda: not self.exclusive and self.waiting_exclusive == 0)
                self.shared += 1

    def release(self, exclusive):
        with self.cond:
            if exclusive:
                self.exclusive = False
            else:
                self.shared -= 1
            self.cond.notify_all()


def landlock_abi():
    """The kernel's Landlock ABI version, 0 without Landlock."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # landlock_create_ruleset (444 in the generic table x86_64 shares), VERSION flag.
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


# libseccomp's constants (seccomp.h): actions, and the filter attributes set below.
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_FLTATR_CTL_NNP = 3
SCMP_ARCH_X86 = 0x40000003
LANDLOCK_SYSCALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")


def leave_landlock_out():
    """Makes this process and everything it starts (sandboxd, its sandboxes, the outside
    controls) run on a kernel with Landlock left out of its LSM list, as `lsm=` without landlock
    makes it: Landlock's three system calls answer EOPNOTSUPP, which is all a kernel whose Landlock
    is built in but not initialised does differently (security/landlock/syscalls.c checks
    landlock_initialized first), through a seccomp filter on the harness that allows every other
    call, of every architecture. no_new_privs stays unset (root loads the filter with
    CAP_SYS_ADMIN), so a control that lifts no_new_privs still flips. Where the kernel itself has
    no Landlock (the user-mode-linux guest of tests/uml) the calls answer ENOSYS, which sandboxd
    takes the same way. Returns an error message, or None."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as e:
        return f"libseccomp: {e}"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                     ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        return "seccomp_init failed"
    try:
        steps = [("attr no_new_privs", lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)),
                 ("attr bad arch", lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
                                                        SCMP_ACT_ALLOW)),
                 ("arch x86", lib.seccomp_arch_add(ctx, SCMP_ARCH_X86))]
        for name in LANDLOCK_SYSCALLS:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            steps.append((name, lib.seccomp_rule_add(ctx, SCMP_ACT_ERRNO | errno.EOPNOTSUPP,
                                                     number, 0)))
        steps.append(("load", lib.seccomp_load(ctx)))
        for what, rc in steps:
            if rc < 0:
                return f"seccomp {what}: {os.strerror(-rc)}"
        return None
    finally:
        lib.seccomp_release(ctx)


def kernel_runs_int80():
    """Whether `int $0x80` reaches the kernel's i386 table: a C program (gcc, as the C payloads
    are built) makes i386 getpid without any filter. A kernel built without IA32 emulation, or
    booted with ia32_emulation=0 (its /proc/sys/abi/vsyscall32 may still exist), faults it
    with SIGSEGV; user-mode-linux has no such table. Checked by running it, not by a file."""
    source = ('int main(void) { long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) '
              ': "memory"); return r > 0 ? 0 : 1; }\n')
    with tempfile.TemporaryDirectory(prefix="hostile-int80-") as tmp:
        exe = os.path.join(tmp, "int80")
        built = subprocess.run(["gcc", "-x", "c", "-", "-o", exe], input=source, text=True,
                               capture_output=True, check=False)
        if built.returncode != 0:
            return False
        return subprocess.run([exe], check=False).returncode == 0


def tmpfs_has_user_xattrs():
    try:
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="hostile-xattr-") as f:
            os.setxattr(f.name, "user.probe", b"1")
        return True
    except OSError:
        return False


def kernel_features():
    """What without_kernel declarations ask about this kernel."""
    abi = landlock_abi()
    return {
        "landlock": abi >= 1,
        "landlock_scope": abi >= 6,
        "ia32": kernel_runs_int80(),
        "tmpfs_user_xattr": tmpfs_has_user_xattrs(),
    }


def pool_eligible(payload, languages=None):
    """Whether `sandboxd run --pooled` accepts the payload's run (sbx_pool_request_eligible): a
    program at the pool's disk size, with no setup step forced to fail. Python's entries wait in
    its loader; every other language's in an exec entry, whose init starts the program.
    languages: the payload languages to run pooled (--pooled-languages), None for all."""
    return (not payload.fail_step and not payload.session and "disk" not in payload.limits
            and payload.language not in SANDBOXD_COMPILED
            and (languages is None or payload.language in languages))


# `sandboxd run` through a pool entry forked from a template (python on the native backend).
TEMPLATE_FLAGS = ["--pooled", "--template"]


def template_eligible(payload, languages=None):
    """Whether the payload also runs on the template path: a pool-eligible python payload."""
    return payload.language == "python" and pool_eligible(payload, languages)


def scaled_deadline(payload, limits):
    """limits with the deadline scaled by HOST_TIME_SCALE when the payload must not time out (a
    session's cells keep theirs: their deadlines are what the session class tests)."""
    statuses = payload.expect.get("status") or []
    if isinstance(statuses, str):
        statuses = [statuses]
    if HOST_TIME_SCALE == 1.0 or payload.session or not statuses or "timeout" in statuses:
        return limits
    deadline_s = parse_duration(limits.get("timeout", DEFAULT_TIMEOUT_S)) * HOST_TIME_SCALE
    return dict(limits, timeout=f"{round(deadline_s * 1000)}ms")


def backend_eligible(payload, backend, classes=None):
    """Whether the payload runs on backend too, and why not: a session and a setup step forced
    to fail (the native backend's steps) are the native backend's alone today, and uml has no
    compile stage (sbx_backend_runs_language); a payload may say it cannot apply
    ([backend.NAME] skip); classes, when given, are the ones that backend runs
    (BACKEND_DEFAULT_CLASSES)."""
    variant = payload.backends.get(backend, {})
    if variant.get("skip"):
        return False, variant["reason"]
    if classes is not None and payload.klass not in classes:
        return False, f"not one of the classes {backend} runs by default ({', '.join(classes)})"
    if payload.session or payload.fail_step:
        return False, "sessions and fail steps are the native backend's alone"
    if payload.language in SANDBOXD_COMPILED and backend == "uml":
        return False, "the uml backend has no compile stage"
    return True, None


# What a backend adds to sandboxd's whole run as the harness sees it (host.*wall_ms), added to
# the upper bounds of a payload's own [expect] when it runs there (a backend's [expect] states its
# bounds whole). gVisor: runsc's start-up comes before the program's deadline starts (1.4 s cold,
# 1.7 s through a pool entry, alone); beside two other payloads in make test, runs with a 1 s
# deadline took 2.6 s through a pool entry (sigstop_self_sh), 2.58 s cold (block_futex_c) and
# 2.80 s pooled (block_sleep_sh), over their native bound of 2.5 s.
BACKEND_HOST_WALL_ALLOWANCE_MS = {"gvisor": 1500}


def is_host_wall_time(path):
    """Whether an evidence path is sandboxd's whole run as the harness saw it (host.*wall_ms)."""
    return path.startswith("host.") and path.endswith("wall_ms")


def judged_on(payload, backend):
    """The payload as run and judged on backend: its limits, args and [expect] with the
    backend's replacements, and its own host wall-time bounds with the backend's allowance."""
    variant = payload.backends.get(backend, {})
    allowance = BACKEND_HOST_WALL_ALLOWANCE_MS.get(backend, 0)
    judged = copy.copy(payload)
    own = dict(payload.expect)
    if allowance and "evidence" in own:
        own["evidence"] = {
            path: rewrite_upper_bounds(spec, lambda rhs: f"({rhs})+{allowance}")
            if is_host_wall_time(path) else spec
            for path, spec in own["evidence"].items()}
    judged.expect = dict(own, **variant.get("expect", {}))
    judged.limits = dict(payload.limits, **variant.get("limits", {}))
    judged.args = [str(a) for a in variant.get("args", payload.args)]
    return judged


def run_payload(harness, payload, with_control, lock):
    entry = {"name": payload.name, "class": payload.klass, "backend": "native",
             "description": payload.description, "language": payload.language,
             "control_kind": payload.control.get("kind"),
             "without_kernel": [{"feature": f, "reason": r} for f, r in payload.variants]}
    if payload.skip_reason:
        entry.update({"skipped": payload.skip_reason, "contained": None, "control_flipped": None,
                      "passed": True, "duration_s": 0})
        say(f"{payload.klass:<11} {payload.name:<28} SKIP      {payload.skip_reason}")
        return entry
    lock.acquire(payload.exclusive)
    started = time.monotonic()
    try:
        fail_step = ["--test-fail-step", payload.fail_step] if payload.fail_step else []
        limits = scaled_deadline(payload, payload.limits)
        outcome, before, clean, findings = harness.execute(
            payload, "sandbox", limits, fail_step, payload.args, payload.stdin)
        contained, reasons, evidence = judge(payload, outcome, before, clean, findings)
        entry.update({"contained": contained, "reasons": reasons, "evidence": evidence,
                      "command": outcome.host.get("command"), "paths": ["cold"]})

        def run_path(path, judged, flags, **extra):
            """The payload again on another path (flags), judged by judged's declaration; a
            path that does not contain it makes the whole entry not contained."""
            p_outcome, p_before, p_clean, p_findings = harness.execute(
                payload, "sandbox", scaled_deadline(judged, judged.limits), flags, judged.args,
                payload.stdin)
            p_contained, p_reasons, p_evidence = judge(judged, p_outcome, p_before, p_clean,
                                                       p_findings)
            entry["paths"].append(path)
            entry[path] = {"contained": p_contained, "reasons": p_reasons,
                           "evidence": p_evidence, "command": p_outcome.host.get("command"),
                           **extra}
            if not p_contained:
                entry["contained"] = False
                entry["reasons"] = entry["reasons"] + [f"{path}: {r}" for r in p_reasons]

        # The service's warm paths, judged the same: a pre-started sandbox (pooled) and, for
        # python, one whose init and program are forks of a template interpreter (DESIGN.md
        # "Warm pools: templates").
        if harness.pooled and pool_eligible(payload, harness.pooled_languages):
            run_path("pooled", payload, ["--pooled"])
        if harness.pooled and template_eligible(payload, harness.pooled_languages):
            run_path("template", payload, TEMPLATE_FLAGS)
        for backend in harness.backends:
            eligible, why_not = backend_eligible(payload, backend,
                                                 harness.backend_classes.get(backend))
            if not eligible:
                entry.setdefault("backends_skipped", {})[backend] = why_not
                continue
            # The same payload on another isolation boundary, cold and (where that backend has
            # entries for the language) pooled: a disagreement is a finding.
            judged = judged_on(payload, backend)
            variant = payload.backends.get(backend, {}).get("reason")
            run_path(backend, judged, ["--backend", backend], variant=variant)
            if (harness.pooled and pool_eligible(payload, harness.pooled_languages)
                    and payload.language in BACKEND_POOLED_LANGUAGES.get(backend, ())
                    and (backend != "uml" or probes.parse_size(
                        judged.limits.get("memory", "256M")) <= UML_POOL_MEMORY)
                    and (backend != "gvisor" or probes.parse_size(
                        judged.limits.get("memory", "256M")) >= GVISOR_POOL_MIN_MEMORY)):
                run_path(f"{backend}-pooled", judged, ["--backend", backend, "--pooled"],
                         variant=variant)
        if harness.verbose and outcome.result:
            entry["result"] = outcome.result
        if with_control and payload.control_skip_reason:
            entry["control_flipped"] = None
            entry["control_skipped"] = payload.control_skip_reason
        elif with_control:
            control = payload.control
            kind = control["kind"]
            limits = dict(payload.limits)
            limits.update(control.get("limits", {}))
            limits = scaled_deadline(payload, limits)
            args = [str(a) for a in control.get("args", payload.args)]
            stdin = control.get("stdin", payload.stdin)
            if kind == "outside":
                c_outcome, c_before, c_clean, c_findings = harness.execute(
                    payload, "outside", limits, [], args, stdin,
                    int(control.get("inherit_fds", 0)))
            else:
                extra = ["--test-without", kind.split(":", 1)[1]] if kind.startswith(
                    "without:") else []
                if kind != "no_fail_step":  # that control is exactly the run without it
                    extra = fail_step + extra
                c_outcome, c_before, c_clean, c_findings = harness.execute(
                    payload, "sandbox", limits, extra, args, stdin)
            c_contained, c_reasons, c_evidence = judge(payload, c_outcome, c_before, c_clean,
                                                       c_findings)
            statuses = payload.expect.get("status") or []
            # A control that sandboxd failed to run (internal_error), or whose session cell
            # raised (error: the payload itself broke, as on a read-only /var/tmp), shows
            # nothing about the layer it lifts: invalid unless that status is expected.
            valid = c_outcome.valid and not (
                c_outcome.result.get("status") in ("internal_error", "error")
                and c_outcome.result.get("status") not in statuses)
            entry["control_flipped"] = valid and not c_contained
            entry["control"] = {"contained": c_contained, "valid": valid,
                                "why_not_contained": c_reasons, "evidence": c_evidence,
                                "command": c_outcome.host.get("command")}
            if not valid:
                entry["control"]["invalid"] = c_outcome.error or (
                    f"status internal_error: {c_outcome.result.get('error')}")
            # A layer's control on the template path too: the same layer lifted in a forked
            # entry (it carries the run's test hooks) must flip the verdict there as well.
            if kind.startswith("without:") and "template" in entry["paths"]:
                t_outcome, t_before, t_clean, t_findings = harness.execute(
                    payload, "sandbox", limits, TEMPLATE_FLAGS + extra, args, stdin)
                t_contained, t_reasons, _ = judge(payload, t_outcome, t_before, t_clean,
                                                  t_findings)
                flipped = t_outcome.valid and not t_contained
                entry["template"]["control_flipped"] = flipped
                if not flipped:
                    entry["control_flipped"] = False
                    entry["control"]["invalid"] = (
                        "on the template path the control was judged contained too"
                        if t_outcome.valid else f"on the template path: {t_outcome.error}")
            # The meta-test per backend: a limit's control (lift) must flip on every backend the
            # payload ran on, judged as there. (outside is the same run whatever the backend;
            # without:LAYER and no_fail_step lift the native backend's own layers and steps.)
            for backend in harness.backends:
                if kind != "lift" or backend not in entry["paths"]:
                    continue
                judged = judged_on(payload, backend)
                b_limits = scaled_deadline(judged, dict(judged.limits, **control.get("limits", {})))
                b_args = [str(a) for a in control.get("args", judged.args)]
                b_outcome, b_before, b_clean, b_findings = harness.execute(
                    payload, "sandbox", b_limits, ["--backend", backend], b_args, stdin)
                b_contained, b_reasons, _ = judge(judged, b_outcome, b_before, b_clean,
                                                  b_findings)
                flipped = b_outcome.valid and not b_contained
                entry[backend]["control_flipped"] = flipped
                if not flipped:
                    entry["control_flipped"] = False
                    entry["control"]["invalid"] = (
                        f"on {backend} the control was judged contained too"
                        if b_outcome.valid else f"on {backend}: {b_outcome.error}")
        else:
            entry["control_flipped"] = None
    except Exception as exc:  # noqa: BLE001  (one broken payload must not stop the suite)
        entry.update({"contained": False, "reasons": [f"harness error: {exc!r}"],
                      "evidence": {}, "control_flipped": False if with_control else None})
    finally:
        lock.release(payload.exclusive)
    entry["duration_s"] = round(time.monotonic() - started, 2)
    entry["passed"] = entry["contained"] and (entry["control_flipped"] is not False)
    verdict = "CONTAINED" if entry["contained"] else "ESCAPED"
    if entry.get("control_skipped"):
        control_text = "control=skipped (needs a layer this kernel lacks)"
    elif entry["control_flipped"] is None:
        control_text = "control=skipped"
    else:
        control_text = "control=" + ("flipped" if entry["control_flipped"] else "NOT-FLIPPED")
    summary = summarise(payload, entry["evidence"]) if entry.get("evidence") else ""
    for path in entry.get("paths", []):
        if path not in ("cold", "pooled") and (
                path != "template" or entry[path].get("control_flipped") is not None):
            control_text += f"  {path}=" + ("agrees" if entry[path]["contained"] else "DISAGREES")
            if entry[path].get("control_flipped") is not None:
                control_text += ",control=" + ("flipped" if entry[path]["control_flipped"]
                                               else "NOT-FLIPPED")
    line = f"{payload.klass:<11} {payload.name:<28} {verdict:<9} {summary}  {control_text}" \
           f"  ({entry['duration_s']}s)"
    for feature, reason in payload.variants:
        line += f"\n    judged without {feature}: {reason}"
    if not entry["contained"]:
        line += "\n    why: " + "; ".join(entry["reasons"])
    if entry["control_flipped"] is False:
        control = entry.get("control", {})
        why = control.get("invalid") or "control run was judged contained too"
        line += f"\n    control ({payload.control.get('kind')}): {why}"
        if control.get("command"):
            line += f"\n    control command: {control['command']}"
    say(line)
    return entry


# ---------------------------------------------------------------------------------------------
# the leak audit after the suite


def leak_audit(start_mounts, start_loops):
    problems = []
    orphans = probes.persistent(probes.sandbox_orphans, set())
    problems += [f"process {v}" for v in orphans.values()]
    cgroups = probes.persistent(lambda: probes.orphan_cgroups(strict=False), set())
    problems += [f"cgroup {v}" for v in cgroups.values()]
    for parent in safety_parents():
        mine = [n for n in (os.listdir(parent) if os.path.isdir(parent) else [])
                if f"-{os.getpid()}-" in n]
        problems += [f"harness cgroup {parent}/{n}" for n in mine]
    mounts = probes.MountinfoUnchanged.snapshot()
    # A leak is a mount that appeared; one that disappeared is someone else's doing on this host
    # (per-run removals are judged by the mountinfo_unchanged probe).
    problems += [f"mount added {m}" for m in mounts if m not in start_mounts]
    loops = probes.LoopDevicesUnchanged.snapshot()
    problems += [f"loop device {d} -> {f}" for d, f in loops.items() if start_loops.get(d) != f]
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxd", required=True)
    parser.add_argument("--report")
    parser.add_argument("--only", help="NAME[,NAME]: run only these payloads")
    parser.add_argument("--class", dest="klass", help="CLASS[,CLASS]: run only these classes")
    parser.add_argument("--no-pooled", action="store_true",
                        help="skip the second run of Python payloads through a warm-pool entry")
    parser.add_argument("--no-controls", action="store_true",
                        help="skip the controls (quick iteration only; the gate runs them)")
    parser.add_argument("--controls-class", metavar="CLASS[,CLASS]",
                        help="run the controls of these classes only (default: every class's): "
                             "a guest's stage whose other classes' controls ran on the host")
    parser.add_argument("-j", type=int, default=2, help="payloads in parallel (default 2)")
    parser.add_argument("--pooled-languages", metavar="LANG[,LANG]",
                        help="run only these languages' payloads pooled too (default: all)")
    parser.add_argument("--backends", default=None, metavar="NAME[,NAME]",
                        help="the backends every eligible payload runs on (default: native, "
                             "gvisor where runsc is installed, and uml where user-mode-linux is, "
                             "for the classes of BACKEND_DEFAULT_CLASSES)")
    parser.add_argument("--host-time-scale", type=float, default=1.0,
                        help="multiply the upper bounds on host.*wall_ms and the deadline of "
                             "payloads that must not time out (a slow, emulated host; default 1)")
    parser.add_argument("--kernel-without", choices=["landlock"],
                        help="run as on a kernel without this feature: landlock (left out of "
                             "the LSM list; leave_landlock_out)")
    parser.add_argument("--list", action="store_true", help="list the payloads and exit")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="keep the whole result JSON of each run in the report")
    args = parser.parse_args()
    global HOST_TIME_SCALE
    HOST_TIME_SCALE = args.host_time_scale
    args.default_backends = args.backends is None
    if args.backends is None:
        args.backends = "native"
        if os.access(RUNSC, os.X_OK):
            args.backends += ",gvisor"
        else:
            say(f"SKIP the gvisor backend's runs: {RUNSC} is missing (scripts/install-deps.sh "
                f"installs Debian's runsc)")
        if os.access(UML_KERNEL, os.X_OK):
            args.backends += ",uml"
        else:
            say(f"SKIP the uml backend's runs: {UML_KERNEL} is missing (scripts/install-deps.sh "
                f"installs Debian's user-mode-linux)")
    unknown = set(args.backends.split(",")) - {"native", *OTHER_BACKENDS}
    if unknown:
        print(f"harness.py: unknown backend {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("harness.py: must run as root", file=sys.stderr)
        return 2
    if not os.access(args.sandboxd, os.X_OK):
        print(f"harness.py: {args.sandboxd} is not executable", file=sys.stderr)
        return 2

    payloads, errors = load_payloads()
    names = set(args.only.split(",")) if args.only else None
    classes = set(args.klass.split(",")) if args.klass else None
    if names:
        unknown = names - {p.name for p in payloads}
        if unknown:
            print(f"harness.py: no payload named {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    selected = [p for p in payloads if (names is None or p.name in names)
                and (classes is None or p.klass in classes)]
    seen = {}
    for payload in payloads:
        if payload.name in seen:
            errors.append((payload.toml_path, f"duplicate name (also {seen[payload.name]})"))
        seen[payload.name] = payload.toml_path
    if args.list:
        for payload in selected:
            print(f"{payload.klass:<11} {payload.name:<28} {payload.language:<6} "
                  f"control={payload.control.get('kind')}  {payload.description}")
        return 0
    for payload in selected:
        for warning in payload.warnings:
            say(f"warning: {payload.toml_path}: {warning}", err=True)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    if args.kernel_without == "landlock":
        error = leave_landlock_out()
        if error:
            print(f"harness.py: cannot leave Landlock out: {error}", file=sys.stderr)
            return 2
    features = kernel_features()
    say("kernel: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in features.items()))
    for payload in selected:
        payload.apply_kernel(features)
    harness = Harness(args)
    start_mounts = probes.MountinfoUnchanged.snapshot()
    start_loops = probes.LoopDevicesUnchanged.snapshot()
    started = time.monotonic()
    entries = []
    try:
        for path, message in errors:
            say(f"{'declaration':<11} {os.path.relpath(path, HERE):<28} BROKEN    {message}")
            entries.append({"name": os.path.relpath(path, HERE), "class": "declaration",
                            "backend": "native", "contained": False, "evidence": {},
                            "control_flipped": False, "control_kind": None, "passed": False,
                            "reasons": [message]})
        # Exclusive payloads first, then the rest; the lock keeps exclusive ones alone. Of the
        # rest, the compile class first: its toolchains' builds (Go's 20-33 s) are the slowest
        # payloads, and last in the order they kept one or two workers busy after the others had
        # finished (the stage's last 30 s in a run of make test).
        ordered = ([p for p in selected if p.exclusive]
                   + [p for p in selected if not p.exclusive and p.klass == "compile"]
                   + [p for p in selected if not p.exclusive and p.klass != "compile"])
        lock = ExclusiveLock()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j))
        futures = []
        try:
            control_classes = (set(args.controls_class.split(","))
                               if args.controls_class else None)
            futures = [pool.submit(run_payload, harness, p,
                                   not args.no_controls and (control_classes is None
                                                             or p.klass in control_classes),
                                   lock)
                       for p in ordered]
            for future in futures:
                future.result()
        finally:
            # interrupted: drop what has not started, let the running ones finish their cleanup
            pool.shutdown(wait=True, cancel_futures=True)
            entries += [f.result() for f in futures if f.done() and not f.cancelled()]
    except KeyboardInterrupt:
        say("interrupted: cleaning up", err=True)
        entries.append({"name": "interrupted", "class": "harness", "backend": "native",
                        "contained": False, "evidence": {}, "control_flipped": False,
                        "control_kind": None, "passed": False, "reasons": ["interrupted"]})
    finally:
        harness.close()
    problems = leak_audit(start_mounts, start_loops)
    audit = {"name": "leak_audit", "class": "audit", "backend": "native",
             "contained": not problems, "evidence": {"problems": problems},
             "control_flipped": None, "control_kind": None, "passed": not problems}
    say(f"{'audit':<11} {'leak_audit':<28} " + ("CLEAN" if not problems else
                                                  "LEAKED " + "; ".join(problems[:10])))
    entries.append(audit)
    duration = time.monotonic() - started
    if args.report:
        os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(entries, f, indent=1, default=str)
            f.write("\n")
    passed = sum(1 for e in entries if e["passed"])
    failed = len(entries) - passed
    skipped = sum(1 for e in entries if e.get("skipped"))
    variant = sum(1 for e in entries if e.get("without_kernel") and not e.get("skipped"))
    say(f"duration {duration:.1f}s, {len(selected)} payloads, controls "
        f"{'skipped' if args.no_controls else 'run'}"
        f"{' for ' + args.controls_class + ' only' if args.controls_class else ''}")
    for backend in harness.backends:
        ran = [e for e in entries if backend in e.get("paths", [])]
        agree = sum(1 for e in ran if e[backend]["contained"])
        not_run = [e.get("backends_skipped", {}).get(backend) for e in entries
                   if backend not in e.get("paths", []) and e.get("class") != "audit"]
        pending = sum(1 for why in not_run if why and why.startswith("pending"))
        other_classes = sum(1 for why in not_run if why and why.startswith("not one of the"))
        pooled = [e for e in ran if f"{backend}-pooled" in e["paths"]]
        pooled_agree = sum(1 for e in pooled if e[f"{backend}-pooled"]["contained"])
        controls = [e[backend]["control_flipped"] for e in ran
                    if e[backend].get("control_flipped") is not None]
        say(f"{backend}: {len(ran)} payloads run, {agree} agree with the native backend "
            f"({len(pooled)} run pooled too, {pooled_agree} agree there; {len(controls)} lift "
            f"controls run there, {sum(controls)} flipped); "
            f"not run: {pending} pending a fix or an explanation (their [backend.{backend}]), "
            f"{other_classes} of the classes it skips by default, "
            f"{len(not_run) - pending - other_classes} that cannot apply there")
    say(f"{passed} passed ({variant} judged without a kernel feature, {skipped} skipped), "
        f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
