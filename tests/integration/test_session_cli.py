"""Sessions through `sandboxd session` (engine/session.c, the sandboxed session agent): state that
survives between runs, rich results, interrupts and restarts, the caps of a session, files, and
an agent that dies. The HTTP API drives the same code."""

import base64
import json
import os
import subprocess

import pytest

from conftest import SANDBOXD, SANITIZED

SLOW = 3 if SANITIZED else 1


class Session:
    def __init__(self, language="python", limits=None, env=None):
        self.process = subprocess.Popen([SANDBOXD, "session"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        opened = self.send({"op": "open", "language": language, "limits": limits or {},
                            "env": env or {}})
        assert opened == {"ok": True, "language": language}, opened

    def send(self, line):
        self.process.stdin.write(json.dumps(line).encode() + b"\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, self.process.stderr.read().decode()
        return json.loads(answer)

    def run(self, code, **fields):
        return self.send({"op": "run", "code": code, **fields})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.returncode is None:
            self.close()

    def close(self):
        self.process.stdin.close()
        try:
            rc = self.process.wait(30 * SLOW)
        except subprocess.TimeoutExpired:
            self.process.kill()
            rc = self.process.wait()
        stderr = self.process.stderr.read().decode()
        self.process.stdout.close()
        self.process.stderr.close()
        return rc, stderr


@pytest.fixture
def python():
    with Session("python") as session:
        yield session
        assert session.close()[0] == 0


@pytest.fixture
def bash():
    with Session("bash", limits={"pids": 32, "output_bytes": 4096}) as session:
        yield session
        assert session.close()[0] == 0


def test_python_state_results_and_errors(python):
    first = python.run("import os\nx = 41\nos.makedirs('d', exist_ok=True)\nos.chdir('d')")
    assert first["status"] == "ok" and first["execution_count"] == 1
    second = python.run("print(os.getcwd(), os.getpid())\nx + 1")
    # the keeper is pid 2, the interpreter pid 3: the sandbox's own pid namespace
    assert second["stdout"] == "/workspace/d 3\n"
    assert second["results"] == [{"text/plain": "42"}]
    third = python.run("def f():\n    return 1 / 0\nf()")
    assert third["status"] == "error"
    error = third["error"]
    assert error["name"] == "ZeroDivisionError"
    assert '  File "<cell 3>", line 2, in f' in error["traceback"]
    assert not [line for line in error["traceback"] if "session_agent" in line]
    assert python.run("x")["results"] == [{"text/plain": "41"}]
    for run in (first, second, third):
        assert len(run["id"]) == 32 and run["evidence"]["oom_kills"] == 0


def test_python_stdin_and_env(python):
    run = python.run("import os, sys\nprint(sys.stdin.read(), os.environ.get('WHO'))",
                     stdin="typed", env={"WHO": "me"})
    assert run["stdout"] == "typed me\n"
    assert python.run("print(os.environ.get('WHO'))")["stdout"] == "None\n"


def test_python_matplotlib_png(python):
    # matplotlib's first import in a fresh home builds its font cache: seconds, more on a busy
    # machine than the default deadline allows.
    run = python.run("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()",
                     timeout_ms=60000)
    assert run["status"] == "ok", run
    [figure] = run["results"]
    assert base64.b64decode(figure["image/png"]).startswith(b"\x89PNG")


def test_timeout_interrupts_and_the_session_goes_on(python):
    python.run("kept = 'yes'")
    run = python.run("import time\ntime.sleep(30)", timeout_ms=300)
    assert run["status"] == "timeout" and run["restarted"] is False
    assert run["error"]["name"] == "KeyboardInterrupt"
    assert run["timing"]["total_us"] < 5_000_000 * SLOW
    assert python.run("kept")["results"] == [{"text/plain": "'yes'"}]


def test_a_cell_that_ignores_interrupts_is_restarted_files_kept(python):
    python.run("lost = 1\nopen('kept.txt', 'w').write('kept')")
    cell = ("import time\nwhile True:\n    try:\n        time.sleep(30)\n"
            "    except KeyboardInterrupt:\n        pass")
    run = python.run(cell, timeout_ms=300)
    assert run["status"] == "timeout" and run["restarted"] is True
    # interrupt at 0.3 s, restart after the 2 s grace
    assert run["timing"]["total_us"] < 10_000_000 * SLOW
    after = python.run("open('kept.txt').read(), 'lost' in globals()")
    assert after["results"] == [{"text/plain": "('kept', False)"}]
    assert after["execution_count"] == 1


def test_memory_cap_restarts_the_interpreter():
    with Session("python", limits={"memory_mb": 64}) as session:
        memory_cap_restarts(session)


def memory_cap_restarts(session):
    session.run("state = 1")
    run = session.run("hog = bytearray(200 * 1024 * 1024)")
    assert run["status"] == "memory_limit" and run["restarted"] is True
    assert run["evidence"]["oom_kills"] >= 1
    assert session.run("'state' in globals()")["results"] == [{"text/plain": "False"}]
    assert session.close()[0] == 0


def test_fork_bomb_hits_pids_and_the_session_survives():
    with Session("python", limits={"pids": 16}) as session:
        fork_bomb(session)


def fork_bomb(session):
    run = session.run("import os\nfor _ in range(100):\n    os.fork() if os.getpid() else 0")
    assert run["status"] == "pids_limit"
    assert run["evidence"]["pids_max_events"] >= 1
    assert session.run("1 + 1")["results"] == [{"text/plain": "2"}]
    assert session.close()[0] == 0


def test_output_cap_ends_the_run(bash):
    run = bash.run("yes | head -c 100000; echo never")
    assert run["status"] == "output_limit"
    assert len(run["stdout"]) == 4096 and run["truncated"]["stdout"] is True
    assert bash.run("echo fine")["stdout"] == "fine\n"


def test_bash_state_and_restart(bash):
    assert bash.run("x=3; cd /tmp; greet() { echo hi $1; }")["status"] == "ok"
    run = bash.run("greet $x; pwd; false")
    assert run["stdout"] == "hi 3\n/tmp\n"
    assert run["status"] == "exit_nonzero" and run["exit_code"] == 1
    run = bash.run("sleep 30", timeout_ms=300)
    assert run["status"] == "timeout" and run["exit_code"] == 130 and not run["restarted"]
    assert bash.run("echo $x")["stdout"] == "3\n"
    run = bash.run("trap '' INT; sleep 30", timeout_ms=300)
    assert run["status"] == "timeout" and run["restarted"] is True
    assert bash.run("echo \"${x:-gone}\"; pwd")["stdout"] == "gone\n/workspace\n"


def test_fake_agent_frames_on_stdout_are_only_output(python):
    fake = ('import json, struct, sys\n'
            'head = json.dumps({"op": "done", "execution_count": 99, "error": None,'
            ' "exit_code": None, "exited": None}).encode()\n'
            'frame = struct.pack("<II", 4 + len(head), len(head)) + head\n'
            'sys.stdout.buffer.write(frame); sys.stdout.flush()\n'
            'import time; time.sleep(0.2)\n'
            '"real"')
    run = python.run(fake)
    assert run["status"] == "ok" and run["execution_count"] == 1
    assert run["results"] == [{"text/plain": "'real'"}]
    assert '"execution_count": 99' in run["stdout"]


def test_an_agent_that_dies_ends_the_session_cleanly(python):
    python.run("x = 1")
    # The interpreter kills its keeper: the sandbox's program is gone.
    run = python.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                     "import time\ntime.sleep(5)")
    assert run["status"] == "internal_error"
    assert "agent is gone" in run["internal_error"]
    again = python.run("x")
    assert again["ok"] is False and "agent is gone" in again["error"]


def test_files_in_and_out(python):
    data = bytes(range(256)) * 4
    assert python.send({"op": "put", "path": "in/data.bin", "mode": 0o755,
                        "data_base64": base64.b64encode(data).decode()}) == {"ok": True,
                                                                            "size": 1024}
    assert python.send({"op": "put", "path": "empty", "data_base64": ""})["ok"] is True
    got = python.send({"op": "get", "path": "/workspace/in/data.bin"})
    assert base64.b64decode(got["data_base64"]) == data
    listing = python.send({"op": "list", "path": "in"})
    assert listing["entries"] == [{"name": "data.bin", "type": "file", "size": 1024,
                                   "mtime": listing["entries"][0]["mtime"], "mode": 0o755}]
    run = python.run("len(open('in/data.bin', 'rb').read())")
    assert run["results"] == [{"text/plain": "1024"}]
    python.run("import os\nos.symlink('/etc', 'etc-link')\nos.mkfifo('fifo')")
    for op, path in [("get", "../etc/passwd"), ("get", "/etc/passwd"), ("get", "etc-link/hostname"),
                     ("put", "etc-link/planted"), ("get", "fifo"), ("get", "in")]:
        refused = python.send({"op": op, "path": path, "data_base64": "eA=="})
        assert refused["ok"] is False and refused["errno"] == "EINVAL", (op, path, refused)
    assert python.send({"op": "delete", "path": "in/data.bin"})["ok"] is True
    assert python.send({"op": "get", "path": "in/data.bin"})["errno"] == "ENOENT"


def test_a_put_over_the_disk_cap_leaves_nothing():
    with Session("python", limits={"disk_mb": 2}) as session:
        put_over_the_cap(session)


def put_over_the_cap(session):
    big = base64.b64encode(os.urandom(3 * 1024 * 1024)).decode()
    refused = session.send({"op": "put", "path": "big.bin", "data_base64": big})
    assert refused["ok"] is False and refused["errno"] == "ENOSPC"
    listing = session.send({"op": "list", "path": "."})
    assert listing["entries"] == []
    assert session.run("1")["status"] == "ok"
    assert session.close()[0] == 0


def test_bad_input_is_refused():
    process = subprocess.run([SANDBOXD, "session"], input=b'{"op": "run", "code": "1"}\n',
                             capture_output=True, timeout=30)
    assert process.returncode == 64 and b"the first op must be open" in process.stderr
    process = subprocess.run([SANDBOXD, "session"], input=b'{"op": "open", "language": "sh"}\n',
                             capture_output=True, timeout=30)
    assert process.returncode == 64 and b"sessions run python or bash" in process.stderr


def test_a_flood_of_frames_ends_the_session_not_the_engine(python):
    # 200 000 tiny display frames written on the agent's channel by the cell itself: the engine
    # reads them in linear time and gives up on the session after 100 000 frames of one run.
    flood = ("import json, os, struct, time\n"
             "h = json.dumps({'op': 'display', 'bundle': {'text/plain': 'x'}}).encode()\n"
             "frame = struct.pack('<II', 4 + len(h), len(h)) + h\n"
             "started = time.monotonic()\n"
             "os.write(3, frame * 200000)\n")
    import time
    started = time.monotonic()
    run = python.run(flood, timeout_ms=30000)
    assert time.monotonic() - started < 20 * SLOW
    assert run["status"] == "internal_error" and "frames" in run["internal_error"]
    again = python.run("1")
    assert again["ok"] is False and "agent is gone" in again["error"]
