"""The uml backend (`--backend uml`, src/sandbox/uml): the program runs on a user-mode-linux kernel
of its own, which runs in a native sandbox. Each run boots a guest (~0.6 s): every cap hit for
real, judged on the guest kernel's evidence, with a control under them; a report the program
cannot forge; the second boundary as the host sees it; and nothing left behind (the autouse leak
check: the UML kernel and its guest's processes are the native sandbox's, in its cgroup)."""

import json
import os
import platform
import signal
import subprocess
import time

import pytest

from conftest import SANDBOXD, SANITIZED
from serve_helpers import (NO_POOL, children_of, cmdline, expect_json, expect_problem,
                           proc_status, running_server, sse_events)

UML_KERNEL = "/usr/bin/linux.uml"

pytestmark = pytest.mark.skipif(
    not os.access(UML_KERNEL, os.X_OK),
    reason=f"{UML_KERNEL} is missing (scripts/install-deps.sh installs Debian's user-mode-linux)")

UML = ("--backend", "uml")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module", autouse=True)
def uml_runs_here(tmp_path_factory):
    """Debian's UML 6.1 cannot run programs on some hosts (tests/uml/run.sh: a CPU whose FPU state
    the host refuses to let UML write): that is the machine lacking the feature, a SKIP. The probe
    is tests/uml's own, without sandboxd, so that a fault of sandboxd's is never taken for it."""
    uml_dir = tmp_path_factory.mktemp("uml-probe")
    probe = subprocess.Popen(
        [UML_KERNEL, "mem=256M", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro",
         f"init={REPO}/tests/uml/probe.sh", "quiet", "loglevel=1", "con=null", "con0=fd:0,fd:1",
         "umid=sandboxd-test-probe", f"uml_dir={uml_dir}", "pty.legacy_count=0",
         "initcall_blacklist=raid6_select_algo,init_btrfs_fs"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        seen = probe.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        seen = "no answer within 60 s"
    finally:
        # The kernel's processes are one session: none outlives the probe.
        try:
            os.killpg(probe.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        probe.wait()
    if "sandboxd-uml-probe: ok" not in seen:
        pytest.skip(f"linux.uml cannot run programs on this host (Linux {platform.release()}): "
                    f"{seen.strip()[-300:]}")


@pytest.fixture(params=["cold", "pooled"])
def uml(request):
    """The flags of a uml run: cold, or through a warm-pool entry made for it (booted, its
    loader waiting in the guest for the take on console 4: uml.c's pool mode); the result says
    pooled."""
    return UML + (("--pooled",) if request.param == "pooled" else ())


# Each run boots a guest: the sanitized build (whose share here is uml.c's host side, the same in
# every run) runs the tests that reach each of its paths, not every cap again.
BOOTS_EVERY_CAP = pytest.mark.skipif(
    SANITIZED, reason="the caps are the guest's: the normal build's stage covers them (a guest "
                      "boot per run)")


def test_a_kernel_of_its_own_with_the_native_view_files_stdin_and_exit_code(run, uml, tmp_path):
    (tmp_path / "data.bin").write_bytes(bytes(range(256)) * 64)
    code = ("import hashlib, json, os, sys\n"
            "print(json.dumps({'root': sorted(os.listdir('/')), 'cwd': os.getcwd(),\n"
            "  'uid': os.getuid(), 'release': os.uname().release,\n"
            "  'caps': open('/proc/self/status').read().split('CapEff:')[1].split()[0],\n"
            "  'workspace': sorted(os.listdir('.')), 'home': os.environ.get('HOME'),\n"
            "  'args': sys.argv[1:],\n"
            "  'data': hashlib.sha256(open('dir/data.bin', 'rb').read()).hexdigest(),\n"
            "  'stdin': open('/dev/stdin', 'rb').read().hex(),\n"
            "  'reopened': open('/dev/stderr', 'w').write('')}))\n"
            "sys.stderr.write('to stderr\\n')\n"
            "sys.exit(3)\n")
    stdin = b"\x00in\r\n\xff"
    flags = ("--file", f"{tmp_path / 'data.bin'}:dir/data.bin")
    native = run(code, "python", *flags, stdin=stdin, args=("a", "b c"))
    assert "guest" not in native["evidence"]  # no kernel of its own
    r = run(code, "python", *uml, *flags, stdin=stdin, args=("a", "b c"))
    r.expect("exit_nonzero")
    assert r["backend"] == "uml" and r["pooled"] == ("--pooled" in uml)
    assert r["exit_code"] == 3 and r["signal"] is None
    # Raw consoles: "\n" is not "\r\n", the bytes of stdin arrive as they are, and stderr is a
    # stream of its own.
    assert r["stdout"].endswith("}\n") and r["stderr"] == "to stderr\n", r.describe()
    guest, host = json.loads(r["stdout"]), json.loads(native["stdout"])
    # The guest's kernel is Debian's UML build, not the host's; what the program sees of the
    # files is the native sandbox's view, and the guest's staging (.sbx-uml) is not in it.
    assert guest["release"] != platform.release() and host["release"] == platform.release()
    # Its stdio is its own, reopened by name as natively (the pipes are the program's uid's).
    for key in ("root", "cwd", "uid", "workspace", "home", "args", "data", "stdin", "reopened"):
        assert guest[key] == host[key], (key, guest, host)
    assert guest["stdin"] == stdin.hex() and guest["workspace"] == ["dir", "main.py"]
    assert guest["caps"] == host["caps"] == "00000000000000eb"  # the native root's six


# What a shell program sees of itself: its arguments, files (a nested one, executable), stdin's
# bytes, its ids, rlimits and security state, the workspace as it finds it, and two streams.
SHELL_VIEW = """
printf '%s|' "$0" "$#" "$@"; echo
ls -lnR . | grep -v '^total'
sha256sum dir/sub/data.bin; test -x dir/sub/data.bin && echo executable
od -An -tx1 | tr -d ' \\n'; echo
id; ulimit -a; umask
grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd)' /proc/self/status
echo to stderr >&2
exit 5
"""


@pytest.mark.parametrize("language", ["sh", "bash"])
def test_an_exec_entry_runs_a_shell_program_as_a_cold_guest_does(run, language, tmp_path):
    """A language without a loader (sh, bash) pooled on uml: a booted guest whose init waits,
    then writes the execution's files and starts the program itself (guest/uml_init.c's exec
    mode). Whatever the program can see is a cold guest's."""
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 16)
    data.chmod(0o755)
    stdin = b"\x00in\r\n\xff"
    flags = ("--file", f"{data}:dir/sub/data.bin")
    cold = run(SHELL_VIEW, language, *UML, *flags, stdin=stdin, args=("a", "b c"))
    warm = run(SHELL_VIEW, language, *UML, "--pooled", *flags, stdin=stdin, args=("a", "b c"))
    cold.expect("exit_nonzero")
    warm.expect("exit_nonzero")
    assert (cold["pooled"], warm["pooled"]) == (False, True)
    assert warm["exit_code"] == cold["exit_code"] == 5
    # (ls -n's dates are each run's own: the lines are compared without them.)
    def undated(text):
        return [" ".join(line.split()[:5] + line.split()[8:]) if line.startswith(("-", "d"))
                else line for line in text.splitlines()]
    assert undated(warm["stdout"]) == undated(cold["stdout"]), (warm["stdout"], cold["stdout"])
    assert warm["stderr"] == cold["stderr"] == "to stderr\n"
    assert "main.sh|2|a|b c|" in warm["stdout"] and "executable\n" in warm["stdout"]
    assert "00696e0d0aff" in warm["stdout"] and "Seccomp:\t2" in warm["stdout"]


@BOOTS_EVERY_CAP
def test_memory_pids_and_disk_caps_are_the_guest_kernels_with_its_evidence(run, uml):
    # Pooled, the guest booted with the pool's memory (256 MiB) and disk: the take lowers the
    # program's cgroup to the request's caps (a request for another disk size runs cold).
    hog = "x = []\nwhile True: x.append(bytearray(1 << 20))"
    r = run(hog, "python", *uml, "--memory", "64M", "--timeout", "20s")
    r.expect("memory_limit")
    assert r["evidence"]["oom_kills"] >= 1 and r["signal"] == signal.SIGKILL, r.describe()
    assert r["usage"]["memory_peak_bytes"] <= 64 << 20
    # The guest kernel's own counters, beside the host's (which count them too): its OOM killer
    # (or init's thrash guard) ended the program at the guest cgroup's cap.
    guest = r["evidence"]["guest"]
    assert guest["oom_kills"] + guest["thrash_kills"] >= 1 and guest["memory_max_events"] >= 1
    assert r["evidence"]["oom_kills"] >= guest["oom_kills"] + guest["thrash_kills"]
    assert guest["memory_peak_bytes"] == r["usage"]["memory_peak_bytes"], guest

    bomb = ("import os, time\nn = 0\ntry:\n"
            "    while True:\n"
            "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
            "        n += 1\n"
            "except OSError as e:\n    print(n, e.errno)\n")
    r = run(bomb, "python", *uml, "--pids", "8", "--timeout", "20s")
    r.expect("pids_limit")
    # EAGAIN at the native backend's count: the program and its keeper (the native sandbox's
    # init) are two of the 8.
    assert r["stdout"] == "6 11\n", r.describe()
    assert r["evidence"]["pids_max_events"] >= 1
    guest = r["evidence"]["guest"]
    assert guest["pids_max_events"] >= 1 and guest["pids_peak"] == 8, guest

    # The control, under both caps at once: 16 MiB and four forks.
    control = run("import os\nx = bytearray(16 << 20)\n"
                  "pids = [os.fork() or os._exit(0) for _ in range(4)]\n"
                  "for pid in pids: os.waitpid(pid, 0)\nprint('done')",
                  "python", *uml, "--memory", "64M", "--pids", "8")
    control.expect("ok", rc=0)
    assert control["pooled"] == ("--pooled" in uml)
    assert control["evidence"]["oom_kills"] == control["evidence"]["pids_max_events"] == 0
    guest = control["evidence"]["guest"]
    assert guest["oom_kills"] == guest["pids_max_events"] == guest["thrash_kills"] == 0
    assert 16 << 20 <= guest["memory_peak_bytes"] <= 64 << 20, guest
    if "--pooled" in uml:
        return

    fill = ("import errno\nfor path in ('/workspace/f', '/tmp/f'):\n"
            "    try:\n        open(path, 'wb').write(b'x' * (12 << 20)); print(path, 'ok')\n"
            "    except OSError as e:\n        print(path, errno.errorcode[e.errno])\n")
    r = run(fill, "python", *UML, "--disk", "8M")
    # One tmpfs behind both, of the disk's size: a file past it meets RLIMIT_FSIZE (the same
    # size, EFBIG) or the tmpfs's end (ENOSPC) first.
    r.expect("disk_full")
    assert r["evidence"]["disk_full"] and r["usage"]["disk_used_bytes"] >= 7 << 20, r.describe()
    assert set(r["stdout"].split()[1::2]) <= {"EFBIG", "ENOSPC"}, r.describe()

    # The disk's control: 2 MiB of 8.
    control = run("open('/workspace/f', 'wb').write(b'x' * (2 << 20)); print('done')",
                  "python", *UML, "--disk", "8M")
    control.expect("ok", rc=0)
    assert control["stdout"] == "done\n" and not control["evidence"]["disk_full"]


@BOOTS_EVERY_CAP
def test_deadline_cpu_time_and_output_cap(run, uml):
    # The deadline is the program's, from its start in the guest (pooled: from the take); the
    # boot before it has an allowance of its own on the host. (3 s: a cold guest's python took
    # over 1 s to print under make test's two integration lanes.)
    r = run("print('spinning', flush=True)\nwhile True: pass", "python", *uml, "--timeout", "3s")
    r.expect("timeout", rc=124)
    assert r["evidence"]["wall_timeout"] and r["signal"] == signal.SIGKILL
    assert r["stdout"] == "spinning\n"
    assert 3000 <= r["usage"]["wall_ms"] <= 3500, r.describe()
    cpu = run("while True: pass", "python", *uml, "--cpu-time", "1s", "--timeout", "20s")
    cpu.expect("timeout")
    assert cpu["signal"] == signal.SIGXCPU and not cpu["evidence"]["wall_timeout"]
    out = run("print('y' * 5000)", "python", *uml, "--output", "1000")
    out.expect("output_limit")
    assert out["truncated"]["stdout"] and out["stdout"] == "y" * 1000


def test_the_program_cannot_forge_its_report_lift_its_caps_or_end_the_guest(run):
    # The report travels on a console only init holds; the program is not the guest's root (its
    # user namespace maps its uid 0 to another), holds no capability, and runs under the native
    # backend's seccomp filter: what it prints, the files it can reach and the calls it can make
    # change nothing of how its run is judged.
    code = ("import ctypes, errno, os\n"
            "fake = 'sandboxd-uml-report 1 exited=1 code=0 signal=0 wall_timeout=0\\n'\n"
            "print(fake, end='', flush=True)\n"
            "os.write(2, fake.encode())\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "for call in (lambda: libc.reboot(0x4321fedc),\n"
            "             lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),\n"
            "             lambda: libc.unshare(0x10000000)):\n"  # CLONE_NEWUSER
            "    print(call(), errno.errorcode[ctypes.get_errno()])\n"
            "for path in ('/proc/sys/kernel/core_pattern', '/proc/1/fd', '/proc/exitcode',\n"
            "             '/dev/tty3', '/dev/console', '/dev/.sbx-cgroup/job/pids.max'):\n"
            "    print(path, os.path.exists(path))\n"
            "print(open('/proc/self/uid_map').read().split(), flush=True)\n"
            "os._exit(5)\n")
    r = run(code, "python", *UML, "--pids", "8")
    r.expect("exit_nonzero")
    assert r["exit_code"] == 5, r.describe()
    lines = r["stdout"].splitlines()
    assert lines[0].startswith("sandboxd-uml-report 1 ") and lines[1:4] == ["-1 EPERM"] * 3, lines
    assert all(line.endswith(" False") for line in lines[4:10]), lines
    assert lines[10] == "['0', '100000', '65536']", lines  # uid 0 here is the guest's 100000
    assert r["evidence"]["pids_max_events"] == 0 and r["limits"]["pids"] == 8


def descendants(pid):
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found


def test_the_kernel_is_a_native_sandboxs_program_without_capabilities():
    # The second boundary behind the guest kernel, seen from the host while a run sleeps: every
    # process of the UML kernel (the kernel and its guest processes' stubs) is an unprivileged id
    # of the sandbox's range, with no capability at all, no_new_privs and a seccomp filter.
    run = subprocess.Popen([SANDBOXD, "run", "--backend", "uml", "--json", "-c",
                            "import time; print('up', flush=True); time.sleep(4)"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        kernels = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(kernels) < 2:
            kernels = [pid for pid in descendants(run.pid)
                       if (cmdline(pid) or [b""])[0] == b"/usr/bin/linux.uml"]
            time.sleep(0.2)
        assert len(kernels) >= 2, "no UML kernel and guest process found on the host"
        for pid in kernels:
            status = proc_status(pid)
            if status is None:
                continue  # a guest process's stub that ended meanwhile
            assert int(status["Uid"].split()[0]) >= 2_000_000_000, status["Uid"]
            for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert int(status[field], 16) == 0, (pid, field, status[field])
            assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
    finally:
        out, err = run.communicate(timeout=60)
    result = json.loads(out)
    assert result["status"] == "ok" and result["stdout"] == "up\n", (result, err[-2000:])


def test_what_it_cannot_run_yet_is_refused(cli):
    compiled = cli("run", *UML, "--lang", "c", "-c", "int main(void) { return 0; }")
    assert compiled.returncode == 64 and b"no compile stage" in compiled.stderr
    # JavaScript's loader takes its execution on a socket only: no uml pool for it.
    pooled = cli("run", *UML, "--pooled", "--lang", "javascript", "-c", "1")
    assert pooled.returncode == 64 and b"language on its backend" in pooled.stderr, pooled.stderr
    unknown = cli("run", "--backend", "nope", "-c", "print(1)")
    assert unknown.returncode == 64 and b"known: native, gvisor, uml" in unknown.stderr


def test_a_tier_selects_it_over_http_and_streams_its_output():
    tiers = {"all": {"languages": "python, c", "backends": "native, gvisor, uml"},
             "native_only": {"languages": "python"}}
    with running_server(tiers=tiers, tenants={"acme": "all", "initech": "native_only"},
                        pools=NO_POOL) as srv:
        body = {"language": "python", "backend": "uml",
                "code": "import os, time\nprint(os.uname().release, flush=True)\n"
                        "time.sleep(1)\nprint('end')"}
        # Streamed: the first line arrives while the program sleeps, from the guest's console
        # through the native supervisor, as any program's output does.
        with srv.request("POST", "/v1/executions", data=json.dumps(body), stream=True,
                         headers=srv.headers(extra={"Accept": "text/event-stream"})) as r:
            assert r.status_code == 200, r.text
            events = list(sse_events(r))
        stdout = [(data["text"], at) for event, data, at in events if event == "stdout"]
        end = [(data, at) for event, data, at in events if event == "end"]
        assert len(end) == 1 and end[0][0]["status"] == "ok" and end[0][0]["backend"] == "uml"
        release = end[0][0]["stdout"].split()[0]
        assert end[0][0]["stdout"] == f"{release}\nend\n" and release != platform.release()
        assert stdout[0][0] == f"{release}\n" and stdout[0][1] <= end[0][1] - 0.8, events
        expect_problem(srv.post_execution(body, tenant="initech"), 403, field="backend")
        compiled = {"language": "c", "code": "int main(void) { return 0; }", "backend": "uml"}
        expect_problem(srv.post_execution(compiled), 400, field="backend")
        languages = {entry["name"]: entry["backends"]
                     for entry in expect_json(srv.get("/v1/languages",
                                                      headers=srv.headers()))["languages"]}
        assert languages["python"] == ["native", "gvisor", "uml"]
        assert languages["c"] == ["native", "gvisor"]


def test_a_uml_pool_serves_uml_requests_that_fit_its_guest():
    # Its guests boot with the RAM of 512 MiB of memory cap (the pool's memory_mb: its key).
    tiers = {"both": {"languages": "python, sh", "backends": "native, uml",
                      "max_memory_mb": 1024}}
    pools = {"python": {"min_idle": 0}, "sh": {"min_idle": 0},
             "python.uml": {"min_idle": 1, "max_idle": 1, "memory_mb": 512},
             "sh.uml": {"min_idle": 1, "max_idle": 1}}
    with running_server(tiers=tiers, tenants={"acme": "both"}, pools=pools) as srv:
        # (Each uml pool's entry idle: Python's is taken by each request below, sh's by the
        # last.)
        srv.wait_pool_ready(idle=2)
        body = {"language": "python", "backend": "uml", "stdin": "ab",
                "code": "import os, sys\nprint(sys.stdin.read() * 2, os.uname().release)"}
        warm = expect_json(srv.post_execution(body))
        assert (warm["status"], warm["backend"], warm["pooled"]) == ("ok", "uml", True), warm
        release = warm["stdout"].split()[1]
        assert warm["stdout"] == f"abab {release}\n" and release != platform.release()
        # The guest booted and its interpreter started before the request: neither is its run's.
        assert warm["timing"]["acquire_us"] > 0 and warm["usage"]["cpu_ms"] < 400, warm
        # The guest kernel's counters are kept with the record, as the result had them.
        record = expect_json(srv.get(f"/v1/executions/{warm['id']}", headers=srv.headers()))
        assert record["evidence"]["guest"] == warm["evidence"]["guest"], record
        assert warm["evidence"]["guest"]["cpu_usage_us"] < 400000, warm
        # A native request never takes a uml entry; a uml request up to the guests' memory
        # does, and one for more runs cold.
        srv.wait_pool_ready(idle=2)
        native = expect_json(srv.post_execution(dict(body, backend="native")))
        assert native["backend"] == "native" and native["pooled"] is False
        srv.wait_pool_ready(idle=2)
        fits = expect_json(srv.post_execution(dict(body, limits={"memory_mb": 512})))
        assert (fits["status"], fits["pooled"], fits["limits"]["memory_mb"]) == ("ok", True, 512)
        srv.wait_pool_ready(idle=2)
        bigger = expect_json(srv.post_execution(dict(body, limits={"memory_mb": 1024})))
        assert (bigger["status"], bigger["backend"], bigger["pooled"]) == ("ok", "uml", False)
        assert bigger["limits"]["memory_mb"] == 1024
        # More than the console should carry on the program's clock (256 KiB) runs cold too.
        srv.wait_pool_ready(idle=2)
        heavy = expect_json(srv.post_execution(dict(body, stdin="x" * (300 << 10))))
        assert (heavy["status"], heavy["pooled"]) == ("ok", False), heavy["status"]
        assert heavy["stdout"].startswith("x" * 1000)
        srv.wait_pool_ready(idle=2)
        again = expect_json(srv.post_execution(body))
        assert again["pooled"] is True and again["stdout"] == warm["stdout"]
        # sh's pool: exec entries, whose init starts the program itself.
        shell = {"language": "sh", "backend": "uml", "stdin": "ab",
                 "code": "read line; echo \"$line$line\" $(uname -r)"}
        warm_sh = expect_json(srv.post_execution(shell))
        assert (warm_sh["status"], warm_sh["pooled"]) == ("ok", True), warm_sh
        assert warm_sh["stdout"] == f"abab {release}\n", warm_sh
