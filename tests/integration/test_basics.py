"""What a program sees and what comes back: output, exit codes, signals, arguments, stdin,
languages, the environment, and the shape of the --json result."""

import hashlib
import json
import os
import re
import signal
import subprocess

from conftest import BUILTIN_LIMITS, DOCUMENTED_ENV, IDS_PER_SLOT, MIB, SANDBOX_UID_BASE


# --- output and exit codes ---------------------------------------------------------------------


def test_print_is_ok(run):
    r = run('print("hello from the sandbox")')
    r.expect("ok", rc=0)
    assert r["stdout"] == "hello from the sandbox\n"
    assert r["stderr"] == ""
    assert r["exit_code"] == 0
    assert r["signal"] is None
    assert r["truncated"] == {"stdout": False, "stderr": False}
    assert "error" not in r


def test_exit_code_is_passed_through(run):
    r = run("import sys\nprint('bye')\nsys.exit(3)")
    r.expect("exit_nonzero", rc=3)
    assert r["exit_code"] == 3
    assert r["signal"] is None
    assert r["stdout"] == "bye\n"


def test_exception_exits_1_with_traceback(run):
    r = run("def f():\n    raise ValueError('boom-42')\nf()")
    r.expect("exit_nonzero", rc=1)
    assert r["exit_code"] == 1
    assert "Traceback (most recent call last)" in r["stderr"]
    assert "ValueError: boom-42" in r["stderr"]


def test_killed_by_own_sigterm_is_signaled(run):
    r = run("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n"
            "print('still alive')")
    r.expect("signaled", rc=128 + signal.SIGTERM)
    assert r["signal"] == signal.SIGTERM
    assert r["exit_code"] is None
    assert "still alive" not in r["stdout"]
    assert r["evidence"]["wall_timeout"] is False


def test_segfault_is_signaled(run):
    # A fault the kernel forces: delivered whatever pid the program has inside.
    r = run("import ctypes\nctypes.string_at(0)")
    r.expect("signaled", rc=128 + signal.SIGSEGV)
    assert r["signal"] == signal.SIGSEGV
    assert r["exit_code"] is None


def test_stderr_is_captured_separately(run):
    r = run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    r.expect("ok", rc=0)
    assert r["stdout"] == "out\n"
    assert r["stderr"] == "err\n"


def test_without_json_output_passes_through_with_summary(cli):
    p = cli("run", "-c", "import sys\nprint('plain out')\nprint('plain err', file=sys.stderr)")
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"plain out\n"
    lines = p.stderr.decode().splitlines()
    assert "plain err" in lines
    assert re.match(r"^sandboxd: status=ok exit_code=0 ", lines[-1]), lines[-1]
    for field in ("wall=", "cpu=", "memory_peak=", "setup="):
        assert field in lines[-1], lines[-1]


def test_without_json_exit_code_and_summary(cli):
    p = cli("run", "-c", "import sys; sys.exit(7)")
    assert p.returncode == 7
    assert p.stdout == b""
    last = p.stderr.decode().splitlines()[-1]
    assert re.match(r"^sandboxd: status=exit_nonzero exit_code=7 ", last), last


def test_json_is_the_only_thing_on_stdout(cli):
    p = cli("run", "--json", "-c", "print('x' * 10)")
    assert p.returncode == 0
    doc = json.loads(p.stdout)
    assert doc["stdout"] == "x" * 10 + "\n"
    assert p.stdout.strip().startswith(b"{") and p.stdout.strip().endswith(b"}")


# --- arguments and stdin -----------------------------------------------------------------------


def test_args_reach_python(run):
    args = ("one", "two words", "", "--flag", "ünïcode", "$HOME")
    r = run("import sys, json\nprint(json.dumps(sys.argv))", args=args)
    r.expect("ok", rc=0)
    argv = json.loads(r["stdout"])
    assert argv[0].endswith("main.py"), argv
    assert argv[1:] == list(args)


def test_args_reach_bash(run):
    r = run('printf "%s|" "$0" "$@"; echo', "bash", args=("a b", "", "c"))
    r.expect("ok", rc=0)
    fields = r["stdout"].rstrip("\n").split("|")
    assert fields[0].endswith("main.sh"), fields
    assert fields[1:4] == ["a b", "", "c"]


STDIN_ECHO = (
    "import sys, hashlib\n"
    "data = sys.stdin.buffer.read()\n"
    "print(len(data), hashlib.sha256(data).hexdigest())\n"
)


def _digest(data):
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def test_stdin_defaults_to_empty(run):
    r = run(STDIN_ECHO, timeout=30)
    r.expect("ok", rc=0)
    assert r["stdout"] == _digest(b"")


def test_stdin_from_file(run):
    data = b"line 1\nline 2\n\x00\xff binary too\n"
    r = run(STDIN_ECHO, stdin=data)
    r.expect("ok", rc=0)
    assert r["stdout"] == _digest(data)


def test_stdin_from_sandboxd_stdin(run):
    data = b"piped through sandboxd's own stdin\n" * 100
    r = run(STDIN_ECHO, stdin=data, stdin_via="pipe")
    r.expect("ok", rc=0)
    assert r["stdout"] == _digest(data)


def test_large_stdin_does_not_deadlock(run):
    # Larger than any pipe buffer, and the program writes output while stdin is being fed.
    data = os.urandom(3 * MIB)
    code = (
        "import sys, hashlib\n"
        "h = hashlib.sha256(); n = 0\n"
        "while True:\n"
        "    chunk = sys.stdin.buffer.read1(65536)\n"
        "    if not chunk: break\n"
        "    h.update(chunk); n += len(chunk)\n"
        "    print('.', end='', flush=True)\n"
        "print()\n"
        "print(n, h.hexdigest())\n"
    )
    r = run(code, stdin=data)
    r.expect("ok", rc=0)
    assert r["stdout"].splitlines()[-1] + "\n" == _digest(data)


def test_stdin_in_bash(run):
    r = run("read -r first; echo \"got:$first\"; wc -l", "bash", stdin="alpha\nbeta\ngamma\n")
    r.expect("ok", rc=0)
    assert r["stdout"].split() == ["got:alpha", "2"]


# --- languages and program files ---------------------------------------------------------------


def test_bash_language(run):
    r = run('echo "shell:${BASH_VERSION:+bash}"; exit 5', "bash")
    r.expect("exit_nonzero", rc=5)
    assert r["stdout"] == "shell:bash\n"


def test_sh_language_is_not_bash(run):
    # Debian's /bin/sh is dash: BASH_VERSION is unset there.
    r = run('echo "shell:${BASH_VERSION:-posix}"; echo "$0"', "sh")
    r.expect("ok", rc=0)
    lines = r["stdout"].splitlines()
    assert lines[0] == "shell:posix"
    assert lines[1].endswith("main.sh")


def test_default_language_is_python(run):
    r = run("import sys; print(sys.version_info[0])", None)
    r.expect("ok", rc=0)
    assert r["stdout"] == "3\n"


def test_language_from_py_extension(run_file):
    r = run_file("prog.py", "import sys\nprint('python', sys.argv[1:])\n", args=("x",))
    r.expect("ok", rc=0)
    assert r["stdout"] == "python ['x']\n"


def test_language_from_sh_extension_is_bash(run_file):
    r = run_file("prog.sh", 'echo "bash=${BASH_VERSION:+yes} args=$*"\n', args=("p", "q"))
    r.expect("ok", rc=0)
    assert r["stdout"] == "bash=yes args=p q\n"


def test_unknown_extension_defaults_to_python(run_file):
    r = run_file("prog.txt", "print(6 * 7)\n")
    r.expect("ok", rc=0)
    assert r["stdout"] == "42\n"


def test_lang_flag_overrides_extension(run_file):
    r = run_file("prog.py", 'echo "bash=${BASH_VERSION:+yes}"\n', "--lang", "bash")
    r.expect("ok", rc=0)
    assert r["stdout"] == "bash=yes\n"


def test_file_and_dash_c_run_the_same(run, run_file):
    code = "import sys, os\nprint(os.path.basename(sys.argv[0]), os.getcwd(), sys.argv[1:])\n"
    a = run(code, args=("1", "2"))
    b = run_file("same.py", code, args=("1", "2"))
    a.expect("ok", rc=0)
    b.expect("ok", rc=0)
    assert a["stdout"] == b["stdout"] == "main.py /workspace ['1', '2']\n"


# --- the world inside --------------------------------------------------------------------------


def test_environment_is_exactly_the_documented_one(run):
    # A secret in sandboxd's own environment must not reach the program.
    env = dict(os.environ, SANDBOXD_TEST_SECRET="leak-me-not")
    r = run("import os, json\nprint(json.dumps(dict(os.environ)))", env=env)
    r.expect("ok", rc=0)
    assert json.loads(r["stdout"]) == DOCUMENTED_ENV
    assert "leak-me-not" not in r["stdout"]


def test_cwd_hostname_and_uid(run):
    code = (
        "import os, socket, json\n"
        "print(json.dumps({'cwd': os.getcwd(), 'host': socket.gethostname(),\n"
        "  'uid': os.getuid(), 'euid': os.geteuid(),\n"
        "  'uid_map': open('/proc/self/uid_map').read().split(),\n"
        "  'gid_map': open('/proc/self/gid_map').read().split(),\n"
        "  'setgroups': open('/proc/self/setgroups').read().strip()}))\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    assert got["cwd"] == "/workspace"
    assert got["host"] == "sandbox"
    assert got["uid"] == 0 and got["euid"] == 0
    # One line "0 <first host uid> 65536": ids 0..65535 inside are a range of unprivileged uids
    # outside, the slot's own (userns.h), starting at a multiple of the range's size.
    inside, outside, count = (int(x) for x in got["uid_map"])
    assert (inside, count) == (0, IDS_PER_SLOT)
    assert outside >= SANDBOX_UID_BASE and (outside - SANDBOX_UID_BASE) % IDS_PER_SLOT == 0
    g_inside, g_outside, g_count = (int(x) for x in got["gid_map"])
    assert (g_inside, g_count) == (0, IDS_PER_SLOT)
    assert g_outside == outside
    assert got["setgroups"] == "deny"


def test_concurrent_sandboxes_get_distinct_host_uids(sandboxd_binary):
    # Three live sandboxes at once: their host uid ranges must not overlap (one per slot).
    code = "import time\nprint(open('/proc/self/uid_map').read().split()[1], flush=True)\n" \
           "time.sleep(1)"
    procs = [
        subprocess.Popen([sandboxd_binary, "run", "--json", "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        for _ in range(3)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    uids = [int(r["stdout"]) for r in results]
    assert all(u >= SANDBOX_UID_BASE for u in uids), uids
    ranges = sorted(uids)
    assert all(b - a >= IDS_PER_SLOT for a, b in zip(ranges, ranges[1:])), \
        f"live sandboxes' uid ranges overlap: {uids}"


def test_workspace_is_writable_and_holds_the_program(run):
    code = (
        "import os\n"
        "print(sorted(os.listdir('/workspace')))\n"
        "open('/workspace/out.txt', 'w').write('data')\n"
        "open('/tmp/t.txt', 'w').write('tmp')\n"
        "print(open('/workspace/out.txt').read(), open('/tmp/t.txt').read())\n"
    )
    r = run(code)
    r.expect("ok", rc=0)
    assert r["stdout"] == "['main.py']\ndata tmp\n"


def test_rlimits_inside(run):
    code = (
        "import resource as r, json\n"
        "print(json.dumps({n: r.getrlimit(getattr(r, n)) for n in\n"
        "  ('RLIMIT_NOFILE', 'RLIMIT_CORE', 'RLIMIT_CPU', 'RLIMIT_FSIZE')}))\n"
    )
    r = run(code, "python", "--open-files", "100", "--cpu-time", "2s")
    r.expect("ok", rc=0)
    got = json.loads(r["stdout"])
    # Hard limits matter: without CAP_SYS_RESOURCE the program can still raise a soft limit
    # up to its hard limit, so the hard limit is the real cap.
    assert got["RLIMIT_NOFILE"] == [100, 100], got
    assert got["RLIMIT_CORE"] == [0, 0], got
    cpu_soft, cpu_hard = got["RLIMIT_CPU"]
    assert cpu_soft == 2, got
    assert cpu_hard != -1 and cpu_soft <= cpu_hard <= cpu_soft + 2, got


def test_only_stdio_fds_are_open(run):
    # Nothing of sandboxd's (pipes, cgroup dirs, sync fds) may be inherited.
    code = "import os, json\nprint(json.dumps(sorted(int(f) for f in os.listdir('/proc/self/fd'))))"
    r = run(code)
    r.expect("ok", rc=0)
    fds = json.loads(r["stdout"])
    # 0, 1, 2 and the descriptor listdir itself holds open while reading the directory.
    assert fds[:3] == [0, 1, 2]
    assert len(fds) <= 4, fds


# --- the result object -------------------------------------------------------------------------


def test_result_shape_and_defaults(run):
    r = run("print(1)")
    r.expect("ok", rc=0)
    assert re.fullmatch(r"[0-9a-f]{32}", r["id"]), r["id"]
    assert r["backend"] == "native"
    assert r["pooled"] is False
    assert r["limits"] == BUILTIN_LIMITS
    for key in ("cpu_ms", "wall_ms", "memory_peak_bytes", "pids_peak", "disk_used_bytes"):
        assert isinstance(r["usage"][key], int) and r["usage"][key] >= 0, key
    assert r["usage"]["memory_peak_bytes"] > 0
    assert r["usage"]["wall_ms"] < 10000
    ev = r["evidence"]
    for key in ("oom_kills", "memory_max_events", "pids_max_events", "cpu_usage_us",
                "cpu_throttled_us", "cpu_nr_throttled"):
        assert isinstance(ev[key], int) and ev[key] >= 0, key
    assert ev["oom_kills"] == 0 and ev["pids_max_events"] == 0
    assert ev["cpu_usage_us"] > 0
    for key in ("wall_timeout", "output_limit", "disk_full"):
        assert ev[key] is False, key


def test_flags_become_effective_limits(run):
    r = run("print(1)", "python", "--memory", "64M", "--pids", "16", "--cpu-time", "2s",
            "--cpus", "0.5", "--timeout", "1500ms", "--disk", "16M", "--output", "64K",
            "--open-files", "100")
    r.expect("ok", rc=0)
    assert r["limits"] == {
        "wall_ms": 1500,
        "cpu_ms": 2000,
        "memory_mb": 64,
        "pids": 16,
        "disk_mb": 16,
        "output_bytes": 65536,
        "open_files": 100,
        "cpus": 0.5,
    }


def test_timing_fields_are_consistent(run):
    r = run("import time; time.sleep(0.2)")
    r.expect("ok", rc=0)
    t = r["timing"]
    for key in ("acquire_us", "setup_us", "run_us", "teardown_us", "total_us"):
        assert isinstance(t[key], int) and t[key] >= 0, (key, t)
    assert t["setup_us"] > 0 and t["run_us"] > 0
    assert t["total_us"] >= t["setup_us"] + t["run_us"], t
    assert t["total_us"] >= t["acquire_us"] + t["setup_us"] + t["run_us"] + t["teardown_us"], t
    # The program slept 200 ms: run time must show it, and no phase can exceed the total.
    assert t["run_us"] >= 200_000, t
    assert r["usage"]["wall_ms"] >= 200
    assert max(t["acquire_us"], t["setup_us"], t["run_us"], t["teardown_us"]) <= t["total_us"]
