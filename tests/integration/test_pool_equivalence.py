"""A pooled execution must be indistinguishable from a cold one (issue 4).

`sandboxd run --pooled` goes through a warm-pool entry exactly as the service does: a sandbox
made with every isolation layer in force runs guest/python_loader.py, which waits on its agent
channel; the request's limits, files, argv, environment and stdin are then handed to it. Each test
runs the same program both ways and compares every field of the two results that does not
measure time or identity.
"""

import pytest

# Fields that legitimately differ between two runs of the same program.
VARYING = {"id", "timing", "usage", "pooled"}
# Evidence counters that measure time or the interpreter's start-up, not the outcome.
VARYING_EVIDENCE = {"cpu_usage_us", "cpu_throttled_us", "cpu_nr_throttled", "memory_max_events"}

PROGRAMS = {
    "print": ("print(2+2)", (), None, ()),
    "argv_file_path": (
        "import sys, os\nprint(sys.argv, __file__, __name__, sys.path[0], os.getcwd())",
        ("alpha", "beta gamma"), None, ()),
    "stdin": ("import sys\ndata = sys.stdin.read()\nprint(len(data), data.upper())", (),
              "hello\nworld\n", ()),
    "exception": ("def f():\n    return 1 / 0\nf()", (), None, ()),
    "exit_code": ("import sys\nprint('bye')\nsys.exit(3)", (), None, ()),
    "exit_message": ("import sys\nsys.exit('fatal: no input')", (), None, ()),
    "exit_none": ("import sys\nsys.exit(None)", (), None, ()),
    "os_exit": ("import os\nos._exit(5)", (), None, ()),
    "kill_self": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", (), None, ()),
    "atexit_and_threads": (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "t = threading.Thread(target=lambda: (time.sleep(0.05), print('thread done')))\n"
        "t.start()\nprint('main done')", (), None, ()),
    "unflushed_output": ("import sys\nsys.stdout.write('no newline')\nsys.stderr.write('err')",
                         (), None, ()),
    "environment": ("import os\nprint(sorted(os.environ.items()))", (), None, ()),
    # What the interpreter and the kernel say about the process: a fork of a template must be
    # what an exec'd interpreter is (its streams made on pipes, its signal dispositions, its
    # credentials, limits, mask, umask, session, /proc/self's owner).
    "process_state": (
        "import os, resource, signal, sys\n"
        "for s in (sys.stdin, sys.stdout, sys.stderr):\n"
        "    print(s.name, s.seekable(), s.line_buffering, s.encoding, s.errors, s.isatty())\n"
        "print(sys.flags, sys.argv, sys.orig_argv, sys.executable)\n"
        "print([(int(n), str(signal.getsignal(n))) for n in signal.valid_signals()\n"
        "       if n not in (signal.SIGKILL, signal.SIGSTOP)])\n"
        "print(signal.pthread_sigmask(signal.SIG_BLOCK, []), os.umask(0o22), os.getpgrp() == "
        "os.getpid(), os.getsid(0) == os.getpid())\n"
        "print(os.getresuid(), os.getresgid(), os.getgroups(), os.getpriority(os.PRIO_PROCESS, 0))\n"
        "print([resource.getrlimit(r) for r in range(16)])\n"
        "print(os.stat('/proc/self/fd').st_uid, sorted(os.listdir('/proc/self/fd')))\n"
        "st = open('/proc/self/status').read().splitlines()\n"
        "print([l for l in st if l.split(':')[0] in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd',\n"
        "       'CapAmb', 'NoNewPrivs', 'Seccomp', 'SigIgn', 'SigCgt', 'SigBlk')])",
        (), None, ()),
    "files_written": (
        "open('/workspace/out.txt', 'w').write('x' * 1000)\n"
        "import os\nprint(sorted(os.listdir('/workspace')), os.path.getsize('/workspace/out.txt'))",
        (), None, ()),
    "memory_bomb": ("a = []\nwhile True:\n    a.append(bytearray(8 << 20))", (), None,
                    ("--memory", "64M")),
    "timeout": ("while True:\n    pass", (), None, ("--timeout", "1s")),
    "output_flood": ("import sys\nwhile True:\n    sys.stdout.write('y' * 65536)", (), None,
                     ("--output", "100K")),
    "fork_limit": (
        "import os\nkids = []\nfor i in range(64):\n"
        "    try:\n        pid = os.fork()\n    except OSError as e:\n"
        "        print('fork failed', e.errno)\n        break\n"
        "    if pid == 0:\n        import time; time.sleep(2); os._exit(0)\n    kids.append(pid)\n"
        "print(len(kids) > 0)", (), None, ("--pids", "12")),
}


def comparable(result):
    """The result without the fields that measure time or identity."""
    out = {k: v for k, v in result.items() if k not in VARYING}
    out["evidence"] = {k: v for k, v in result["evidence"].items() if k not in VARYING_EVIDENCE}
    # Both are positive when the cap was hit; how many forks were refused depends on timing.
    if out["evidence"]["pids_max_events"] > 0:
        out["evidence"]["pids_max_events"] = "moved"
    return out


# A python entry is made two ways: its sandbox's init cloned by sandboxd and python3 exec'd
# there, or (the service's way, DESIGN.md "Warm pools: templates") init forked from a template
# interpreter, whose fork of it is the program. Every comparison holds for both.
ENTRY_KINDS = {"exec": ("--pooled",), "template": ("--pooled", "--template")}


@pytest.mark.parametrize("entry", sorted(ENTRY_KINDS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pooled_equals_cold(run, name, entry):
    code, args, stdin, flags = PROGRAMS[name]
    cold = run(code, "python", *flags, stdin=stdin, args=args)
    pooled = run(code, "python", *ENTRY_KINDS[entry], *flags, stdin=stdin, args=args)
    assert cold["pooled"] is False
    assert pooled["pooled"] is True
    assert pooled["timing"]["setup_us"] == 0  # the sandbox was set up before the request
    assert comparable(pooled) == comparable(cold), (cold.describe(), pooled.describe())
    assert pooled.rc == cold.rc


# Every other language waits in an exec entry: a sandbox set up to its last step whose init
# starts the program when the execution comes (sandbox/agent.h). The same comparison.
EXEC_PROGRAMS = {
    "bash_argv_env_stdin_exit": ("bash", 'read -r line; echo "$0|$*|$line|$HOME|$PATH"; exit 7',
                                 ("a", "b c"), "piped\n", ()),
    "sh_signal": ("sh", "kill -TERM $$", (), None, ()),
    "bash_files_written": ("bash", "echo x > out; ls -la /workspace | wc -l; id -u", (), None,
                           ()),
    "bash_timeout": ("bash", "while :; do :; done", (), None, ("--timeout", "1s")),
    "bash_memory": ("bash", "x=a; while :; do x=$x$x; done", (), None, ("--memory", "32M")),
    "bash_output": ("bash", "yes", (), None, ("--output", "64K")),
    # bash retries a refused fork after 1 s and gives up if that sleep is cut short: children
    # that end well inside the second make the outcome one (pids_limit, exit 0) at any speed.
    "bash_pids": ("bash", 'for i in $(seq 12); do sleep 0.5 & done 2>/dev/null; wait; echo done',
                  (), None, ("--pids", "8")),
    "c_stdin_args_exit": ("c", '#include <stdio.h>\nint main(int c, char **v) { char b[32] = "";'
                          ' fgets(b, 32, stdin); printf("%s|%s", v[1], b); return 3; }\n',
                          ("arg",), "in\n", ()),
    "c_read_only_artifact": ("c", '#include <stdio.h>\n#include <sys/stat.h>\n'
                             'int main(void) { printf("%d\\n", chmod("/workspace/main", 0777));'
                             ' return 0; }\n', (), None, ()),
}

# JavaScript (and TypeScript's artifact) waits in guest/node_loader.js: node started already.
NODE_PROGRAMS = {
    "argv_main_env": ("console.log(process.argv, require.main === module, __filename,"
                      " process.cwd(), Object.keys(process.env).sort(), process.execArgv,"
                      " Object.getOwnPropertyNames(globalThis).sort())",
                      ("x", "y z"), None),
    "stdin": ("const data = require('fs').readFileSync(0, 'utf8');"
              " console.log(data.length, data.toUpperCase())", (), "hello\nworld\n"),
    "exit_code": ("console.log('bye'); process.exit(3)", (), None),
    "exit_code_set": ("process.exitCode = 4; setTimeout(() => console.log('timer ran'), 20)",
                      (), None),
    "uncaught": ("function f() { throw new TypeError('boom'); }\nf();", (), None),
    "unhandled_rejection": ("Promise.reject(new Error('nobody caught me'))", (), None),
    "syntax_error": ("let x = ;", (), None),
    "timeout": ("for (;;) {}", (), None),
}


def node_comparable(result):
    """As comparable(), with stderr cut before node's own frames (the loader's entry point sits
    below the program's there, not run_main_module's)."""
    out = comparable(result)
    out["stderr"] = out["stderr"].split("\n    at ")[0]
    return out


@pytest.mark.parametrize("name", sorted(NODE_PROGRAMS))
def test_node_loader_equals_cold(run, name):
    code, args, stdin = NODE_PROGRAMS[name]
    flags = ("--timeout", "2s") if name == "timeout" else ()
    cold = run(code, "javascript", *flags, stdin=stdin, args=args)
    pooled = run(code, "javascript", "--pooled", *flags, stdin=stdin, args=args)
    assert cold["pooled"] is False and pooled["pooled"] is True
    assert pooled["timing"]["setup_us"] == 0, pooled.describe()
    assert node_comparable(pooled) == node_comparable(cold), (cold.describe(), pooled.describe())
    assert pooled.rc == cold.rc


def test_node_loader_honours_the_programs_package_json(tmp_path, cli):
    import json
    (tmp_path / "package.json").write_text('{"type": "module"}\n')
    results = []
    for extra in ((), ("--pooled",)):
        proc = cli("run", "--json", *extra, "--lang", "javascript", "--file",
                   str(tmp_path / "package.json"), "-c",
                   "console.log(typeof require, typeof module)")
        results.append(json.loads(proc.stdout))
    cold, pooled = results
    # An ES module by its package.json alone (no import syntax to detect it by).
    assert cold["stdout"] == pooled["stdout"] == "undefined undefined\n", (cold, pooled)
    assert pooled["pooled"] is True


def test_node_loader_runs_an_es_module_entrypoint(tmp_path, cli):
    import json
    (tmp_path / "lib.mjs").write_text("export const answer = 42;\n")
    (tmp_path / "main.mjs").write_text(
        "import { answer } from './lib.mjs';\nconsole.log(answer, typeof require, import.meta.url)\n")
    results = []
    for extra in ((), ("--pooled",)):
        proc = cli("run", "--json", *extra, "--lang", "javascript", "--file",
                   str(tmp_path / "lib.mjs"), "--file", str(tmp_path / "main.mjs"), "-c",
                   "import('./main.mjs')")
        results.append(json.loads(proc.stdout))
    cold, pooled = results
    assert cold["stdout"] == pooled["stdout"] == "42 undefined file:///workspace/main.mjs\n", \
        (cold, pooled)
    assert pooled["pooled"] is True


@pytest.mark.parametrize("name", sorted(EXEC_PROGRAMS))
def test_an_exec_entry_equals_cold(run, name):
    language, code, args, stdin, flags = EXEC_PROGRAMS[name]
    cold = run(code, language, *flags, stdin=stdin, args=args)
    pooled = run(code, language, "--pooled", *flags, stdin=stdin, args=args)
    assert cold["pooled"] is False and pooled["pooled"] is True
    assert pooled["timing"]["setup_us"] == 0, pooled.describe()
    if cold["compile"] is not None:  # the compile stage is a cold sandbox either way
        assert pooled["compile"]["status"] == cold["compile"]["status"] == "ok"
        cold["compile"] = pooled["compile"] = "compiled"
    assert comparable(pooled) == comparable(cold), (cold.describe(), pooled.describe())
    assert pooled.rc == cold.rc


# Programs as raw bytes, where compile() and the interpreter's file reader could disagree.
BYTE_PROGRAMS = {
    "nul_after_a_statement": b"print(1)\0print(2)\n",
    "nul_in_a_string": b"x = \"\0\"\nprint(len(x))\n",
    "invalid_utf8": b"print(\"\xff\")\n",
    "bom": b"\xef\xbb\xbfprint('bom')\n",
    "latin1_cookie": b"# -*- coding: latin-1 -*-\nprint(\"\xe9\")\n",
    "unknown_cookie": b"# -*- coding: no-such-codec -*-\nprint(1)\n",
    "syntax_error": b"print(1\n",
    "crlf": b"import sys\r\nprint(sys.argv[1:])\r\n",
}


@pytest.mark.parametrize("entry", sorted(ENTRY_KINDS))
@pytest.mark.parametrize("name", sorted(BYTE_PROGRAMS))
def test_pooled_equals_cold_for_any_bytes(tmp_path, cli, name, entry):
    """The result never depends on whether a pool entry was free, whatever the program's bytes:
    NUL, invalid UTF-8, a BOM, a coding cookie, a syntax error."""
    import json
    program = tmp_path / "main.py"
    program.write_bytes(BYTE_PROGRAMS[name])
    results = []
    for extra in ((), ENTRY_KINDS[entry]):
        proc = cli("run", "--json", *extra, str(program), "--", "arg")
        results.append(json.loads(proc.stdout))
        results[-1]["rc"] = proc.returncode
    cold, pooled = results
    assert cold["pooled"] is False and pooled["pooled"] is True
    assert {**comparable(pooled), "rc": pooled["rc"]} == {**comparable(cold), "rc": cold["rc"]}


def test_pooled_files_and_imports(tmp_path, cli):
    """Files mode through a pool entry: a helper module next to the program imports as it does
    cold, and an executable bit survives."""
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 42\n")
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    code = ("import helper, os, subprocess\n"
            "print(helper.VALUE, os.access('tool.sh', os.X_OK))\n"
            "print(subprocess.run(['./tool.sh'], capture_output=True, text=True).stdout.strip())")
    results = []
    for extra in ((), ("--pooled",)):
        proc = cli("run", "--json", *extra, "--file", str(helper), "--file", str(tool), "-c", code)
        assert proc.returncode == 0, proc.stderr
        import json
        results.append(json.loads(proc.stdout))
    cold, pooled = results
    assert cold["stdout"] == pooled["stdout"] == "42 True\ntool ran\n"
    assert pooled["pooled"] is True


def test_pool_refuses_what_it_cannot_honour(cli):
    """A disk size other than the pool's, or a PYTHON* variable (it acts at interpreter start),
    cannot use a pre-started sandbox: the command says so rather than pretending."""
    proc = cli("run", "--pooled", "--disk", "32M", "-c", "print(1)")
    assert proc.returncode == 64
    assert b"cannot use a warm pool" in proc.stderr
    proc = cli("run", "--pooled", "--lang", "bash", "--disk", "32M", "-c", "echo 1")
    assert proc.returncode == 64
    proc = cli("run", "--pooled", "-c", "print(1)", "--test-without", "seccomp")
    assert proc.returncode == 64


@pytest.mark.parametrize("entry", sorted(ENTRY_KINDS))
def test_pool_entry_has_every_layer(run, entry):
    """The loader waits fully isolated: the program finds the same lockdown as a cold run."""
    probe = ("import re\nstatus = open('/proc/self/status').read()\n"
             "print({k: v for k, v in re.findall(r'^(\\w+):\\s*(.*)$', status, re.M)"
             " if k in ('CapEff', 'CapBnd', 'CapPrm', 'NoNewPrivs', 'Seccomp')})\n"
             "import os\nprint(sorted(os.listdir('/proc/self/fd')))")
    cold = run(probe)
    pooled = run(probe, "python", *ENTRY_KINDS[entry])
    assert pooled["stdout"] == cold["stdout"]
    assert "'Seccomp': '2'" in pooled["stdout"]
    assert "'CapEff': '00000000000000eb'" in pooled["stdout"]  # caps.h CAPS_ROOT_SET_MASK
    # The agent channel is closed before the program runs: only stdio (and the listing's own fd).
    assert pooled["stdout"].strip().endswith("['0', '1', '2', '3']")


def landlock_available():
    """Whether this kernel has Landlock (landlock_create_ruleset's ABI version query)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) > 0  # x86_64


def test_an_exec_entrys_program_is_under_landlock(cli):
    """An exec entry's init builds the Landlock ruleset before it waits; its program restricts
    itself with it: a write that only Landlock refuses (the program's own /proc/self/comm; the
    control without Landlock writes it) is refused pooled as cold."""
    if not landlock_available():
        pytest.skip("this kernel has no Landlock")
    code = "printf x > /proc/self/comm && echo wrote || echo refused"
    for flags in ([], ["--pooled"]):
        r = cli("run", *flags, "--lang", "sh", "-c", code)
        assert r.stdout == b"refused\n", (flags, r.stdout, r.stderr)
    r = cli("run", "--test-without", "landlock", "--lang", "sh", "-c", code)
    assert r.stdout == b"wrote\n", r.stderr
