"""POST /v1/executions, the happy paths: languages, stdin, args, env, files + entrypoint, the
result object's fields, exit codes and signals, the kernel's limits (memory, wall clock, output)
and the tier's clamping, visible in the response."""

import json
import re
import signal
import time

import pytest

from conftest import BUILTIN_LIMITS, DOCUMENTED_ENV, MIB
from serve_helpers import (NO_POOL, SLOW, STANDARD_TENANTS, STANDARD_TIERS,
                           expect_json, expect_problem, no_new_leaks, running_server, sample)

assert no_new_leaks  # imported to replace conftest's per-test leak check in this module

RESULT_KEYS = {"id", "status", "exit_code", "signal", "stdout", "stderr", "truncated", "usage",
               "limits", "evidence", "timing", "backend", "pooled", "clamped", "compile"}


@pytest.fixture(scope="module", params=["pool", "cold"])
def srv(request):
    """Every test runs twice: with the default warm pool for Python, and with it off (every
    execution cold). Both paths must give the same results."""
    # "big": the largest output ceiling a config accepts (16 MiB per stream).
    # "roomy": every ceiling above the built-in limits, so that a request can raise each one.
    tiers = {**STANDARD_TIERS,
             "big": {**STANDARD_TIERS["free"], "max_output_bytes": "16M"},
             "roomy": {**STANDARD_TIERS["pro"], "max_cpu_ms": 60000, "max_pids": 1024,
                       "max_open_files": 4096, "max_disk_mb": 512}}
    tenants = {**STANDARD_TENANTS, "bigco": "big", "initech": "roomy"}
    with running_server(tiers=tiers, tenants=tenants,
                        pools=None if request.param == "pool" else NO_POOL) as server:
        server.mode = request.param
        yield server


@pytest.fixture(autouse=True)
def between_tests(srv):
    yield
    srv.check_between_tests()


def on_the_pooled_path(srv):
    """In the pool mode, waits for a ready entry so that the next Python request takes it."""
    if srv.mode == "pool":
        srv.wait_pool_ready()


def post_ok(srv, body, tenant="acme"):
    """POSTs body and returns the result of a 200 answer."""
    return expect_json(srv.post_execution(body, tenant=tenant), 200)


def describe(result):
    keys = ("status", "exit_code", "signal", "error", "stdout", "stderr", "usage", "evidence",
            "limits", "clamped", "pooled")
    return "\n".join(f"  {k}: {str(result.get(k))[:1500]!r}" for k in keys if k in result)


def expect_status(result, status):
    assert result["status"] == status, f"want status {status}\n{describe(result)}"


# --- languages and the result object --------------------------------------------------------------


def test_python_result_has_every_field(srv):
    r = srv.post_execution({"language": "python", "code": "print(2+2)"})
    result = expect_json(r, 200)
    assert r.headers.get("Cache-Control") == "no-store"
    assert set(result) == RESULT_KEYS, sorted(set(result) ^ RESULT_KEYS)
    expect_status(result, "ok")
    assert re.fullmatch(r"[0-9a-f]{32}", result["id"]), result["id"]
    assert result["exit_code"] == 0
    assert result["signal"] is None
    assert result["stdout"] == "4\n"
    assert result["stderr"] == ""
    assert result["truncated"] == {"stdout": False, "stderr": False}
    assert result["backend"] == "native"
    assert isinstance(result["pooled"], bool)
    assert result["clamped"] == []
    assert result["limits"] == BUILTIN_LIMITS
    usage = result["usage"]
    assert set(usage) == {"cpu_ms", "wall_ms", "memory_peak_bytes", "pids_peak",
                          "disk_used_bytes"}
    assert all(isinstance(v, int) and v >= 0 for v in usage.values()), usage
    assert usage["memory_peak_bytes"] > 0 and usage["pids_peak"] >= 1, usage
    assert usage["wall_ms"] < 10000, usage
    evidence = result["evidence"]
    assert evidence["oom_kills"] == 0 and evidence["pids_max_events"] == 0, evidence
    assert evidence["wall_timeout"] is False and evidence["output_limit"] is False, evidence
    assert evidence["disk_full"] is False, evidence
    assert evidence["cpu_usage_us"] > 0, evidence
    timing = result["timing"]
    assert set(timing) == {"acquire_us", "setup_us", "run_us", "teardown_us", "total_us"}
    assert all(isinstance(v, int) and v >= 0 for v in timing.values()), timing
    assert timing["run_us"] > 0 and timing["total_us"] >= timing["run_us"], timing
    assert timing["total_us"] >= timing["setup_us"], timing


def test_pooled_flag_tells_which_path_ran(srv):
    if srv.mode == "pool":
        deadline = time.monotonic() + 10 * SLOW
        while sample(srv.metrics(), "sandboxd_pool_entries", state="idle") < 1:
            assert time.monotonic() < deadline, "the warm pool never had an idle entry"
            time.sleep(0.05)
    result = srv.run("print('which')")
    expect_status(result, "ok")
    assert result["pooled"] is (srv.mode == "pool"), describe(result)
    if result["pooled"]:
        assert result["timing"]["setup_us"] == 0, result["timing"]  # README: paid in advance
    assert srv.run("echo sh", "sh")["pooled"] is False  # only Python has a pool


def test_every_execution_gets_a_new_id(srv):
    ids = {srv.run("print(1)")["id"] for _ in range(3)}
    assert len(ids) == 3, ids


def test_bash(srv):
    code = 'echo "shell:${BASH_VERSION:+bash}"; echo "args:$#"; echo "cwd:$PWD"; echo err >&2'
    result = srv.run(code, "bash")
    expect_status(result, "ok")
    assert result["stdout"] == "shell:bash\nargs:0\ncwd:/workspace\n"
    assert result["stderr"] == "err\n"


def test_sh_is_not_bash_and_passes_exit_codes(srv):
    result = srv.run('echo "shell:${BASH_VERSION:-posix}"; exit 3', "sh")
    expect_status(result, "exit_nonzero")
    assert result["exit_code"] == 3 and result["signal"] is None
    assert result["stdout"] == "shell:posix\n"


def test_unicode_code_and_output(srv):
    result = srv.run('print("h\u00e9llo \u2713 \U0001F600")')
    expect_status(result, "ok")
    assert result["stdout"] == "h\u00e9llo \u2713 \U0001F600\n"


def test_invalid_utf8_output_becomes_replacement_characters(srv):
    result = srv.run('import sys\nsys.stdout.buffer.write(b"ok\\xff\\xfe!\\n")')
    expect_status(result, "ok")
    assert result["stdout"] == "ok\ufffd\ufffd!\n"


# --- stdin, args, env -----------------------------------------------------------------------------


def test_stdin_reaches_the_program(srv):
    code = "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), data.upper().decode())"
    result = srv.run(code, stdin="hello\nw\u00f6rld")
    expect_status(result, "ok")
    # bytes.upper() leaves the two bytes of the UTF-8 o-umlaut alone.
    assert result["stdout"] == "12 HELLO\nW\u00f6RLD\n"


def test_stdin_may_hold_nul_bytes(srv):
    result = srv.run("import sys\nprint(list(sys.stdin.buffer.read()))", stdin="a\u0000b")
    expect_status(result, "ok")
    assert result["stdout"] == "[97, 0, 98]\n"


def test_no_stdin_is_empty(srv):
    result = srv.run("import sys\nprint(repr(sys.stdin.read()))")
    assert result["stdout"] == "''\n", describe(result)


def test_args_python(srv):
    args = ["one", "two words", "--flag", "\u00fcn\u00ef", ""]
    result = srv.run("import json, sys\nprint(json.dumps(sys.argv[1:]))", args=args)
    expect_status(result, "ok")
    assert json.loads(result["stdout"]) == args


def test_args_bash(srv):
    result = srv.run('printf "%s|" "$@"; echo "$0"', "bash", args=["a b", "c"])
    expect_status(result, "ok")
    assert result["stdout"] in ("a b|c|main.sh\n", "a b|c|/workspace/main.sh\n")


def test_env_is_the_documented_one_plus_the_request(srv):
    env = {"GREETING": "hi there", "EMPTY": "", "_under": "x=y"}
    result = srv.run("import json, os\nprint(json.dumps(dict(os.environ)))", env=env)
    expect_status(result, "ok")
    assert json.loads(result["stdout"]) == {**DOCUMENTED_ENV, **env}


# --- files + entrypoint ---------------------------------------------------------------------------


def test_files_python_package_with_two_modules(srv):
    files = [
        {"path": "main.py", "content":
            "import os, sys\n"
            "from pkg import mathutil, text\n"
            "import pkg\n"
            "print(pkg.VERSION, mathutil.add(2, 3), text.shout('hi'), sys.argv[1:])\n"
            "print(open('data/input.txt').read().strip(), os.getcwd())\n"},
        {"path": "pkg/__init__.py", "content": "VERSION = '1.2'\n"},
        {"path": "pkg/mathutil.py", "content": "def add(a, b):\n    return a + b\n"},
        {"path": "pkg/text.py", "content":
            "from .mathutil import add\n\ndef shout(s):\n    return s.upper() + '!' * add(1, 1)\n"},
        {"path": "data/input.txt", "content": "some data\n"},
    ]
    result = post_ok(srv, {"language": "python", "files": files, "entrypoint": "main.py",
                           "args": ["x"]})
    expect_status(result, "ok")
    assert result["stdout"] == "1.2 5 HI!! ['x']\nsome data /workspace\n", describe(result)


def test_files_entrypoint_in_a_subdirectory(srv):
    files = [
        {"path": "app/run.py", "content": "from helper import value\nprint(value())\n"},
        {"path": "app/helper.py", "content": "def value():\n    return 'from helper'\n"},
    ]
    result = post_ok(srv, {"language": "python", "files": files, "entrypoint": "app/run.py"})
    expect_status(result, "ok")
    assert result["stdout"] == "from helper\n", describe(result)


def test_files_bash_sources_and_executable_flag(srv):
    files = [
        {"path": "main.sh", "content":
            ". ./lib.sh\ngreet world\n./tool.sh\n./plain.sh\necho \"plain: $?\"\n"},
        {"path": "lib.sh", "content": "greet() { echo \"hello $1\"; }\n"},
        {"path": "tool.sh", "content": "#!/bin/sh\necho tool ran\n", "executable": True},
        {"path": "plain.sh", "content": "#!/bin/sh\necho must not run\n", "executable": False},
    ]
    result = post_ok(srv, {"language": "bash", "files": files, "entrypoint": "main.sh"})
    expect_status(result, "ok")
    assert result["stdout"] == "hello world\ntool ran\nplain: 126\n", describe(result)
    assert "Permission denied" in result["stderr"], describe(result)


def test_files_sh_entrypoint(srv):
    files = [{"path": "scripts/go.sh", "content": "echo \"sh:$1\"\nexit 4\n"}]
    result = post_ok(srv, {"language": "sh", "files": files, "entrypoint": "scripts/go.sh",
                           "args": ["arg"]})
    expect_status(result, "exit_nonzero")
    assert result["exit_code"] == 4
    assert result["stdout"] == "sh:arg\n"


# --- exit codes, signals, limits ------------------------------------------------------------------


def test_exit_code_and_stderr(srv):
    result = srv.run("import sys\nprint('out')\nprint('to stderr', file=sys.stderr)\nsys.exit(7)")
    expect_status(result, "exit_nonzero")
    assert result["exit_code"] == 7 and result["signal"] is None
    assert result["stdout"] == "out\n" and result["stderr"] == "to stderr\n"


def test_exception_exits_1(srv):
    result = srv.run("raise ValueError('boom-42')")
    expect_status(result, "exit_nonzero")
    assert result["exit_code"] == 1
    assert "ValueError: boom-42" in result["stderr"]


def test_killed_by_a_signal(srv):
    result = srv.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    expect_status(result, "signaled")
    assert result["signal"] == signal.SIGKILL and result["exit_code"] is None


def test_output_limit_keeps_exactly_output_bytes(srv):
    result = srv.run("print('x' * 5000)", limits={"output_bytes": 100})
    expect_status(result, "output_limit")
    assert result["stdout"] == "x" * 100
    assert result["truncated"] == {"stdout": True, "stderr": False}
    assert result["evidence"]["output_limit"] is True
    assert result["limits"]["output_bytes"] == 100


def test_memory_bomb_is_memory_limit_with_oom_evidence(srv):
    code = "chunks = []\nwhile True:\n    chunks.append('x' * (8 << 20))\n"
    result = srv.run(code, limits={"memory_mb": 64})
    expect_status(result, "memory_limit")
    assert result["evidence"]["oom_kills"] >= 1, describe(result)
    assert result["exit_code"] is None, describe(result)
    assert result["limits"]["memory_mb"] == 64
    assert result["clamped"] == []
    # The cap counts memory + swap: the peak cannot be far above it.
    assert result["usage"]["memory_peak_bytes"] <= 64 * MIB + 4 * MIB, describe(result)


def test_timeout(srv):
    result = srv.run("import time\ntime.sleep(30)\nprint('woke up')", limits={"wall_ms": 1000})
    expect_status(result, "timeout")
    assert result["evidence"]["wall_timeout"] is True
    assert result["exit_code"] is None
    assert result["stdout"] == ""
    assert 1000 <= result["usage"]["wall_ms"] < 1000 + 4000 * SLOW, describe(result)
    assert result["limits"]["wall_ms"] == 1000


def test_cpu_bound_program_counts_cpu(srv):
    code = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end:\n" \
           "    pass\n"
    result = srv.run(code)
    expect_status(result, "ok")
    assert result["usage"]["cpu_ms"] >= 200, describe(result)
    assert result["evidence"]["cpu_usage_us"] >= 200_000, describe(result)


# --- clamping -------------------------------------------------------------------------------------


def test_limit_above_the_tier_is_clamped_and_reported(srv):
    result = srv.run("print('ok')", limits={"memory_mb": 100000})
    expect_status(result, "ok")
    assert result["clamped"] == ["memory_mb"]
    assert result["limits"]["memory_mb"] == 256  # free's max_memory_mb


def test_several_limits_clamped(srv):
    result = srv.run("print('ok')", limits={"memory_mb": 4096, "wall_ms": 999999, "pids": 32})
    expect_status(result, "ok")
    assert sorted(result["clamped"]) == ["memory_mb", "wall_ms"]
    assert result["limits"]["memory_mb"] == 256
    assert result["limits"]["wall_ms"] == 10000  # free's max_wall_ms
    assert result["limits"]["pids"] == 32  # under the ceiling: as asked


def test_limit_at_or_under_the_ceiling_is_not_clamped(srv):
    result = srv.run("print('ok')", limits={"memory_mb": 256, "wall_ms": 2000})
    assert result["clamped"] == [], describe(result)
    assert result["limits"]["memory_mb"] == 256 and result["limits"]["wall_ms"] == 2000


def test_clamping_follows_the_tenants_tier(srv):
    # globex is on pro: 512 MiB is under its ceiling, and its tier default wall_ms applies.
    # (A pool entry is made with the built-in limits; acquire must still give it more.)
    on_the_pooled_path(srv)
    result = srv.run("print('ok')", tenant="globex", limits={"memory_mb": 512})
    expect_status(result, "ok")
    assert result["pooled"] is (srv.mode == "pool"), describe(result)
    assert result["clamped"] == []
    assert result["limits"]["memory_mb"] == 512
    assert result["limits"]["wall_ms"] == 5000  # pro's default_wall_ms
    clamped = srv.run("print('ok')", tenant="globex", limits={"memory_mb": 2048})
    assert clamped["clamped"] == ["memory_mb"] and clamped["limits"]["memory_mb"] == 1024


@pytest.mark.parametrize("name, value, probe", [
    ("memory_mb", 512, "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] != 0)"),
    ("open_files", 4096, "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))"),
    ("pids", 128, "print(True)"),
    ("cpu_ms", 20000, "import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))"),
], ids=["memory_mb", "open_files", "pids", "cpu_ms"])
def test_limits_above_the_builtin_defaults_apply(srv, name, value, probe):
    """A tier whose ceilings are above the built-in limits lets a request raise each one; the
    program runs with it (on the pooled path as on the cold one)."""
    on_the_pooled_path(srv)
    result = srv.run(probe, tenant="initech", limits={name: value})
    expect_status(result, "ok")
    assert result["pooled"] is (srv.mode == "pool"), describe(result)
    assert result["limits"][name] == value and result["clamped"] == []
    if name == "open_files":
        assert result["stdout"] == f"({value}, {value})\n", describe(result)
    if name == "cpu_ms":
        soft, hard = json.loads(result["stdout"].replace("(", "[").replace(")", "]"))
        assert soft == value // 1000 and hard >= soft, describe(result)  # hard: SIGKILL later


def test_content_type_with_charset_is_json(srv):
    r = srv.post_execution({"language": "python", "code": "print(1)"},
                           content_type="application/json; charset=utf-8")
    assert expect_json(r, 200)["stdout"] == "1\n"


def test_network_none_and_backend_native_are_accepted(srv):
    result = srv.run("print('ok')", network="none", backend="native")
    expect_status(result, "ok")
    assert result["backend"] == "native"


# --- sizes ----------------------------------------------------------------------------------------

CODE_MAX = 4 << 20  # execution.h SBX_MAX_CODE_BYTES, also SBX_MAX_STDIN_BYTES


def test_largest_outputs_travel_back_whole(srv):
    """16 MiB on each stream: the engine's RESULT message, the API's JSON and HTTP carry it."""
    size = 16 * MIB
    code = ("import sys\nsys.stdout.write('o' * {0})\nsys.stdout.flush()\n"
            "sys.stderr.write('e' * {0})\n").format(size)
    result = srv.run(code, tenant="bigco", limits={"output_bytes": size})
    expect_status(result, "ok")
    assert result["limits"]["output_bytes"] == size
    assert len(result["stdout"]) == size and set(result["stdout"]) == {"o"}
    assert len(result["stderr"]) == size and set(result["stderr"]) == {"e"}
    assert result["truncated"] == {"stdout": False, "stderr": False}


def test_output_ceiling_of_the_tier_clamps(srv):
    result = srv.run("print('x' * 2000000)", limits={"output_bytes": 16 * MIB})
    assert result["clamped"] == ["output_bytes"], describe(result)
    assert result["limits"]["output_bytes"] == MIB  # free's (built-in) ceiling
    expect_status(result, "output_limit")
    assert len(result["stdout"]) == MIB


def test_code_of_the_maximum_size_runs(srv):
    code = "print('big')\n#" + "x" * (CODE_MAX - len("print('big')\n#"))
    assert len(code) == CODE_MAX
    result = srv.run(code)
    expect_status(result, "ok")
    assert result["stdout"] == "big\n"


def test_stdin_of_the_maximum_size_arrives_whole(srv):
    result = srv.run("import sys\nprint(len(sys.stdin.buffer.read()))", stdin="s" * CODE_MAX)
    expect_status(result, "ok")
    assert result["stdout"] == f"{CODE_MAX}\n"


@pytest.mark.parametrize("fields, field", [
    ({"code": "#" * (CODE_MAX + 1)}, "code"),
    ({"code": "pass", "stdin": "s" * (CODE_MAX + 1)}, "stdin"),
    ({"files": [{"path": "a.py", "content": "#" * (CODE_MAX // 2)},
                {"path": "b.py", "content": "#" * (CODE_MAX // 2 + 1)}],
      "entrypoint": "a.py"}, "files"),
], ids=["code", "stdin", "files-together"])
def test_over_the_size_bounds_is_400(srv, fields, field):
    body = {"language": "python", **fields}
    expect_problem(srv.post_execution(body), 400, field=field)
