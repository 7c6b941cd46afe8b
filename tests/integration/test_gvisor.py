"""The gVisor backend (`--backend gvisor`, src/sandbox/gvisor): a cold execution on runsc with the
native backend's view, every cap hit for real with the cgroup's evidence and a control under it,
and nothing of runsc left behind (the autouse leak check covers its directories, processes and
the cgroups runsc would make itself)."""

import hashlib
import json
import os
import signal
import threading
import time

import pytest

from conftest import SANITIZED
from serve_helpers import (NO_POOL, children_of, cmdline, expect_json, expect_problem,
                           kept_data_dir, running_server, sample)

RUNSC = "/usr/bin/runsc"

pytestmark = pytest.mark.skipif(
    not os.access(RUNSC, os.X_OK),
    reason=f"{RUNSC} is missing (scripts/install-deps.sh installs Debian's runsc)")

GVISOR = ("--backend", "gvisor")


@pytest.fixture(params=["cold", "pooled"])
def gvisor(request):
    """The flags of a gVisor run: cold, or through a warm-pool entry made for it, whose loader
    takes the execution on stdin and sets its rlimits itself (the result says pooled)."""
    return GVISOR + (("--pooled",) if request.param == "pooled" else ())


def listing(r):
    r.expect("ok", rc=0)
    return json.loads(r["stdout"])


def test_the_same_view_as_the_native_backend(run):
    # (/etc's files: the host's, bound natively, copied into gVisor's root: spec.c.)
    code = ("import hashlib, json, os\n"
            "print(json.dumps({'root': sorted(os.listdir('/')), 'cwd': os.getcwd(),\n"
            "  'etc': sorted(os.listdir('/etc')), 'uid': os.getuid(),\n"
            "  'etc_files': {n: hashlib.sha256(open('/etc/' + n, 'rb').read()).hexdigest()\n"
            "                for n in os.listdir('/etc') if os.path.isfile('/etc/' + n)\n"
            "                and not os.path.islink('/etc/' + n)},\n"
            "  'sys': os.listdir('/sys') if os.path.isdir('/sys') else None,\n"
            "  'home': os.environ.get('HOME'), 'usr': sorted(os.listdir('/usr'))}))")
    native, gvisor = listing(run(code)), listing(run(code, "python", *GVISOR))
    # /sys: an empty read-only mount over runsc's own sysfs (the native backend has none).
    assert set(gvisor["root"]) - set(native["root"]) <= {"sys"}, (native, gvisor)
    assert set(native["root"]) <= set(gvisor["root"])
    assert gvisor["sys"] == []
    assert {"ld.so.cache", "services", "passwd"} <= set(native["etc_files"])
    for key in ("cwd", "etc", "etc_files", "uid", "home", "usr"):
        assert gvisor[key] == native[key], key
    assert "shadow" not in gvisor["etc"] and "local" not in gvisor["usr"]


def test_program_files_args_stdin_and_exit_code(run_file, run, tmp_path, gvisor):
    helper = tmp_path / "helper.sh"
    helper.write_text("#!/bin/sh\necho helper ran\n")
    helper.chmod(0o755)
    r = run_file("main.py",
                 "import subprocess, sys\n"
                 "print(sys.argv[1:], open('helper.sh').read().splitlines()[0])\n"
                 "print(subprocess.run(['./helper.sh'], capture_output=True, text=True).stdout,"
                 " end='')\n"
                 "sys.exit(3)\n",
                 *gvisor, "--file", str(helper), args=("a", "b c"))
    r.expect("exit_nonzero")
    assert r["exit_code"] == 3 and r["signal"] is None
    assert r["stdout"] == "['a', 'b c'] #!/bin/sh\nhelper ran\n"
    assert r["backend"] == "gvisor" and r["pooled"] == ("--pooled" in gvisor)
    r = run("import sys; print(sys.stdin.read().upper(), end='')", "python", *gvisor,
            stdin="hello gvisor\n", stdin_via="pipe")
    r.expect("ok", rc=0)
    assert r["stdout"] == "HELLO GVISOR\n"


def test_files_come_whole_before_the_programs_stdin(run, tmp_path, gvisor):
    # Cold, the stage script writes each file from stdin with exactly its size; pooled, the
    # loader reads them from the execution. Either way the program's stdin follows untouched.
    data = bytes(range(256)) * 4096 + b"end"  # 1 MiB and a bit, every byte value
    (tmp_path / "data.bin").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    code = ("import hashlib, os, sys\n"
            "print(hashlib.sha256(open('nested/dir/data.bin', 'rb').read()).hexdigest(),"
            " os.path.getsize('empty'), sys.stdin.buffer.read().hex())\n")
    r = run(code, "python", *gvisor, "--file", f"{tmp_path / 'data.bin'}:nested/dir/data.bin",
            "--file", f"{tmp_path / 'empty'}:empty", stdin=b"\x00after\xff")
    r.expect("ok", rc=0)
    assert r["stdout"].split() == [hashlib.sha256(data).hexdigest(), "0",
                                   b"\x00after\xff".hex()], r["stdout"]


def test_memory_cap_kills_the_sandbox_with_evidence(run, gvisor):
    hog = "x = []\nwhile True: x.append(bytearray(1 << 20))"
    r = run(hog, "python", *gvisor, "--memory", "64M", "--timeout", "20s")
    r.expect("memory_limit")
    assert r["evidence"]["oom_kills"] >= 1 and r["signal"] == signal.SIGKILL
    control = run("x = bytearray(16 << 20); print(len(x))", "python", *gvisor, "--memory", "64M")
    control.expect("ok", rc=0)
    assert control["evidence"]["oom_kills"] == 0


def test_fork_bomb_is_refused_inside(run, gvisor):
    # The host's pids cgroup cannot be the bound (it counts the sentry's threads and the ptrace
    # platform's stubs): RLIMIT_NPROC inside gVisor is, at pids + the native plan's margin of 8.
    bomb = ("import os, time\nn = 0\ntry:\n"
            "    while True:\n"
            "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
            "        n += 1\n"
            "except OSError as e:\n    print(n, e.errno)\n")
    r = run(bomb, "python", *gvisor, "--pids", "16", "--timeout", "20s")
    r.expect("ok", rc=0)
    forked, errno = map(int, r["stdout"].split())
    assert errno == 11 and 8 <= forked < 16 + 8, r["stdout"]
    control = run(bomb.replace("while True", "while n < 4"), "python", *gvisor, "--pids", "16")
    control.expect("ok", rc=0)
    assert control["stdout"] == ""  # four forks, none refused


def test_deadline_and_output_cap_kill_the_whole_sandbox(run, gvisor):
    r = run("print('spinning', flush=True)\nwhile True: pass", "python", *gvisor,
            "--timeout", "2s")
    r.expect("timeout", rc=124)
    assert r["evidence"]["wall_timeout"] and r["signal"] == signal.SIGKILL
    assert r["stdout"] == "spinning\n"
    assert 2000 <= r["usage"]["wall_ms"] <= 6000  # runsc, its sentry: the autouse check
    r = run("print('y' * 5000)", "python", *gvisor, "--output", "1000")
    r.expect("output_limit")
    assert r["truncated"]["stdout"] and len(r["stdout"]) == 1000


def test_the_cpu_quota_binds_the_program_not_runscs_start_up(run, gvisor):
    # runsc's start-up (runsc, gofer, sentry: ~0.45 s of CPU in parallel) runs under the quota
    # plus one CPU; the request's quota is set, and the counters' baseline taken, before the
    # program can run (a cold run's stage waits for the last byte of its files, a warm loader
    # for its execution). A program that spins for 1.5 s at half a CPU is throttled, and its
    # CPU is at most half its run's wall time and one 100 ms period at full tilt on 2 CPUs (at
    # the start-up's quota it would be ~1.5 s; with the start-up counted, 0.45 s more).
    code = ("import time\nend = time.monotonic() + 1.5\n"
            "while time.monotonic() < end: pass\nprint('spun')")
    r = run(code, "python", *gvisor, "--cpus", "0.5", "--timeout", "30s")
    r.expect("ok", rc=0)
    ev, run_us = r["evidence"], r["timing"]["run_us"]
    assert ev["cpu_nr_throttled"] > 0, ev
    assert ev["cpu_usage_us"] <= 0.5 * run_us + 200000, (ev, r["timing"])


def test_disk_cap_is_enospc_inside(run):
    code = ("import errno\nfor path in ('/workspace/f', '/tmp/f', '/dev/shm/f'):\n"
            "    try:\n        open(path, 'wb').write(b'x' * ({size} << 20))\n"
            "        print(path, 'ok')\n"
            "    except OSError as e:\n        print(path, errno.errorcode[e.errno])\n")
    # Each is a tmpfs of its own under gVisor (one shared one natively); a file past the cap
    # meets the tmpfs's size (ENOSPC) or RLIMIT_FSIZE, set to the same size (EFBIG), first.
    r = run(code.format(size=12), "python", *GVISOR, "--disk", "8M")
    r.expect("ok", rc=0)
    words = r["stdout"].split()
    assert words[0::2] == ["/workspace/f", "/tmp/f", "/dev/shm/f"], words
    assert set(words[1::2]) <= {"ENOSPC", "EFBIG"}, words
    control = run(code.format(size=4), "python", *GVISOR, "--disk", "8M")
    assert control["stdout"].split()[1::2] == ["ok", "ok", "ok"]


def test_no_network_but_loopback_and_nothing_of_the_host(run, canary_dir, gvisor):
    path, token = canary_dir
    code = ("import socket, os\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "c = socket.create_connection(s.getsockname()); print('loopback ok')\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
            "    print('network reached')\nexcept OSError as e:\n    print('network', e.errno)\n"
            f"for p in ('/etc/shadow', '/root', {str(path)!r}, '/run', '/usr/local'):\n"
            "    print(p, os.path.exists(p))\n")
    r = run(code, "python", *gvisor)
    r.expect("ok", rc=0)
    lines = r["stdout"].splitlines()
    assert lines[0] == "loopback ok" and lines[1].startswith("network ")
    assert all(line.endswith(" False") for line in lines[2:]), lines
    assert token not in r["stdout"]


def test_files_outside_workspace_are_read_only(run, gvisor):
    code = ("import errno\nfor path in ('/usr/bin/python3', '/etc/passwd', '/etc/services', '/sys/x',\n"
            "             '/newfile'):\n"
            "    try:\n        open(path, 'ab').close(); print(path, 'writable')\n"
            "    except OSError as e:\n        print(path, errno.errorcode[e.errno])\n")
    r = run(code, "python", *gvisor)
    r.expect("ok", rc=0)
    for line in r["stdout"].splitlines():
        assert line.split()[1] in ("EROFS", "EACCES", "EPERM"), line


def test_a_warm_run_ends_at_the_sentrys_answer(cli):
    """A pool entry's run ends when the sentry answers the WaitPID call for the loader's pid on
    runsc's control server (sandbox/gvisor/control.h), not at the stage shell's exit nor at runsc's
    own some 25 ms later: the exit status is the sentry's for the program's own process (137 is an
    exit code, as natively, not the shell's "killed by signal 9"), the output what the pipes hold
    then, whole. A child the program leaves behind does not hold the run. When the sentry takes
    the call only after the loader has exited and been reaped (an entry taken as soon as it is
    ready, as here: a few runs in a hundred), the Wait call for the container's init answers
    instead, with the stage shell's status (exit 137 then reads as SIGKILL, as a cold run's does).
    The debug log says which end a run took (a runsc whose protocol differs would end every run at
    its exit, as right and slower)."""
    env = {**os.environ, "SANDBOXD_LOG": "debug"}
    cases = (("import sys; print('out'); sys.stdout.flush(); print('err', file=sys.stderr); "
              "sys.exit(3)", 3, None, "out\n", "err\n"),
             ("import os, sys; sys.stdout.write('x' * 300000); sys.stdout.flush(); "
              "os.kill(os.getpid(), 9)", None, signal.SIGKILL, "x" * 300000, ""),
             ("import subprocess, sys; subprocess.Popen(['sleep', '30']); sys.exit(137)", 137,
              None, "", ""))
    # The first case again: each is a race between the call and the loader's exit, which
    # either answer must end right and at once.
    cases += (cases[0],) * 6
    for code, exit_code, signo, stdout, stderr in cases:
        proc = cli("run", "--json", *GVISOR, "--pooled", "--lang", "python", "-c", code, env=env)
        r = json.loads(proc.stdout)
        assert b"the run ended at the sentry's answer" in proc.stderr, proc.stderr[-2000:]
        assert r["pooled"] and not r["evidence"]["wall_timeout"] and r["usage"]["wall_ms"] < 5000, r
        if exit_code == 137 and b"answer for the init" in proc.stderr:
            exit_code, signo = None, signal.SIGKILL
        assert r["exit_code"] == exit_code and r["signal"] == signo, r
        assert (r["stdout"], r["stderr"]) == (stdout, stderr) and not r["truncated"]["stdout"]
    # Nor does a cold run's stderr get the stage shell's "Killed" (spec.h), which a warm run
    # would get too from the init's answer.
    cold = json.loads(cli("run", "--json", *GVISOR, "--lang", "python", "-c", cases[1][0]).stdout)
    assert (cold["signal"], cold["stdout"], cold["stderr"]) == (signal.SIGKILL, cases[1][3], "")


@pytest.mark.parametrize("language", ["sh", "bash"])
def test_an_exec_entry_runs_sh_and_bash_warm(run, language):
    """sh's and bash's pool entries on gVisor are exec entries: Python's loader waits, and execs
    the execution's program in its own place (gvisor/spec.h). What the program sees is a cold
    run's: argv, environment, cwd, files, stdin, rlimits, SIGPIPE's default disposition (the
    interpreter ignores it), and so are its exit status and its signal."""
    code = ('echo "$0 $*"; env | sort; pwd; ulimit -n; (ulimit -u || ulimit -p) 2>/dev/null; '
            'read line; echo "got $line"; yes | head -1; echo err >&2; exit 7')
    results = [run(code, language, *GVISOR, *mode, stdin="hello\n", args=("a b", "c"))
               for mode in (("--pooled",), ())]
    assert [r["pooled"] for r in results] == [True, False]
    for r in results:
        r.expect("exit_nonzero", rc=7)
    assert results[0]["stdout"] == results[1]["stdout"] and results[0]["stderr"] == "err\n"
    assert "/workspace/main.sh a b c\n" in results[0]["stdout"], results[0]["stdout"]
    assert "\n1024\n72\ngot hello\ny\n" in results[0]["stdout"], results[0]["stdout"]
    killed = run("echo before; kill -9 $$", language, *GVISOR, "--pooled")
    assert killed["pooled"] and killed["signal"] == signal.SIGKILL and killed["stdout"] == "before\n"
    missing = run("exec /nonexistent", language, *GVISOR, "--pooled")
    assert missing["pooled"] and missing["exit_code"] == 127


# The program's own binary, from the run stage's point of view: each attempt's errno name.
SELF_WRITER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
static const char *outcome(int rc) { return rc == 0 ? "done" : strerrorname_np(errno); }
int main(int argc, char **argv) {
    struct stat st;
    printf("%s %d %s\n", argv[0], argc, argv[1]);
    printf("write %s\n", outcome(open(argv[0], O_WRONLY) < 0 ? -1 : 0));
    printf("unlink %s\n", outcome(unlink(argv[0])));
    printf("rename %s\n", outcome(rename(argv[0], "moved")));
    printf("chmod %s\n", outcome(chmod(argv[0], 0777)));
    printf("umount %s\n", outcome(umount2(argv[0], MNT_DETACH)));
    printf("mode %o\n", stat(argv[0], &st) == 0 ? st.st_mode & 07777 : 0);
    printf("scratch %s\n", outcome(open("scratch", O_WRONLY | O_CREAT, 0644) < 0 ? -1 : 0));
    return 4;
}
"""


def test_a_compiled_program_builds_and_runs_inside(run):
    """A compiled language on gVisor: the compile stage is a gVisor sandbox of its own, whose
    artifact comes back on stdout after the program's output (gvisor/spec.h), and the run stage
    gets it read-only, a mount it cannot write, move, remove or undo, as natively."""
    native, gvisor = (run(SELF_WRITER_C, "c", "--backend", b, args=("x",))
                      for b in ("native", "gvisor"))
    for r in (native, gvisor):
        r.expect("exit_nonzero", rc=4)
        assert r["compile"]["status"] == "ok" and r["compile"]["stdout"] == ""
    assert gvisor["backend"] == "gvisor"
    assert gvisor["compile"]["usage"]["cpu_ms"] > 0
    lines = [dict(line.split(" ", 1) for line in r["stdout"].splitlines()[1:])
             for r in (native, gvisor)]
    assert native["stdout"].splitlines()[0] == gvisor["stdout"].splitlines()[0] == \
        "/workspace/main 2 x"
    # gVisor has no ETXTBSY: its read-only mount answers the write instead; and its unlink of a
    # mount point says EISDIR where Linux says EBUSY (gVisor 2022-12). Refused either way.
    assert lines[0].pop("write") == "ETXTBSY" and lines[1].pop("write") == "EROFS"
    assert lines[0].pop("unlink") == "EBUSY" and lines[1].pop("unlink") == "EISDIR"
    assert lines[0] == lines[1], lines
    assert lines[1]["mode"] == "555" and lines[1]["scratch"] == "done"
    assert all(lines[1][k] != "done" for k in ("rename", "chmod", "umount")), lines

    # A compile error is the compiler's diagnostic, as natively; no run.
    failed = [run("int main(void) { return missing; }", "c", "--backend", b)
              for b in ("native", "gvisor")]
    for r in failed:
        assert r["status"] == "compile_error" and r["compile"]["status"] == "exit_nonzero"
        assert "main.c:1:" in r["compile"]["stderr"] and "missing" in r["compile"]["stderr"]
    assert failed[0]["compile"]["stderr"] == failed[1]["compile"]["stderr"]
    # An artifact larger than the run's disk never reaches a run; larger than the output cap
    # (the compile's stdout carries it) it does.
    big = "char big[3 << 20] = {1};\nint main(int c, char **v) { (void)v; return big[c << 12]; }\n"
    refused = run(big, "c", *GVISOR, "--disk", "2M")
    assert refused["status"] == "compile_error" and "does not fit the run's disk" in \
        refused["error"], refused
    ran = run(big, "c", *GVISOR, "--disk", "8M", "--output", "64K")
    ran.expect("ok", rc=0)
    assert ran["compile"]["status"] == "ok" and not ran["compile"]["truncated"]["stdout"]


@pytest.mark.skipif(SANITIZED, reason="the normal build's stage runs it: sandboxd's code is C's "
                    "test's, the 8 s are Go's toolchain under ptrace")
def test_go_builds_and_runs_inside(run):
    """Go's toolchain (a build of many processes, its cache in the sandbox) under gVisor."""
    r = run('package main\nimport "fmt"\nfunc main() { fmt.Println(6 * 7) }\n', "go", *GVISOR,
            timeout=120)
    r.expect("ok", rc=0)
    assert r["stdout"] == "42\n" and r["compile"]["status"] == "ok"


def test_what_it_cannot_run_yet_is_refused(cli):
    pooled = cli("run", *GVISOR, "--pooled", "--lang", "javascript", "-c", "1")
    assert pooled.returncode == 64 and b"language on its backend" in pooled.stderr
    compiled = cli("run", *GVISOR, "--pooled", "--lang", "c", "-c", "int main(void) { return 0; }")
    assert compiled.returncode == 64 and b"language on its backend" in compiled.stderr
    unknown = cli("run", "--backend", "nope", "-c", "print(1)")
    assert unknown.returncode == 64 and b"known: native, gvisor, uml" in unknown.stderr


def test_a_tier_selects_it_over_http():
    tiers = {"both": {"languages": "python, c", "backends": "native, gvisor"},
             "native_only": {"languages": "python"}}
    with running_server(tiers=tiers, tenants={"acme": "both", "initech": "native_only"},
                        pools=NO_POOL) as srv:
        body = {"language": "python", "code": "import os\nprint(sorted(os.listdir('/sys')))",
                "backend": "gvisor"}
        result = expect_json(srv.post_execution(body))
        assert result["status"] == "ok" and result["backend"] == "gvisor"
        assert result["stdout"] == "[]\n" and result["usage"]["cpu_ms"] > 0
        native = expect_json(srv.post_execution(dict(body, backend="native")))
        assert native["backend"] == "native" and native["status"] == "exit_nonzero"  # no /sys
        # The request's environment reaches the program whole (the stage shell exports it
        # last, after its own helpers ran with an environment of their own: spec.h).
        greeting = "a b$c'\"\\ *"
        with_env = {"language": "python", "env": {"GREETING": greeting, "LOCPATH": "/x"},
                    "code": "import os\nprint(sorted(os.environ.items()))"}
        outputs = [expect_json(srv.post_execution(dict(with_env, backend=b)))["stdout"]
                   for b in ("native", "gvisor")]
        assert outputs[0] == outputs[1] and repr(("GREETING", greeting)) in outputs[0], outputs
        expect_problem(srv.post_execution(body, tenant="initech"), 403, field="backend")
        compiled = {"language": "c", "code": "int main(void) { return 3; }", "backend": "gvisor"}
        result = expect_json(srv.post_execution(compiled))
        assert (result["status"], result["exit_code"], result["backend"]) == \
            ("exit_nonzero", 3, "gvisor") and result["compile"]["status"] == "ok"
        languages = {entry["name"]: entry["backends"]
                     for entry in expect_json(srv.get("/v1/languages", headers=srv.headers()))["languages"]}
        assert languages["python"] == ["native", "gvisor", "uml"]
        assert languages["c"] == ["native", "gvisor"]


def test_a_warm_entry_takes_the_requests_limits(run):
    # The entry was made under loose limits; acquire set the request's on the cgroup and the
    # loader set its rlimits inside, where no prlimit reaches. Its start-up is not the request's.
    code = ("import resource as r\n"
            "print(*(r.getrlimit(getattr(r, 'RLIMIT_' + n)) for n in"
            " ('NOFILE', 'NPROC', 'CPU', 'FSIZE', 'CORE')), sep='|')\n"
            "try:\n    r.setrlimit(r.RLIMIT_NOFILE, (64, 4096))\nexcept ValueError as e:\n"
            "    print('raise refused')\n")
    flags = ("--open-files", "64", "--pids", "10", "--cpu-time", "3s")
    cold = run(code, "python", *GVISOR, *flags)
    warm = run(code, "python", *GVISOR, "--pooled", *flags)
    for r in (cold, warm):
        r.expect("ok", rc=0)
    assert warm["pooled"] and not cold["pooled"]
    assert warm["stdout"] == cold["stdout"], (warm["stdout"], cold["stdout"])
    assert warm["stdout"].splitlines() == [
        "(64, 64)|(18, 18)|(3, 4)|(67108864, 67108864)|(0, 0)", "raise refused"]
    # The interpreter's start-up under gVisor (~0.3 s of CPU) was the entry's, not this run's.
    assert warm["usage"]["cpu_ms"] < cold["usage"]["cpu_ms"], (warm["usage"], cold["usage"])


def test_a_gvisor_pool_serves_gvisor_requests_only():
    tiers = {"both": {"languages": "python", "backends": "native, gvisor"}}
    pools = {"python": {"min_idle": 0}, "python.gvisor": {"min_idle": 1, "max_idle": 1}}
    with running_server(tiers=tiers, tenants={"acme": "both"}, pools=pools) as srv:
        srv.wait_pool_ready()
        body = {"language": "python", "code": "import sys; print(sys.stdin.read() * 2)",
                "stdin": "ab", "backend": "gvisor"}
        warm = expect_json(srv.post_execution(body))
        assert (warm["status"], warm["stdout"], warm["backend"]) == ("ok", "abab\n", "gvisor")
        assert warm["pooled"] is True and warm["timing"]["acquire_us"] > 0
        # A native request never takes a gVisor entry (nor the other way round).
        srv.wait_pool_ready()
        native = expect_json(srv.post_execution(dict(body, backend="native")))
        assert native["backend"] == "native" and native["pooled"] is False
        srv.wait_pool_ready()
        assert expect_json(srv.post_execution(body))["pooled"] is True
        metrics = srv.metrics()
        assert sample(metrics, "sandboxd_backend_executions_total", backend="gvisor",
                      status="ok") == 2
        assert sample(metrics, "sandboxd_backend_executions_total", backend="native",
                      status="ok") == 1
        assert sample(metrics, "sandboxd_backend_duration_seconds_count", backend="gvisor") == 2


def test_the_platform_key_reaches_runsc():
    # This runsc (2022-12) knows ptrace and kvm; systrap came later: runsc itself refuses it,
    # which shows the key is what runsc was given. ptrace, the default, serves the rest of this
    # file; kvm hangs on these machines (MACHINE.md).
    tiers = {"gvisor": {"languages": "python", "backends": "gvisor"}}
    with running_server(tiers=tiers, tenants={"acme": "gvisor"}, pools=NO_POOL,
                        server={"gvisor_platform": "systrap"}) as srv:
        body = {"language": "python", "code": "print(1)", "backend": "gvisor"}
        result = expect_json(srv.post_execution(body))
        assert result["status"] != "ok" and "unknown platform: systrap" in result["stderr"], result
    with running_server(tiers=tiers, tenants={"acme": "gvisor"}, pools=NO_POOL,
                        server={"gvisor_platform": "ptrace"}) as srv:
        result = expect_json(srv.post_execution(body))
        assert (result["status"], result["stdout"]) == ("ok", "1\n"), result


ORPHAN_MIN_AGE_S = 2  # cgroup_slot.c


def runsc_processes():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and os.path.basename(cmdline(p)[0]).startswith(b"runsc")]


@pytest.mark.alone  # counts every runsc process, and another start would reconcile first
def test_a_crash_leaves_nothing_of_runsc_after_the_next_start():
    """kill -9 of the engine and of the worker running a gVisor execution: runsc, its sandbox and
    the slot's directory under /run/sandboxd-gvisor stay behind; the next start's reconcile kills
    them with the slot's cgroups and removes the directory too (the slot's orphan cleaner)."""
    run_dir = "/run/sandboxd-gvisor"
    tiers = {"gvisor": {"languages": "python", "backends": "gvisor"}}
    body = {"language": "python", "code": "import time\nprint('up', flush=True)\ntime.sleep(60)",
            "backend": "gvisor", "limits": {"wall_ms": 60000}}
    before = set(os.listdir(run_dir)) if os.path.isdir(run_dir) else set()
    with kept_data_dir() as data_dir:
        with running_server(tiers=tiers, tenants={"acme": "gvisor"}, data_dir=data_dir,
                            pools=NO_POOL) as srv:
            srv.expected_rc = -signal.SIGKILL
            thread = threading.Thread(target=lambda: srv.post_execution(body), daemon=True)
            thread.start()
            deadline = time.monotonic() + 30
            while not runsc_processes():
                assert time.monotonic() < deadline, "runsc never started"
                time.sleep(0.05)
            for worker in children_of(srv.pid):
                if worker != srv.api_pid():
                    os.kill(worker, signal.SIGKILL)
            srv.signal(signal.SIGKILL)
            assert srv.wait_exit(10) == -signal.SIGKILL
            left = set(os.listdir(run_dir)) - before
            assert left and runsc_processes(), "the crash left nothing to reconcile"
            thread.join(timeout=30)
            # Younger slots may be another process's in the making (cgroup_slot.c).
            time.sleep(ORPHAN_MIN_AGE_S + 0.5)
            # The next start, before the crashed one's leak check (which would clear its
            # leftovers itself): reconciled before it served, no runsc, no directory of the slot.
            with running_server(tiers=tiers, tenants={"acme": "gvisor"}, data_dir=data_dir,
                                pools=NO_POOL) as again:
                assert not runsc_processes()
                assert not (set(os.listdir(run_dir)) & left), os.listdir(run_dir)
                result = expect_json(again.post_execution(dict(body, code="print(7)")))
                assert (result["status"], result["stdout"]) == ("ok", "7\n"), result
