"""Integration tests for `sandboxd run`: the real binary, real sandboxes, as root.

`make test` runs this directory twice: with SANDBOXD=<build>/sandboxd, and with the ASan+UBSan
build and SANDBOXD_SANITIZED=1 (same assertions, only slower). Every test talks to sandboxd through
its command line (--json), exactly as a user would, and asserts on the kernel's evidence in the
result, not just on "it didn't crash".

Helpers offered to the tests (as fixtures):
  run(code, lang="python", *flags, stdin=None, args=(), timeout=60) -> Result (the parsed --json
      dict, plus .rc, the exit code of `sandboxd run`, and .cli_stderr, sandboxd's own stderr)
  cli(*argv, input=None, timeout=60) -> subprocess.CompletedProcess (bytes), for raw invocations
  host -> the leak probes (cgroup_children(), sandbox_processes(), ...) and host facts

Leaks are checked twice: after every test (anything new that a test left behind fails that test)
and once at the end of the session (nothing of sandboxd may be left over at all). A leftover is
what nothing live holds (scripts/leak_audit.py): a concurrent run's live sandboxes are not ours.
"""

import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import leak_audit  # noqa: E402  (scripts/ is not a package)

# Marks every sandboxd this session starts (inherited through the environment), so that the leak
# audit tells them from another run's; `make test` sets one for the whole run.
os.environ.setdefault(leak_audit.TEST_RUN_VARIABLE, uuid.uuid4().hex)
SANDBOXD = os.environ.get("SANDBOXD") or str(REPO / "build" / "sandboxd")
SANITIZED = os.environ.get("SANDBOXD_SANITIZED") == "1"

# userns.h: sandbox slot N maps its ids 0..65535 to host uids from
# SBX_HOST_ID_BASE + N * SBX_HOST_IDS_PER_SLOT on.
SANDBOX_UID_BASE = 2_000_000_000
IDS_PER_SLOT = 65536
CGROUP_ROOT = "/sys/fs/cgroup"
MIB = 1 << 20

# cli.md: the program's environment, exactly.
DOCUMENTED_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/workspace",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
}

# cli.md: the built-in limits (the standard free tier's ceilings are at or above every one).
BUILTIN_LIMITS = {
    "wall_ms": 10000,
    "cpu_ms": 10000,
    "memory_mb": 256,
    "pids": 64,
    "disk_mb": 64,
    "output_bytes": 1048576,
    "open_files": 1024,
    "cpus": 1.0,
}

# What a sanitizer prints when it finds something; sandboxd's own stderr must never contain it.
SANITIZER_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "ERROR: UndefinedBehaviorSanitizer",
    "runtime error:",
)


def pytest_report_header(config):
    return f"sandboxd: {SANDBOXD} (sanitized: {SANITIZED})"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SANDBOXD_TEST_STORE"):
        skip = pytest.mark.skip(reason="reads or alters a node's own SQLite store file, and "
                                "SANDBOXD_TEST_STORE puts the store in PostgreSQL")
        for item in items:
            if "own_store" in item.keywords:
                item.add_marker(skip)


def pytest_sessionstart(session):
    if os.geteuid() != 0:
        pytest.exit("the integration tests create real sandboxes and must run as root", 2)
    if not os.access(SANDBOXD, os.X_OK):
        pytest.exit(f"no sandboxd binary at {SANDBOXD} (set SANDBOXD=/abs/path/to/sandboxd)", 2)


# --- host probes -------------------------------------------------------------------------------


def cgroup_children():
    """Every directory below a `sandboxd` parent in any cgroup hierarchy. The parents themselves
    are sandboxd's own and may stay; a child is a sandbox's cgroup."""
    found = []

    def walk(path, depth):
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name == "sandboxd":
                for dirpath, dirnames, _ in os.walk(entry.path):
                    found.extend(os.path.join(dirpath, d) for d in dirnames)
            elif depth < 6:
                walk(entry.path, depth + 1)

    walk(CGROUP_ROOT, 1)
    return sorted(found)


def leftover_cgroups():
    """The sandbox cgroups no live sandboxd holds (scripts/leak_audit.py): what an ended run left
    behind. A sandbox running meanwhile, another test stage's (scripts/test.sh runs two at
    once), holds its slot and is not one."""
    return sorted(k for k, v in leak_audit.leftovers().items() if v.startswith("cgroup "))


def sandbox_processes():
    """(pid, name, uids) of every process running as a sandbox host uid (any of real, effective,
    saved, fs), zombies included: an unreaped sandbox process is a leak too."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        name = re.search(r"^Name:\s*(.*)$", status, re.M)
        uids = re.search(r"^Uid:\s*(.*)$", status, re.M)
        if not uids:
            continue
        ids = [int(x) for x in uids.group(1).split()]
        if any(i >= SANDBOX_UID_BASE for i in ids):
            found.append((int(pid), name.group(1) if name else "?", tuple(ids)))
    return sorted(found)


def sandboxd_processes():
    """(pid, cmdline) of running sandboxd processes."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if comm == "sandboxd":
            found.append((int(pid), cmdline))
    return sorted(found)


def sandboxd_mounts():
    with open("/proc/self/mountinfo") as f:
        return sorted(line.strip() for line in f if "sandboxd" in line)


def sandboxd_temp_dirs():
    return sorted(str(p) for p in pathlib.Path("/tmp").glob("sandboxd*"))


def processes_with_cmdline(argv):
    """pids whose command line is exactly argv (a list of str)."""
    want = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == want:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def controller_enabled(name):
    """Whether the kernel has the cgroup controller `name` enabled (/proc/cgroups)."""
    try:
        with open("/proc/cgroups") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == name:
                    return fields[3] == "1"
    except OSError:
        pass
    # Pure cgroup v2 kernels may not list it there; ask the unified root.
    try:
        with open(os.path.join(CGROUP_ROOT, "cgroup.controllers")) as f:
            return name in f.read().split()
    except OSError:
        return False


def require_controller(name):
    if not controller_enabled(name):
        pytest.skip(f"this kernel has no enabled cgroup '{name}' controller")


class Host:
    """The probes, for tests that check the host around a run."""

    cgroup_children = staticmethod(cgroup_children)
    leftover_cgroups = staticmethod(leftover_cgroups)
    sandbox_processes = staticmethod(sandbox_processes)
    sandboxd_processes = staticmethod(sandboxd_processes)
    sandboxd_mounts = staticmethod(sandboxd_mounts)
    sandboxd_temp_dirs = staticmethod(sandboxd_temp_dirs)
    processes_with_cmdline = staticmethod(processes_with_cmdline)
    require_controller = staticmethod(require_controller)
    controller_enabled = staticmethod(controller_enabled)


@pytest.fixture
def host():
    return Host


@pytest.fixture(scope="session", autouse=True)
def session_leak_audit():
    """At the end of the session nothing of sandboxd may be left over: no sandbox cgroup or
    process that no live sandboxd holds, no sandboxd process of this run, no mount or temp dir.
    What was left over before the session began (a killed earlier run's) is not this session's."""
    before = leak_audit.leftovers(settle_s=0)
    yield
    leaks = {k: v for k, v in leak_audit.leftovers().items() if k not in before}
    if leaks:
        pytest.fail(f"sandboxd left these behind after the session: {sorted(leaks.values())}")


@pytest.fixture(scope="session", autouse=True)
def shared_store(session_leak_audit):
    """With SANDBOXD_TEST_STORE=postgresql, the PostgreSQL cluster every server's audit store is
    in (serve_helpers.TEST_STORE), started for the session and removed after it."""
    import serve_helpers  # imports this module: not at the top
    if serve_helpers.TEST_STORE != "postgresql":
        yield
        return
    from fleet_helpers import running_postgres
    with running_postgres() as pg:
        serve_helpers.shared_postgres = pg
        try:
            yield
        finally:
            serve_helpers.shared_postgres = None


@pytest.fixture(autouse=True)
def no_new_leaks():
    """Whatever a test's sandboxes leave behind fails that test (not a later one)."""
    before = leak_audit.leftovers(settle_s=0)
    yield
    new = {k: v for k, v in leak_audit.leftovers().items() if k not in before}
    if new:
        pytest.fail(f"this test left sandboxd resources behind: {sorted(new.values())}")


# --- running sandboxd --------------------------------------------------------------------------


def _check_sanitizers(stderr_text, argv):
    for marker in SANITIZER_MARKERS:
        if marker in stderr_text:
            pytest.fail(f"sanitizer report from sandboxd {argv[:4]}...:\n{stderr_text[-6000:]}")


def cli_run(argv, *, input=None, timeout=60, env=None):
    """Runs `sandboxd ARGV...` and returns the CompletedProcess (bytes). A run that outlives
    `timeout` is killed with its whole process group and fails the test."""
    argv = [SANDBOXD, *argv]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"sandboxd did not finish within {timeout}s: {argv}\n"
            f"stderr: {err[-3000:].decode(errors='replace')}"
        )
    _check_sanitizers(err.decode(errors="replace"), argv)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


class Result(dict):
    """The --json result object, with the CLI's exit code (.rc), sandboxd's own stderr
    (.cli_stderr), the raw stdout bytes (.raw) and the command (.argv)."""

    rc: int
    cli_stderr: str
    raw: bytes
    argv: list

    def describe(self):
        keys = ("status", "exit_code", "signal", "error", "truncated", "usage", "evidence")
        lines = [f"sandboxd exit code {self.rc}; argv {self.argv[1:12]}"]
        lines += [f"  {k}: {self.get(k)!r}" for k in keys if k in self]
        lines.append(f"  stdout (tail): {str(self.get('stdout', ''))[-600:]!r}")
        lines.append(f"  stderr (tail): {str(self.get('stderr', ''))[-1200:]!r}")
        lines.append(f"  sandboxd stderr (tail): {self.cli_stderr[-1200:]!r}")
        return "\n".join(lines)

    def expect(self, status, rc=None):
        """Asserts the status (and the CLI exit code), with the whole story on failure."""
        assert self.get("status") == status, f"want status {status}\n{self.describe()}"
        if rc is not None:
            assert self.rc == rc, f"want sandboxd exit code {rc}\n{self.describe()}"


def run_json(argv, *, input=None, timeout=60, env=None):
    proc = cli_run(argv, input=input, timeout=timeout, env=env)
    try:
        doc = json.loads(proc.stdout)
    except ValueError as e:
        pytest.fail(
            f"sandboxd --json did not print one JSON object ({e}); exit code {proc.returncode}\n"
            f"stdout (head): {proc.stdout[:2000]!r}\nstderr (tail): {proc.stderr[-3000:]!r}"
        )
    if not isinstance(doc, dict):
        pytest.fail(f"sandboxd --json printed {type(doc).__name__}, not an object")
    result = Result(doc)
    result.rc = proc.returncode
    result.cli_stderr = proc.stderr.decode(errors="replace")
    result.raw = proc.stdout
    result.argv = proc.args
    return result


@pytest.fixture
def sandboxd_binary():
    return SANDBOXD


@pytest.fixture
def cli():
    def invoke(*argv, input=None, timeout=60, env=None):
        return cli_run(list(argv), input=input, timeout=timeout, env=env)

    return invoke


@pytest.fixture
def run(tmp_path):
    """run(code, lang="python", *flags, stdin=None, args=(), timeout=60, stdin_via="file", env=None)

    Runs `sandboxd run --json [--lang LANG] FLAGS... -c CODE [-- ARGS...]` and returns the Result.
    lang=None leaves the language to sandboxd's default. stdin (bytes or str) is passed as
    `--stdin FILE` (stdin_via="file") or piped into `--stdin -` (stdin_via="pipe")."""
    counter = [0]

    def invoke(code, lang="python", *flags, stdin=None, args=(), timeout=60, stdin_via="file",
               env=None):
        argv = ["run", "--json"]
        if lang is not None:
            argv += ["--lang", lang]
        argv += list(flags)
        pipe_input = None
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            if stdin_via == "file":
                counter[0] += 1
                path = tmp_path / f"stdin-{counter[0]}"
                path.write_bytes(data)
                argv += ["--stdin", str(path)]
            elif stdin_via == "pipe":
                argv += ["--stdin", "-"]
                pipe_input = data
            else:
                raise ValueError(stdin_via)
        argv += ["-c", code]
        if args:
            argv += ["--", *args]
        return run_json(argv, input=pipe_input, timeout=timeout, env=env)

    return invoke


@pytest.fixture
def run_file(tmp_path):
    """run_file(name, text, *flags, args=()) -> Result: writes text to tmp_path/name and runs
    `sandboxd run --json FLAGS... FILE [-- ARGS...]`."""

    def invoke(name, text, *flags, args=(), timeout=60):
        path = tmp_path / name
        path.write_text(text)
        argv = ["run", "--json", *flags, str(path)]
        if args:
            argv += ["--", *args]
        return run_json(argv, timeout=timeout)

    return invoke


@pytest.fixture
def canary_dir():
    """A directory on the host, outside anything a sandbox binds, holding a secret token."""
    token = "CANARY-" + secrets.token_hex(16)
    path = tempfile.mkdtemp(prefix=f"canary-{secrets.token_hex(4)}-", dir="/root")
    with open(os.path.join(path, "secret.txt"), "w") as f:
        f.write(token + "\n")
    try:
        yield pathlib.Path(path), token
    finally:
        shutil.rmtree(path, ignore_errors=True)
