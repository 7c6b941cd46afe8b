"""The session agent (guest/session_agent.py) on its own: driven over a socketpair on fd 3, as
the engine drives it, outside a sandbox and in a workspace directory of its own (the agent's
logic; the sandbox around it is the engine's and is tested with sessions). Each test starts a
fresh agent and ends it."""

import base64
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

AGENT = os.path.join(os.path.dirname(__file__), "..", "..", "guest", "session_agent.py")

pytestmark = pytest.mark.skipif(os.environ.get("SANDBOXD_SANITIZED") == "1",
                                reason="pure Python: run once, by the normal build's stage")


def frame(header, payload=b""):
    head = json.dumps(header).encode()
    return ((4 + len(head) + len(payload)).to_bytes(4, "little")
            + len(head).to_bytes(4, "little") + head + payload)


class Agent:
    def __init__(self, language):
        self.workspace = tempfile.mkdtemp(prefix="session-agent-test.")
        ours, theirs = socket.socketpair()
        self.sock = ours
        self.sock.settimeout(30)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.workspace,
               "SANDBOXD_AGENT_WORKSPACE": self.workspace}
        with open(AGENT) as source:
            code = source.read()
        self.stdout = tempfile.TemporaryFile()
        self.stderr = tempfile.TemporaryFile()

        # The channel as fd 3, where the engine puts it (posix_spawn's dup2 clears its
        # close-on-exec; every other fd of this process is close-on-exec).
        self.pid = os.posix_spawn(
            "/usr/bin/python3", ["python3", "-c", code, language], env,
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                          (os.POSIX_SPAWN_DUP2, self.stdout.fileno(), 1),
                          (os.POSIX_SPAWN_DUP2, self.stderr.fileno(), 2),
                          (os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)])
        theirs.close()
        header, _ = self.receive()
        assert header == {"op": "ready", "language": language, "restarted": False}

    def receive_exactly(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                self.stderr.seek(0)
                raise EOFError("the agent closed its channel; its stderr: "
                               + self.stderr.read()[-2000:].decode(errors="replace"))
            data += chunk
        return data

    def receive(self):
        length = int.from_bytes(self.receive_exactly(4), "little")
        header_length = int.from_bytes(self.receive_exactly(4), "little")
        header = json.loads(self.receive_exactly(header_length))
        return header, self.receive_exactly(length - 4 - header_length)

    def run(self, code, stdin=b"", env=None, interrupt_after=None):
        """The run's (displays, done header, stdout, stderr)."""
        out_at, err_at = self.stdout.tell(), self.stderr.tell()
        self.sock.sendall(frame({"op": "run", "code": code, "env": env or {}}, stdin))
        if interrupt_after is not None:
            threading.Timer(interrupt_after,
                            lambda: os.kill(self.pid, signal.SIGINT)).start()
        displays = []
        while True:
            header, _ = self.receive()
            if header["op"] == "display":
                displays.append(header["bundle"])
            else:
                assert header["op"] in ("done", "ended"), header
                return displays, header, self.output(self.stdout, out_at), self.output(
                    self.stderr, err_at)

    @staticmethod
    def output(stream, start):
        stream.seek(start)
        data = stream.read()
        stream.seek(0, os.SEEK_END)
        return data.decode()

    def file(self, op, payload=b"", **fields):
        self.sock.sendall(frame({"op": op, **fields}, payload))
        return self.receive()

    def close(self):
        self.sock.close()
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.02)
        subprocess.run(["rm", "-rf", self.workspace], check=True)


@pytest.fixture
def python():
    agent = Agent("python")
    yield agent
    agent.close()


@pytest.fixture
def bash():
    agent = Agent("bash")
    yield agent
    agent.close()


def test_python_state_survives_between_runs(python):
    assert python.run("x = 40\nimport os\nos.makedirs('sub', exist_ok=True)\nos.chdir('sub')")[
        1]["error"] is None
    displays, done, stdout, _ = python.run("x += 2\nprint(os.getcwd())\nx")
    assert done["execution_count"] == 2
    assert stdout == os.path.join(python.workspace, "sub") + "\n"
    assert displays == [{"text/plain": "42"}]
    assert python.run("_ + 1")[0] == [{"text/plain": "43"}]


def test_python_stdin_and_env_are_the_runs_own(python):
    _, _, stdout, _ = python.run("import os, sys\nprint(sys.stdin.read(), os.environ['GREETING'])",
                                 stdin=b"hello", env={"GREETING": "hi"})
    assert stdout == "hello hi\n"
    _, _, stdout, _ = python.run("print(sys.stdin.read() == '', 'GREETING' in os.environ)")
    assert stdout == "True False\n"


def test_python_error_has_the_cells_traceback_only(python):
    python.run("def f():\n    raise ValueError('bad value')")
    displays, done, _, _ = python.run("y = 1\nf()")
    error = done["error"]
    assert error["name"] == "ValueError" and error["value"] == "bad value"
    text = "\n".join(error["traceback"])
    assert 'File "<cell 2>", line 2, in <module>' in text
    assert 'File "<cell 1>", line 2, in f' in text and "raise ValueError('bad value')" in text
    assert "session_agent" not in text and "<string>" not in text
    # the session goes on
    assert python.run("y")[0] == [{"text/plain": "1"}]


def test_python_rich_outputs(python):
    code = ("class Table:\n"
            "    def _repr_html_(self):\n        return '<table></table>'\n"
            "    def _repr_json_(self):\n        return {'rows': 0}\n"
            "    def __repr__(self):\n        return 'Table()'\n"
            "display(Table(), 'two')\n"
            "Table()")
    displays, done, _, _ = python.run(code)
    assert done["error"] is None
    table = {"text/html": "<table></table>", "application/json": {"rows": 0},
             "text/plain": "Table()"}
    assert displays == [table, {"text/plain": "'two'"}, table]


def test_python_matplotlib_figures_are_png(python):
    displays, done, _, _ = python.run(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
        "plt.figure()\nplt.bar([1], [2])\nNone")
    assert done["error"] is None, done
    assert len(displays) == 2
    for bundle in displays:
        png = base64.b64decode(bundle["image/png"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert bundle["text/plain"].startswith("<Figure size")
    # closed once shown: the next run shows nothing of them
    assert python.run("1")[0] == [{"text/plain": "1"}]


def test_python_interrupt_ends_the_cell_not_the_session(python):
    python.run("z = 7")
    started = time.monotonic()
    _, done, _, _ = python.run("import time\ntime.sleep(20)", interrupt_after=0.5)
    assert time.monotonic() - started < 10
    assert done["error"]["name"] == "KeyboardInterrupt"
    assert python.run("z")[0] == [{"text/plain": "7"}]


def test_python_exit_is_an_error_and_the_session_goes_on(python):
    python.run("w = 5")
    _, done, _, _ = python.run("import sys\nsys.exit(3)")
    assert done["error"]["name"] == "SystemExit" and done["error"]["value"] == "3"
    assert python.run("w")[0] == [{"text/plain": "5"}]


def test_python_interpreter_that_dies_is_restarted_with_files_kept(python):
    python.run("v = 1\nopen('kept.txt', 'w').write('kept')")
    _, ended, _, _ = python.run("import os\nos._exit(7)")
    assert ended == {"op": "ended", "code": 7, "signal": None}
    header, _ = python.receive()
    assert header == {"op": "ready", "language": "python", "restarted": True}
    displays, done, _, _ = python.run("open('kept.txt').read(), 'v' in globals()")
    assert displays == [{"text/plain": "('kept', False)"}]
    assert done["execution_count"] == 1


def test_restart_on_request_ends_a_cell_that_ignores_interrupts(python):
    cell = ("import time\nwhile True:\n    try:\n        time.sleep(30)\n"
            "    except KeyboardInterrupt:\n        pass")
    python.sock.sendall(frame({"op": "run", "code": cell, "env": {}}))
    time.sleep(0.3)
    os.kill(python.pid, signal.SIGINT)  # swallowed by the cell
    time.sleep(0.3)
    os.kill(python.pid, signal.SIGUSR1)
    header, _ = python.receive()
    assert header["op"] == "ended" and header["signal"] == signal.SIGKILL
    header, _ = python.receive()
    assert header == {"op": "ready", "language": "python", "restarted": True}
    assert python.run("1 + 1")[0] == [{"text/plain": "2"}]


def test_bash_state_survives_between_runs(bash):
    assert bash.run("x=5\ngreet() { echo \"hi $1\"; }\nmkdir -p sub && cd sub")[1][
        "exit_code"] == 0
    _, done, stdout, _ = bash.run("greet $x; pwd")
    assert stdout == "hi 5\n" + os.path.join(bash.workspace, "sub") + "\n"
    assert done["exit_code"] == 0 and done["execution_count"] == 2


def test_bash_stdin_exit_code_and_exit(bash):
    _, done, stdout, _ = bash.run("read line; echo \"got $line\"; false", stdin=b"abc\n")
    assert stdout == "got abc\n" and done["exit_code"] == 1
    bash.run("kept=yes")
    _, done, stdout, _ = bash.run("echo before; exit 4")
    assert stdout == "before\n" and done["exited"] == 4
    # a fresh shell: the variables are gone, the files are not
    _, done, stdout, _ = bash.run("echo \"kept=${kept:-no}\"; ls -d sub 2>/dev/null; true")
    assert stdout == "kept=no\n" and done["exit_code"] == 0


def test_bash_interrupt_ends_the_command_not_the_shell(bash):
    bash.run("y=8")
    started = time.monotonic()
    _, done, stdout, _ = bash.run("sleep 20; echo after", interrupt_after=0.5)
    assert time.monotonic() - started < 10
    assert done["exit_code"] == 130 and stdout == ""
    assert bash.run("echo $y")[2] == "8\n"


def test_files_put_get_list_delete(python):
    header, _ = python.file("put", b"a,b\n1,2\n", path="data/table.csv", mode=0o755)
    assert header == {"op": "reply", "ok": True, "size": 8}
    header, data = python.file("get", path="data/table.csv")
    assert header["ok"] and data == b"a,b\n1,2\n"
    header, _ = python.file("put", b"", path="empty")
    assert header["ok"] and header["size"] == 0
    header, _ = python.file("list", path="data")
    [entry] = header["entries"]
    assert entry["name"] == "table.csv" and entry["type"] == "file" and entry["size"] == 8
    assert entry["mode"] == 0o755
    # the cell sees what was put
    assert python.run("open('data/table.csv').read()")[0] == [{"text/plain": "'a,b\\n1,2\\n'"}]
    assert python.file("delete", path="data/table.csv")[0]["ok"]
    header, _ = python.file("get", path="data/table.csv")
    assert header["ok"] is False and header["kind"] == "not_found"


def test_files_refused_outside_the_workspace(python):
    python.run("import os\nos.symlink('/etc', 'out')\nos.mkfifo('pipe')\nos.mkdir('dir')")
    for op, path in [("get", "../outside"), ("get", "/etc/passwd"), ("get", "out/passwd"),
                     ("put", "out/planted"), ("put", "../planted"), ("list", "out"),
                     ("delete", "out/hosts")]:
        header, _ = python.file(op, b"x", path=path)
        assert header["ok"] is False and header["kind"] == "invalid", (op, path, header)
    for op, path in [("get", "pipe"), ("get", "dir"), ("put", "pipe"), ("put", "dir")]:
        header, _ = python.file(op, b"x", path=path)
        assert header["ok"] is False and header["kind"] == "invalid", (op, path, header)
    assert not os.path.exists(os.path.join(os.path.dirname(python.workspace), "planted"))


def test_unknown_op_is_refused_and_the_agent_goes_on(python):
    header, _ = python.file("format-disk")
    assert header["ok"] is False and header["kind"] == "invalid"
    assert python.run("2 + 2")[0] == [{"text/plain": "4"}]
