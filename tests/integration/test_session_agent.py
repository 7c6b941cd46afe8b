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
import textwrap
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
        return self.run_frame({"op": "run", "code": code, "env": env or {}}, interrupt_after,
                              stdin)

    def run_frame(self, header, interrupt_after=None, payload=b""):
        out_at, err_at = self.stdout.tell(), self.stderr.tell()
        self.sock.sendall(frame(header, payload))
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

    def op(self, header, interrupt_after=None):
        """An episode's operation (reset, step, close): its (done header, stdout, stderr)."""
        _, done, stdout, stderr = self.run_frame(header, interrupt_after)
        assert done["op"] == "done", done
        return done, stdout, stderr

    def write(self, name, text):
        with open(os.path.join(self.workspace, name), "w") as out:
            out.write(textwrap.dedent(text))

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


# --- episodes ----------------------------------------------------------------------------------

def has_numpy():
    return subprocess.run(["/usr/bin/python3", "-c", "import numpy"],
                          capture_output=True).returncode == 0


GRIDWORLD = """
    WALLS = {(1, 1), (2, 3), (3, 1)}
    MOVES = [(-1, 0), (0, 1), (1, 0), (0, -1)]


    class GridWorld:
        instances = 0

        def __init__(self):
            GridWorld.instances += 1
            self.instance = GridWorld.instances

        def observe(self):
            r, c = self.position
            return {"position": (r, c), "distance": ((4 - r) ** 2 + (4 - c) ** 2) ** 0.5}

        def reset(self, seed=None, options=None):
            self.position, self.steps = (0, 0), 0
            return self.observe(), {"instance": self.instance}

        def step(self, action):
            dr, dc = MOVES[action]
            r, c = self.position[0] + dr, self.position[1] + dc
            self.steps += 1
            if 0 <= r < 5 and 0 <= c < 5 and (r, c) not in WALLS:
                self.position = (r, c)
                reward = 10.0 if (r, c) == (4, 4) else -0.1
            else:
                reward = -1.0
            terminated = self.position == (4, 4)
            truncated = not terminated and self.steps >= 30
            return self.observe(), reward, terminated, truncated, {"steps": self.steps}

        def close(self):
            with open("closed.txt", "a") as out:
                out.write("closed %d\\n" % self.instance)
"""


def gridworld_reference(position, steps, action):
    """The gridworld's rules, again: (position, steps, observation, reward, terminated,
    truncated, info) after the action."""
    row = position[0] + [-1, 0, 1, 0][action]
    col = position[1] + [0, 1, 0, -1][action]
    if row in range(5) and col in range(5) and (row, col) not in ((1, 1), (2, 3), (3, 1)):
        position, reward = (row, col), (10.0 if (row, col) == (4, 4) else -0.1)
    else:
        reward = -1.0
    steps += 1
    terminated = position == (4, 4)
    observation = {"position": list(position),
                   "distance": ((4 - position[0]) ** 2 + (4 - position[1]) ** 2) ** 0.5}
    return (position, steps, observation, reward, terminated, not terminated and steps >= 30,
            {"steps": steps})


def reset_frame(entrypoint, env_class=None, seed=None, options=None):
    return {"op": "reset", "entrypoint": entrypoint, "env_class": env_class, "seed": seed,
            "options": options}


def test_episode_gridworld_matches_its_reference_for_200_steps(python):
    import random
    python.write("gridworld.py", GRIDWORLD)
    assert python.run("1")[1]["execution_count"] == 1  # one counter for cells and episodes
    done, _, _ = python.op(reset_frame("gridworld.py", "GridWorld"))
    assert done == {"op": "done", "execution_count": 2, "error": None, "exit_code": None,
                    "exited": None, "value": {"observation": {"position": [0, 0],
                                                              "distance": 32 ** 0.5},
                                              "info": {"instance": 1}}}
    rng = random.Random(1)
    position, steps, count, endings = (0, 0), 0, 2, {"terminated": 0, "truncated": 0}
    for _ in range(200):
        action = rng.choices(range(4), weights=[1, 3, 3, 1])[0]
        done, _, _ = python.op({"op": "step", "action": action})
        position, steps, observation, reward, terminated, truncated, info = \
            gridworld_reference(position, steps, action)
        count += 1
        assert done["error"] is None and done["execution_count"] == count
        assert done["value"] == {"observation": observation, "reward": reward,
                                 "terminated": terminated, "truncated": truncated,
                                 "info": info}, count
        if terminated or truncated:
            endings["terminated" if terminated else "truncated"] += 1
            done, _, _ = python.op(reset_frame("gridworld.py", "GridWorld"))
            count += 1
            # the same environment, reset: Gymnasium's make() once, reset() per episode
            assert done["value"]["info"] == {"instance": 1}
            assert done["value"]["observation"]["position"] == [0, 0]
            position, steps = (0, 0), 0
    assert endings["terminated"] > 0 and endings["truncated"] > 0, endings


NOISY = """
    import random


    class Noisy:
        def reset(self, seed=None, options=None):
            if seed is not None:
                self.rng = random.Random(seed)
            self.state = self.rng.random()
            return self.state, {"options": options}

        def step(self, action):
            self.state += action * self.rng.gauss(0, 1)
            return self.state, self.rng.random(), False, False, {}
"""


def test_episode_reset_with_the_same_seed_repeats_the_trajectory(python):
    python.write("noisy.py", NOISY)

    def trajectory(seed):
        done, _, _ = python.op(reset_frame("noisy.py", "Noisy", seed, {"scale": [1, 2]}))
        assert done["value"]["info"] == {"options": {"scale": [1, 2]}}
        values = [done["value"]["observation"]]
        for action in [1, -2, 3, 0, 5] * 4:
            done, _, _ = python.op({"op": "step", "action": action})
            values.append((done["value"]["observation"], done["value"]["reward"]))
        return values

    first = trajectory(7)
    assert trajectory(7) == first
    assert trajectory(8) != first


def test_episode_module_functions(python):
    python.write("counter_helper.py", """
        def double(x):
            return 2 * x
    """)
    python.write("counter.py", """
        from counter_helper import double  # a sibling module of the workspace

        total = 0

        def reset(seed=None, options=None):
            global total
            total = (options or {}).get("start", 0)
            return total  # the observation alone

        def step(action):
            global total
            total += double(action)
            return total, float(action), total >= 10, False, {"total": total}
    """)
    done, _, _ = python.op(reset_frame("counter.py", options={"start": 3}))
    assert done["error"] is None and done["value"] == {"observation": 3, "info": {}}
    done, _, _ = python.op({"op": "step", "action": 2})
    assert done["value"] == {"observation": 7, "reward": 2.0, "terminated": False,
                             "truncated": False, "info": {"total": 7}}
    done, _, _ = python.op({"op": "step", "action": 2})
    assert done["value"]["terminated"] is True and done["value"]["observation"] == 11
    # the cells see the one module
    assert python.run("import counter\ncounter.total")[0] == [{"text/plain": "11"}]

    python.write("nothing.py", "x = 1\n")
    done, _, _ = python.op(reset_frame("nothing.py"))
    assert done["value"] is None and done["error"]["name"] == "AttributeError"
    assert "reset" in done["error"]["value"] and "env_class" in done["error"]["value"]


def test_episode_bytes_round_trip(python):
    python.write("bytes_env.py", """
        class Echo:
            def reset(self, seed=None, options=None):
                return b"\\x00\\xffstart", {"raw": bytearray(b"ab")}

            def step(self, action):
                return action[::-1], 0, False, False, {"type": type(action).__name__}
    """)
    done, _, _ = python.op(reset_frame("bytes_env.py", "Echo"))
    value = done["value"]
    assert base64.b64decode(value["observation"]["$bytes"]) == b"\x00\xffstart"
    assert value["info"] == {"raw": {"$bytes": base64.b64encode(b"ab").decode()}}
    action = bytes(range(256))
    done, _, _ = python.op({"op": "step",
                            "action": {"$bytes": base64.b64encode(action).decode()}})
    assert done["error"] is None
    assert base64.b64decode(done["value"]["observation"]["$bytes"]) == action[::-1]
    assert done["value"]["info"] == {"type": "bytes"}
    done, _, _ = python.op({"op": "step", "action": {"$bytes": "not base64!"}})
    assert done["error"]["name"] == "ValueError" and done["value"] is None


@pytest.mark.skipif(not has_numpy(), reason="/usr/bin/python3 has no numpy")
def test_episode_ndarray_round_trip(python):
    import struct
    python.write("array_env.py", """
        import numpy as np

        class Arrays:
            def reset(self, seed=None, options=None):
                grid = np.arange(12, dtype=np.float32).reshape(3, 4)
                return grid.T, {"mean": grid.mean(), "count": np.int64(12)}  # .T: not C order

            def step(self, action):
                action[0, 0] += 1  # writable
                return (action * 2, np.float32(0.5), np.bool_(True), False,
                        {"dtype": action.dtype.str, "shape": action.shape,
                         "sum": action.sum()})
    """)
    done, _, _ = python.op(reset_frame("array_env.py", "Arrays"))
    assert done["error"] is None, done
    array = done["value"]["observation"]["$ndarray"]
    assert array["dtype"] == "<f4" and array["shape"] == [4, 3]
    values = struct.unpack("<12f", base64.b64decode(array["data"]))
    assert list(values) == [float(r * 4 + c) for c in range(4) for r in range(3)]
    assert done["value"]["info"] == {"mean": 5.5, "count": 12}

    data = struct.pack("<6h", 1, -2, 3, -4, 5, -6)
    done, _, _ = python.op({"op": "step", "action": {"$ndarray": {
        "dtype": "<i2", "shape": [2, 3], "data": base64.b64encode(data).decode()}}})
    assert done["error"] is None, done
    value = done["value"]
    array = value["observation"]["$ndarray"]
    assert array["dtype"] == "<i2" and array["shape"] == [2, 3]
    assert struct.unpack("<6h", base64.b64decode(array["data"])) == (4, -4, 6, -8, 10, -12)
    assert value["reward"] == 0.5 and value["terminated"] is True
    assert value["info"] == {"dtype": "<i2", "shape": [2, 3], "sum": -2}  # 1 - 2 + ... + 1

    done, _, _ = python.op({"op": "step", "action": {"$ndarray": {
        "dtype": "<i2", "shape": [4, 3], "data": base64.b64encode(data).decode()}}})
    assert done["error"]["name"] == "ValueError" and done["value"] is None


def test_episode_non_finite_floats_are_tagged(python):
    python.write("inf_env.py", """
        import math

        class Infinite:
            def reset(self, seed=None, options=None):
                return [float("nan"), 1.5], {"low": float("-inf"), "high": float("inf")}

            def step(self, action):
                reward = float("inf") if action == "inf" else 0.5
                return math.isnan(action) if isinstance(action, float) else action, reward, \
                    False, False, {"x": float("nan")}
    """)
    done, _, _ = python.op(reset_frame("inf_env.py", "Infinite"))
    assert done["value"] == {"observation": [{"$float": "nan"}, 1.5],
                             "info": {"low": {"$float": "-inf"}, "high": {"$float": "inf"}}}
    done, _, _ = python.op({"op": "step", "action": {"$float": "nan"}})
    assert done["error"] is None
    assert done["value"]["observation"] is True and done["value"]["reward"] == 0.5
    assert done["value"]["info"] == {"x": {"$float": "nan"}}
    # A reward is a finite number: sums of them are what an episode reports.
    done, _, _ = python.op({"op": "step", "action": "inf"})
    assert done["error"]["name"] == "ValueError" and "finite" in done["error"]["value"]


def test_episode_error_has_the_environments_traceback_and_the_episode_goes_on(python):
    python.write("fragile.py", """
        class Fragile:
            def reset(self, seed=None, options=None):
                self.steps = 0
                return 0, {}

            def step(self, action):
                self.steps += 1
                if action == "break":
                    self.explode()
                return self.steps, 1.0, False, False, {}

            def explode(self):
                raise ValueError("the environment broke")
    """)
    assert python.op(reset_frame("fragile.py", "Fragile"))[0]["error"] is None
    assert python.op({"op": "step", "action": "go"})[0]["value"]["observation"] == 1
    done, _, _ = python.op({"op": "step", "action": "break"})
    assert done["value"] is None
    error = done["error"]
    assert error["name"] == "ValueError" and error["value"] == "the environment broke"
    text = "\n".join(error["traceback"])
    assert "fragile.py" in text and "in step" in text and "in explode" in text
    assert 'raise ValueError("the environment broke")' in text
    assert "<string>" not in text and "session_agent" not in text and "importlib" not in text
    assert error["traceback"][0] == "Traceback (most recent call last):"
    assert error["traceback"][-1] == "ValueError: the environment broke"
    done, _, _ = python.op(reset_frame("fragile.py", "Fragile"))
    assert done["error"] is None
    assert python.op({"op": "step", "action": "go"})[0]["value"]["observation"] == 1


def test_episode_import_error_is_the_files_and_a_mended_file_is_imported(python):
    python.write("broken.py", """
        import os

        def reset(seed=None, options=None):
            return 0

        def step(action):
            return 0, 0.0, True, False, {}

        raise RuntimeError("not yet")
    """)
    done, _, _ = python.op(reset_frame("broken.py"))
    assert done["error"]["name"] == "RuntimeError" and done["value"] is None
    text = "\n".join(done["error"]["traceback"])
    assert "broken.py" in text and "<string>" not in text and "importlib" not in text
    python.write("broken.py", "def reset(seed=None, options=None):\n    return 5\n"
                              "def step(action):\n    return 0, 0.0, True, False, {}\n")
    done, _, _ = python.op(reset_frame("broken.py"))
    assert done["error"] is None and done["value"]["observation"] == 5


def test_episode_step_before_reset_is_an_error(python):
    done, _, _ = python.op({"op": "step", "action": 0})
    assert done["value"] is None and done["execution_count"] == 1
    assert done["error"]["name"] == "RuntimeError"
    assert "reset the episode first" in done["error"]["value"]
    assert done["error"]["traceback"] == ["RuntimeError: " + done["error"]["value"]]


def test_episode_close_calls_the_environments_close(python):
    python.write("gridworld.py", GRIDWORLD)
    assert python.op({"op": "close"})[0] == {  # nothing to close
        "op": "done", "execution_count": 1, "error": None, "exit_code": None, "exited": None,
        "value": None}
    python.op(reset_frame("gridworld.py", "GridWorld"))
    python.op({"op": "step", "action": 1})
    done, _, _ = python.op({"op": "close"})
    assert done["error"] is None and done["value"] is None
    with open(os.path.join(python.workspace, "closed.txt")) as closed:
        assert closed.read() == "closed 1\n"
    # closed: no more steps, and the next reset makes a new environment
    assert python.op({"op": "step", "action": 1})[0]["error"]["name"] == "RuntimeError"
    done, _, _ = python.op(reset_frame("gridworld.py", "GridWorld"))
    assert done["value"]["info"] == {"instance": 2}


def test_episode_entrypoint_outside_the_workspace_is_refused(python):
    outside = tempfile.mkdtemp(prefix="session-agent-outside.")
    try:
        marker = os.path.join(outside, "imported")
        with open(os.path.join(outside, "evil.py"), "w") as out:
            out.write("open(%r, 'w').close()\ndef reset(seed=None, options=None):\n"
                      "    return 0\ndef step(action):\n    return 0, 0.0, True, False, {}\n"
                      % marker)
        os.symlink(os.path.join(outside, "evil.py"), os.path.join(python.workspace, "link.py"))
        python.write("inside.py", "def reset(seed=None, options=None):\n    return 0\n")
        relative = os.path.relpath(os.path.join(outside, "evil.py"), python.workspace)
        for entrypoint in ["../x.py", "/etc/passwd", relative, "link.py",
                           os.path.join(python.workspace, "inside.py"), "sub/../inside.py",
                           "inside", "missing.py", ""]:
            done, _, _ = python.op(reset_frame(entrypoint))
            assert done["value"] is None and done["error"] is not None, entrypoint
            assert "<string>" not in "\n".join(done["error"]["traceback"])
        assert not os.path.exists(marker)
    finally:
        subprocess.run(["rm", "-rf", outside], check=True)


def test_episode_four_tuple_step_is_accepted(python):
    python.write("old_gym.py", """
        class OldGym:
            def reset(self, seed=None, options=None):
                return "start"  # the observation alone, as gym's older reset

            def step(self, action):
                return action + 1, -1, action >= 2, {"old": True}
    """)
    done, _, _ = python.op(reset_frame("old_gym.py", "OldGym"))
    assert done["value"] == {"observation": "start", "info": {}}
    done, _, _ = python.op({"op": "step", "action": 2})
    assert done["value"] == {"observation": 3, "reward": -1.0, "terminated": True,
                             "truncated": False, "info": {"old": True}}


def test_episode_values_that_cannot_be_sent_are_errors(python):
    python.write("odd.py", """
        class Odd:
            def reset(self, seed=None, options=None):
                return 0, {}

            def step(self, action):
                if action == "object":
                    return object(), 0.0, False, False, {}
                if action == "set":
                    return 0, 0.0, False, False, {"seen": {1, 2}}
                if action == "cycle":
                    loop = []
                    loop.append(loop)
                    return loop, 0.0, False, False, {}
                if action == "reward":
                    return 0, None, False, False, {}
                if action == "six":
                    return 0, 0.0, False, False, {}, "extra"
                return 0, 0.0, False, False, {}
    """)
    python.op(reset_frame("odd.py", "Odd"))
    for action, name, words in [("object", "TypeError", ["observation", "object"]),
                                ("set", "TypeError", ["info", "set"]),
                                ("cycle", "ValueError", ["observation"]),
                                ("reward", "TypeError", ["reward", "NoneType"]),
                                ("six", "TypeError", ["step()", "tuple of 6"])]:
        done, _, _ = python.op({"op": "step", "action": action})
        assert done["value"] is None and done["error"]["name"] == name, (action, done)
        assert all(word in done["error"]["value"] for word in words), (action, done)
    assert python.op({"op": "step", "action": "fine"})[0]["error"] is None


def test_episode_interrupt_ends_the_step_not_the_session(python):
    python.write("slow.py", """
        import time

        def reset(seed=None, options=None):
            return 0

        def step(action):
            time.sleep(action)
            print("slept", action)
            return action, 0.0, False, False, {}
    """)
    python.op(reset_frame("slow.py"))
    started = time.monotonic()
    done, _, _ = python.op({"op": "step", "action": 20}, interrupt_after=0.5)
    assert time.monotonic() - started < 10
    assert done["error"]["name"] == "KeyboardInterrupt" and done["value"] is None
    done, stdout, _ = python.op({"op": "step", "action": 0})
    assert done["error"] is None and stdout == "slept 0\n"


def test_episode_ops_are_unknown_to_bash(bash):
    for header in [reset_frame("env.py"), {"op": "step", "action": 0}, {"op": "close"}]:
        header, _ = bash.file(header.pop("op"), **header)
        assert header["op"] == "reply" and header["ok"] is False and header["kind"] == "invalid"
    assert bash.run("echo fine")[2] == "fine\n"
