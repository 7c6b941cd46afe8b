# The session agent (DESIGN.md "Long-lived sandboxes"): the one process a session's sandbox
# starts, with every isolation layer already in force, as `python3 -c <this file> LANGUAGE`. For
# python it is itself the persistent interpreter (globals, imports and the working directory
# survive between runs, like a notebook kernel); for bash it keeps one bash process and feeds it
# each run. It loops on fd 3, the agent channel, a stream socket to the engine.
#
# Frames, both ways: u32 little-endian length of the rest, u32 little-endian length of the
# header, the header (a JSON object), then the payload (raw bytes: stdin, a file's contents).
#
#   engine -> agent                                  agent -> engine
#   {"op": "run", "code", "env": {..}} + stdin       {"op": "ready", "language", "restarted"}
#   {"op": "put", "path", "mode"} + data               at start, and after every restart
#   {"op": "get", "path"}                            {"op": "display", "bundle": {mime: data}}
#   {"op": "list", "path"}                             during a run, one per rich output
#   {"op": "delete", "path"}                         {"op": "done", "execution_count", "error",
#   {"op": "reset", "entrypoint", "env_class",         "exit_code", "exited"}  the run's end;
#     "seed", "options"}                               after reset, step or close also "value":
#   {"op": "step", "action"}                           the result (null with an error)
#   {"op": "close"}                                  {"op": "reply", "ok", ...} + data  file ops
#     reset, step, close: python only, each a run    {"op": "ended", "code", "signal"}  the
#     of an episode's environment (see "episodes")     interpreter ended (the keeper says it)
#
# User code's stdout and stderr are fds 1 and 2, pipes of their own: nothing it prints reaches
# fd 3. User code runs in this very process (python), so it can reach fd 3 and write anything:
# the engine treats every frame from here as untrusted input, bounded and validated, and a
# forged frame can only lie about this session's own results. The agent flushes fds 1 and 2
# before "done", so a run's output is in its pipes before its end is.
#
# Two processes: the keeper (the sandbox's program, which the engine signals) and the
# interpreter, its child, which speaks on fd 3. SIGINT to the keeper interrupts the running cell
# (KeyboardInterrupt; for bash, SIGINT to the shell's process group); SIGUSR1 restarts: every
# process of the sandbox but init and the keeper is killed, and a fresh interpreter says "ready"
# with restarted true (files are kept). The keeper also restarts an interpreter that died on its
# own (the memory cap's OOM kill, os._exit), after saying "ended"; it ends itself when the engine
# closes the channel. File operations happen between runs, inside the sandbox and with
# its rights: a path that leaves /workspace (by "..", or by a symlink) is refused, as are devices
# and FIFOs. Standard library only.
# Every module the agent uses is imported here, before the session's workspace is on sys.path
# (the engine runs it with -P): no file a tenant puts there can stand in for one of them.
import ast
import base64
import builtins
import errno
import importlib.util
import io
import json
import linecache
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import traceback

AGENT_FD = 3
# The file name of the agent's own code ("<string>", as python3 -c runs it): its frames are left
# out of the tracebacks of the session's code that it calls.
AGENT_FILE = sys._getframe().f_code.co_filename
# tests/integration/test_session_agent.py runs the agent outside a sandbox, in a directory of its
# own; in a sandbox the engine sets nothing and it is the workspace.
IN_SANDBOX = "SANDBOXD_AGENT_WORKSPACE" not in os.environ
WORKSPACE = os.environ.pop("SANDBOXD_AGENT_WORKSPACE", "/workspace")
MAX_HEADER = 8 << 20
# The most JSON objects and arrays one header may open (the engine's session_frame.h), and the
# most JSON an episode operation's value may take (session.h).
MAX_STRUCTURES = 65536
MAX_VALUE = 1 << 20
MAX_FRAME = 80 << 20
# The rich outputs of one run, as the engine bounds them too: beyond these a run's displays stop.
MAX_DISPLAYS = 64
# A repr longer than this is cut (a huge list's repr would otherwise fill the result).
MAX_TEXT = 64 << 10


# --- the channel -----------------------------------------------------------------------------

# What was read from the channel and not taken yet: a frame usually comes whole in one read (an
# RL step is one small frame, and every system call counts there). The engine sends one frame
# and waits for its answer, so what is read past a frame's end is at most the next one.
RECEIVED = bytearray()


def read_exactly(size):
    while len(RECEIVED) < size:
        try:
            chunk = os.read(AGENT_FD, max(size - len(RECEIVED), 1 << 16))
        except InterruptedError:
            continue
        if not chunk:
            raise EOFError("agent channel closed")
        RECEIVED.extend(chunk)
    taken = bytes(RECEIVED[:size])
    del RECEIVED[:size]
    return taken


def receive():
    """One frame: (header dict, payload bytes)."""
    length = int.from_bytes(read_exactly(4), "little")
    if length < 4 or length > MAX_FRAME:
        raise ValueError("frame of %d bytes" % length)
    header_length = int.from_bytes(read_exactly(4), "little")
    if header_length > min(length - 4, MAX_HEADER):
        raise ValueError("header of %d bytes" % header_length)
    header = json.loads(read_exactly(header_length))
    payload = read_exactly(length - 4 - header_length)
    return header, payload


def encode_header(header):
    # A lone surrogate (a file name that is not UTF-8, through os.fsdecode) cannot be UTF-8:
    # replaced, so that no text of the session's can make a frame unsendable. NaN and Infinity
    # are not JSON (the engine's parser refuses them): every float that reaches a frame went
    # through encode_value or encode_mime, which keep them out, and this says so loudly.
    return json.dumps(header, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8", "replace")


def send(header, payload=b""):
    send_encoded(encode_header(header), payload)


def send_encoded(head, payload=b""):
    frame = ((4 + len(head) + len(payload)).to_bytes(4, "little")
             + len(head).to_bytes(4, "little") + head + payload)
    view = memoryview(frame)
    while view:
        try:
            n = os.write(AGENT_FD, view)
        except InterruptedError:
            continue
        view = view[n:]


def flush_output():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# --- rich outputs ----------------------------------------------------------------------------

def cut(text):
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n... (cut at %d characters)" % MAX_TEXT


class Displays:
    """The rich outputs of the current run, sent as they come."""

    def __init__(self):
        self.count = 0

    def send(self, bundle):
        if not bundle or self.count >= MAX_DISPLAYS:
            return
        self.count += 1
        flush_output()  # what the cell printed before the display comes before it
        send({"op": "display", "bundle": bundle})


DISPLAYS = Displays()

# _repr_*_ methods as Jupyter names them, and the MIME type each one gives.
REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)


def mime_bundle(obj):
    """obj's MIME bundle: text/plain always, plus whatever its _repr_*_ methods give."""
    bundle = {}
    mimebundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(mimebundle) and not isinstance(obj, type):
        try:
            data = mimebundle()
            if isinstance(data, tuple):
                data = data[0]
            if isinstance(data, dict):
                for mime, value in data.items():
                    bundle[str(mime)] = encode_mime(str(mime), value)
        except Exception:
            pass
    for method, mime in REPR_METHODS:
        render = getattr(obj, method, None)
        if mime in bundle or not callable(render) or isinstance(obj, type):
            continue
        try:
            value = render()
        except Exception:
            continue
        if value is not None:
            bundle[mime] = encode_mime(mime, value)
    try:
        bundle["text/plain"] = cut(repr(obj))
    except Exception as exc:
        bundle["text/plain"] = "<repr failed: %s>" % type(exc).__name__
    return {mime: value for mime, value in bundle.items() if value is not None}


def encode_mime(mime, value):
    if isinstance(value, tuple):  # (data, metadata)
        value = value[0]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if mime == "application/json":
        try:
            json.dumps(value, allow_nan=False)  # as send() will: strict JSON
            return value
        except (TypeError, ValueError):
            return None
    return cut(str(value))


def display(*objects):
    """Shows each object as a rich output of this run, like IPython's display()."""
    for obj in objects:
        DISPLAYS.send(mime_bundle(obj))


def send_figures():
    """Every open matplotlib figure, as image/png, then closed (as a notebook shows them)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        numbers = pyplot.get_fignums()
    except Exception:
        return
    for number in numbers:
        try:
            figure = pyplot.figure(number)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", bbox_inches="tight")
            DISPLAYS.send({"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                           "text/plain": "<Figure size %dx%d>" % tuple(
                               int(v) for v in figure.get_size_inches() * figure.dpi)})
        except Exception as exc:
            sys.stderr.write("sandboxd: figure %s not rendered: %s\n" % (number, exc))
    try:
        pyplot.close("all")
    except Exception:
        pass


def show(*args, **kwargs):
    """plt.show(): the open figures become rich outputs now."""
    send_figures()


class PyplotHook:
    """Once matplotlib.pyplot is imported, its show() is ours (the Agg backend has none)."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            module.show = show

        spec.loader.exec_module = patched
        return spec


# --- python ----------------------------------------------------------------------------------

def forget_channel_in_child():
    """A process a cell forks (os.fork, multiprocessing) is not the agent: it must never write
    a frame, which the engine would take as the run's own."""
    global AGENT_FD
    try:
        os.close(AGENT_FD)
    except OSError:
        pass
    AGENT_FD = -1


# An interrupt (the keeper's SIGINT) is a KeyboardInterrupt while the session's code runs, and
# ignored outside it: it must not cut a frame in half. One handler says which, by a flag (a
# handler installed and removed around each run would be two system calls a run).
INTERRUPTIBLE = False


def on_interrupt(signum, frame):
    if INTERRUPTIBLE:
        raise KeyboardInterrupt


def interruptible(yes):
    global INTERRUPTIBLE
    INTERRUPTIBLE = yes
    if yes and signal.getsignal(signal.SIGINT) is not on_interrupt:
        signal.signal(signal.SIGINT, on_interrupt)  # the session's code may have set its own


def forked():
    """Whether this is a process the session's code forked (it has no channel)."""
    return AGENT_FD < 0


class PythonSession:
    def __init__(self):
        os.register_at_fork(after_in_child=forget_channel_in_child)
        self.count = 0
        self.namespace = {"__name__": "__main__", "__builtins__": builtins,
                          "display": display}
        main = type(sys)("__main__")
        main.__dict__.update(self.namespace)
        self.namespace = main.__dict__
        sys.modules["__main__"] = main
        builtins.display = display
        os.environ.setdefault("MPLBACKEND", "Agg")
        sys.meta_path.insert(0, PyplotHook())
        sys.argv = [""]
        sys.path.insert(0, WORKSPACE)
        # Episodes (see "episodes"): the environments' modules, by entrypoint, imported once;
        # and the environment the last reset made, with the (entrypoint, env_class) it is of.
        self.env_modules = {}
        # By index (an episode of a shared sandbox has its own; alone, 0): (environment,
        # (entrypoint, env_class) it is of).
        self.envs = {}

    def run(self, code, stdin):
        self.count += 1
        name = "<cell %d>" % self.count
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="replace")
        error = None
        try:
            interruptible(True)
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)
            exec(compile(tree, name, "exec"), self.namespace)  # the user's cell
            if last is not None:
                value = eval(compile(last, name, "eval"), self.namespace)
                if value is not None:
                    self.namespace["_"] = value
                    DISPLAYS.send(mime_bundle(value))
        except BaseException as exc:  # SystemExit too: as in a notebook, the session goes on
            error = describe_error(exc, name)
        finally:
            interruptible(False)
            if forked():
                # A process the cell forked came to the cell's end: as at a script's end, it
                # exits (it has no channel to report on).
                flush_output()
                os._exit(1 if error is not None else 0)
        send_figures()
        return self.count, error, None, None

    def episode(self, operation, header):
        """An episode's reset, step or close: (execution count, error, value), the value as
        JSON carries it. Interrupts and forks as in run()."""
        self.count += 1
        if sys.stdin is not NO_STDIN:
            sys.stdin = NO_STDIN
        error = value = None
        try:
            interruptible(True)
            value = operation(self, header)  # the environment's code, and its result encoded
        except BaseException as exc:
            value, error = None, describe_error(exc, None)
        finally:
            interruptible(False)
            if forked():
                flush_output()
                os._exit(1 if error is not None else 0)
        return self.count, error, value


def describe_error(exc, cell):
    """{name, value, traceback}: the traceback as text lines, the agent's own frames removed: a
    cell's error starts at the cell's frame; an episode's (cell None) at the first frame that is
    neither the agent's nor importlib's (which ran the environment's module), the session's own
    code. An error the agent raised itself keeps no frame at all."""
    tb = exc.__traceback__
    if cell is not None:
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
            tb = tb.tb_next
    else:
        while tb is not None and (tb.tb_frame.f_code.co_filename == AGENT_FILE or
                                  tb.tb_frame.f_code.co_filename.startswith("<frozen importlib")):
            tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    text = "".join(lines).rstrip("\n").split("\n")
    try:
        value = str(exc)
    except Exception:
        value = "<str failed>"
    return {"name": type(exc).__name__, "value": cut(value), "traceback": text[:400]}


# --- episodes --------------------------------------------------------------------------------

# Reinforcement-learning episodes, Gymnasium's shape: an environment the session's own code
# defines in a .py file of the workspace (a class, named by env_class, or the module's own reset
# and step functions), driven by reset, step and close frames. Each is answered as a run is:
# displays if its code makes some, then one "done" whose "value" is the operation's result
# (reset: {observation, info}; step: {observation, reward, terminated, truncated, info}; close:
# null) and null when "error" is not. The environment lives in the interpreter, as the cells'
# globals do: a restart loses it, and the next reset makes a new one.
#
# Values cross as strict JSON, with tagged objects for what JSON has not: {"$float": "nan" |
# "inf" | "-inf"}, {"$bytes": base64}, and {"$ndarray": {"dtype", "shape", "data"}} (numpy's
# dtype.str such as "<f4", the shape, base64 of the bytes in C order). Actions and reset's
# options are decoded the same way; anything else is refused with a TypeError.

# An episode's operations read nothing: their standard input is at its end.
NO_STDIN = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")

# Deeper than this a value is refused: a list that holds itself would never end.
MAX_DEPTH = 100


def type_name(value):
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return "%s.%s" % (kind.__module__, kind.__qualname__)


def numpy_array(value):
    """Whether value is a numpy array. numpy is not imported for it: an array exists only once
    the session imported numpy (and a masked array, numpy.ma's, is not one: it has no bytes
    that say all it is)."""
    numpy = sys.modules.get("numpy")
    return (type(value).__module__ == "numpy" and numpy is not None
            and isinstance(value, getattr(numpy, "ndarray", ()))
            and hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "tobytes"))


def encode_value(value, what, depth=0):
    """value as strict JSON, tagged where JSON has no type for it; what names it in errors."""
    if depth > MAX_DEPTH:
        raise ValueError("%s: nested more than %d deep (does it hold itself?)" % (what, MAX_DEPTH))
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum's member: the number
    if isinstance(value, float):  # numpy.float64 too
        if math.isfinite(value):
            return float(value)
        return {"$float": "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"}
    if isinstance(value, (list, tuple)):
        return [encode_value(item, what, depth + 1) for item in value]
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): encode_value(item, what, depth + 1)
                for key, item in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        # bytes() of a memoryview: its contents in C order, contiguous or not
        data = bytes(value) if isinstance(value, memoryview) else value
        return {"$bytes": base64.b64encode(data).decode("ascii")}
    if numpy_array(value):
        dtype = value.dtype
        if dtype.hasobject or dtype.fields is not None:
            # Objects' bytes are pointers; a structured dtype's str loses its fields.
            raise TypeError("%s: cannot send an array of dtype %s" % (what, dtype))
        return {"$ndarray": {"dtype": dtype.str, "shape": [int(n) for n in value.shape],
                             "data": base64.b64encode(value.tobytes(order="C")).decode("ascii")}}
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)):
        return encode_value(value.item(), what, depth + 1)  # a numpy scalar: int, float, bool
    raise TypeError("%s: cannot send a value of type %s" % (what, type_name(value)))


def decode_value(value, what, depth=0):
    """What the engine sent (parsed JSON) with its tagged objects made values again."""
    if depth > MAX_DEPTH:
        raise ValueError("%s: nested more than %d deep" % (what, MAX_DEPTH))
    if isinstance(value, list):
        return [decode_value(item, what, depth + 1) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag == "$bytes":
            return decode_base64(inner, what)
        if tag == "$float":
            if inner not in ("nan", "inf", "-inf"):
                raise ValueError("%s: $float is \"nan\", \"inf\" or \"-inf\", not %r"
                                 % (what, inner))
            return float(inner)
        if tag == "$ndarray":
            return decode_array(inner, what)
    return {key: decode_value(item, what, depth + 1) for key, item in value.items()}


def decode_base64(text, what):
    if not isinstance(text, str):
        raise TypeError("%s: base64 data is a string, not %s" % (what, type_name(text)))
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError("%s: not base64 data" % what) from None


def decode_array(fields, what):
    if (not isinstance(fields, dict) or not isinstance(fields.get("dtype"), str)
            or not isinstance(fields.get("shape"), list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                       for n in fields["shape"])):
        raise ValueError("%s: $ndarray is {\"dtype\": str, \"shape\": [int], \"data\": base64}"
                         % what)
    data = decode_base64(fields.get("data"), what)
    # numpy is the session's to import, as a cell would (the workspace's own numpy.py, if it has
    # one, is the cells' numpy too); the agent's own modules are all imported above.
    try:
        import numpy
    except ImportError:
        raise ImportError("%s: an $ndarray needs numpy, which is not installed" % what) from None
    dtype = numpy.dtype(fields["dtype"])
    if dtype.hasobject:
        raise ValueError("%s: an $ndarray of dtype %s (objects are not bytes)" % (what, dtype))
    # A copy: frombuffer's array is read-only, and an action is the environment's to change.
    return numpy.frombuffer(data, dtype=dtype).reshape(fields["shape"]).copy()


def environment_path(entrypoint):
    """The entrypoint's file, resolved: a relative path of a .py file that stays in the
    workspace (a symlink may not lead out of it either)."""
    if not isinstance(entrypoint, str) or not entrypoint or "\0" in entrypoint:
        raise ValueError("entrypoint: not a path")
    if entrypoint.startswith("/") or ".." in entrypoint.split("/"):
        raise ValueError("entrypoint %r: not a relative path inside the workspace" % entrypoint)
    if not entrypoint.endswith(".py") or entrypoint.endswith("/.py"):
        raise ValueError("entrypoint %r: not a .py file" % entrypoint)
    workspace = os.path.realpath(WORKSPACE)
    path = os.path.realpath(os.path.join(workspace, entrypoint))
    if not path.startswith(workspace + "/"):
        raise ValueError("entrypoint %r: leaves the workspace" % entrypoint)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "no such file in the workspace", entrypoint)
    return path


def environment_module(session, entrypoint):
    """The entrypoint's module, imported once in this interpreter under its file's stem and
    kept in sys.modules (pickle, dataclasses and the like look modules up there)."""
    module = session.env_modules.get(entrypoint)
    if module is not None:
        return module
    path = environment_path(entrypoint)
    name = os.path.basename(entrypoint)[:-len(".py")]
    # Its own directory comes first on sys.path, as for `python3 envs/grid.py`: its sibling
    # modules import by name.
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    module = sys.modules.get(name)
    if module is not None:
        # A cell imported this very file already: the one module, as `import` would have it.
        # Another module of that name (the standard library's random, say) is not replaced
        # under the feet of everything that imported it.
        known = getattr(module, "__file__", None)
        if not known or os.path.realpath(known) != path:
            raise ImportError("entrypoint %r: the module name %r is taken by %s"
                              % (entrypoint, name, known or "a built-in module"), name=name)
    else:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)  # the session's code
        except BaseException:
            # Not imported: the next reset tries again (the file may have been mended).
            if sys.modules.get(name) is module:
                del sys.modules[name]
            raise
    session.env_modules[entrypoint] = module
    return module


# The most environments one interpreter holds (a shared sandbox's episodes, by index).
MAX_ENVS = 256


def env_index(header):
    index = header.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_ENVS:
        raise ValueError("index: not an integer from 0 to %d" % (MAX_ENVS - 1))
    return index


def episode_reset(session, header):
    index = env_index(header)
    entrypoint, env_class = header.get("entrypoint"), header.get("env_class")
    seed = header.get("seed")
    if env_class is not None and not isinstance(env_class, str):
        raise TypeError("env_class: not a string")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TypeError("seed: not an integer")
    options = decode_value(header.get("options"), "options")
    env, key = session.envs.get(index, (None, None))
    if env is None or key != (entrypoint, env_class):
        # The first reset makes the environment; the later ones reset that one, as Gymnasium
        # does. Another entrypoint or class: a new one (the old one is dropped; the engine
        # sends close when it wants it closed).
        session.envs.pop(index, None)
        module = environment_module(session, entrypoint)
        if env_class is not None:
            env = getattr(module, env_class)()  # the session's code
        elif callable(getattr(module, "reset", None)) and callable(getattr(module, "step", None)):
            env = module  # its functions are the environment's methods
        else:
            raise AttributeError("%s defines no reset and step functions (for a class of it, "
                                 "env_class names the class)" % entrypoint)
        session.envs[index] = (env, (entrypoint, env_class))
    result = env.reset(seed=seed, options=options)  # the session's code
    # Gymnasium's (observation, info); an older environment's observation alone. (Any pair is
    # taken for Gymnasium's: an observation that is itself a pair goes as (observation, {}).)
    if isinstance(result, (tuple, list)) and len(result) == 2:
        observation, info = result
    else:
        observation, info = result, {}
    return {"observation": encode_value(observation, "observation"),
            "info": encode_value(info, "info")}


def episode_step(session, header):
    env, _ = session.envs.get(env_index(header), (None, None))
    if env is None:
        raise RuntimeError("no episode: reset the episode first")
    action = decode_value(header.get("action"), "action")
    result = env.step(action)  # the session's code
    if isinstance(result, (tuple, list)) and len(result) == 5:
        observation, reward, terminated, truncated, info = result
    elif isinstance(result, (tuple, list)) and len(result) == 4:
        observation, reward, terminated, info = result  # gym's older (..., done, info)
        truncated = False
    else:
        raise TypeError("step() returned %s; it returns (observation, reward, terminated, "
                        "truncated, info), or (observation, reward, done, info)"
                        % ("a %s of %d" % (type_name(result), len(result))
                           if isinstance(result, (tuple, list)) else type_name(result)))
    try:
        reward = float(reward)  # a numpy scalar too
    except (TypeError, ValueError):
        raise TypeError("reward: not a number but %s" % type_name(reward)) from None
    if not math.isfinite(reward):
        raise ValueError("reward: %r is not a finite number" % reward)
    return {"observation": encode_value(observation, "observation"),
            "reward": encode_value(reward, "reward"),
            "terminated": bool(terminated), "truncated": bool(truncated),
            "info": encode_value(info, "info")}


def episode_close(session, header):
    # Dropped even if its close() fails: it is no more use than a closed one.
    env, _ = session.envs.pop(env_index(header), (None, None))
    close = getattr(env, "close", None) if env is not None else None
    if callable(close):
        close()  # the session's code
    return None


def episode_batch(session, header):
    """Many operations on the environments of one interpreter (a shared sandbox's episodes),
    in order, each answered on its own: [{"value"} or {"error"}]. An interrupt ends the whole
    batch (the engine asked for it: a deadline, a cancel)."""
    ops = header.get("ops")
    if not isinstance(ops, list) or len(ops) > MAX_ENVS:
        raise ValueError("ops: not a list of at most %d operations" % MAX_ENVS)
    answers = []
    for op in ops:
        operation = EPISODE_OPS.get(op.get("op")) if isinstance(op, dict) else None
        try:
            if operation is None or operation is episode_batch:
                raise ValueError("ops: not an episode's reset, step or close")
            answers.append({"value": operation(session, op)})  # the session's code
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: the other environments go on
            answers.append({"error": describe_error(exc, None)})
        finally:
            if forked():
                # A process an environment forked: it must not go on with the others' steps.
                flush_output()
                os._exit(0)
    return answers


EPISODE_OPS = {"reset": episode_reset, "step": episode_step, "close": episode_close,
               "batch": episode_batch}


def structures(text):
    """The objects and lists JSON text opens, at most (a brace in a string counts too)."""
    return text.count(b"{") + text.count(b"[")


def frame_fits(head):
    return len(head) <= MAX_HEADER and structures(head) <= MAX_STRUCTURES


def fitted_batch(answers):
    """A batch's answers that fit in one frame: an item over MAX_VALUE, or past what the frame
    still has room for, becomes an error of its own (the others keep theirs)."""
    room, structures_left = MAX_HEADER - (64 << 10), MAX_STRUCTURES - 64
    fitted = []
    for answer in answers:
        text = encode_header(answer)
        count = structures(text)
        if len(text) > MAX_VALUE or len(text) > room or count > structures_left:
            answer = {"error": describe_error(ValueError(
                "the answer is %d bytes of JSON with %d objects and lists: over the %d bytes "
                "an episode's answer may take, or past what the batch's frame has room for"
                % (len(text), count, MAX_VALUE)), None)}
            text = encode_header(answer)
            count = structures(text)
        room -= len(text)
        structures_left -= count
        fitted.append(answer)
    return fitted


def run_episode(session, header):
    DISPLAYS.count = 0
    count, error, value = session.episode(EPISODE_OPS[header["op"]], header)
    flush_output()
    done = {"op": "done", "execution_count": count, "error": error, "exit_code": None,
            "exited": None, "value": value}
    head = encode_header(done)
    if not frame_fits(head) and header["op"] == "batch" and isinstance(value, list):
        done["value"] = fitted_batch(value)
        head = encode_header(done)
    if not frame_fits(head):
        # The engine would take a larger header for a broken agent and end the session.
        done.update(value=None, error=describe_error(ValueError(
            "the %s's answer is %d bytes of JSON with %d objects and lists, more than a frame "
            "carries (%d bytes, %d): send large observations as an ndarray or bytes"
            % (header["op"], len(head), structures(head), MAX_HEADER,
               MAX_STRUCTURES)), None))
        head = encode_header(done)
    send_encoded(head)


# --- bash ------------------------------------------------------------------------------------

# Runs each cell in the one shell with the cell's stdin, and reports its status on the status
# fd. An interrupt (SIGINT to the shell's process group) ends the foreground command; the trap
# keeps the shell itself alive and returns from the cell with status 130 (from within a function
# of the cell: from that function, and the cell goes on; the engine's grace then restarts it).
# Between cells the return has nowhere to go and is silent.
BASH_PRELUDE = r"""
__sandboxd_cell() {
    local __sandboxd_file=$1 __sandboxd_in=$2
    . "$__sandboxd_file" < "$__sandboxd_in"
}
trap 'return 130 2>/dev/null' INT
"""


class BashSession:
    def __init__(self):
        self.count = 0
        self.dir = "/tmp/.sandboxd-session"
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.start()

    def start(self):
        status_r, status_w = os.pipe()
        self.shell = subprocess.Popen(
            ["/bin/bash", "--noprofile", "--norc", "-s"], stdin=subprocess.PIPE,
            pass_fds=(status_w,), cwd=WORKSPACE, start_new_session=True)
        os.close(status_w)
        self.status = os.fdopen(status_r, "rb", buffering=0)
        self.status_fd = status_w
        self.command(BASH_PRELUDE)

    def command(self, text):
        self.shell.stdin.write(text.encode())
        self.shell.stdin.flush()

    def interrupt(self):
        try:
            os.killpg(self.shell.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    def run(self, code, stdin):
        self.count += 1
        cell = os.path.join(self.dir, "cell")
        given = os.path.join(self.dir, "stdin")
        with open(cell, "w", encoding="utf-8") as out:
            out.write(code + "\n")
        with open(given, "wb") as out:
            out.write(stdin)
        self.command("__sandboxd_cell %s %s; echo $? >&%d\n" % (cell, given, self.status_fd))
        line = b""
        while not line.endswith(b"\n"):
            try:
                chunk = self.status.read(1)
            except InterruptedError:
                continue
            if not chunk:
                break
            line += chunk
        if not line.endswith(b"\n"):
            # The shell ended (exit in the cell, or killed): the session's shell starts again.
            code = self.shell.wait()
            self.status.close()
            self.start()
            return self.count, None, None, code if code >= 0 else 128 - code
        return self.count, None, int(line), None


# --- files -----------------------------------------------------------------------------------

class FileError(Exception):
    def __init__(self, kind, message, code=None):
        super().__init__(message)
        self.kind, self.message, self.code = kind, message, code


def resolve(path, must_exist=True):
    """The path (relative to /workspace, or absolute under it), all of it resolved: it may not
    leave /workspace."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise FileError("invalid", "not a path")
    if path.startswith("/") and path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
        raise FileError("invalid", "outside /workspace")
    target = os.path.realpath(os.path.join(WORKSPACE, path))
    if target != WORKSPACE and not target.startswith(WORKSPACE + "/"):
        raise FileError("invalid", "leaves /workspace")
    if must_exist and not os.path.lexists(target):
        raise FileError("not_found", "no such file or directory", "ENOENT")
    return target


def os_error(exc):
    code = errno.errorcode.get(exc.errno, str(exc.errno))
    kind = {"ENOENT": "not_found", "ENOSPC": "disk_full", "EDQUOT": "disk_full",
            "EFBIG": "disk_full", "EISDIR": "invalid", "ENOTDIR": "invalid",
            "ENOTEMPTY": "invalid", "EACCES": "invalid", "EPERM": "invalid",
            "EROFS": "invalid", "ELOOP": "invalid"}.get(code, "failed")
    return FileError(kind, exc.strerror or code, code)


def file_put(header, data):
    target = resolve(header.get("path"), must_exist=False)
    mode = header.get("mode", 0o644)
    if not isinstance(mode, int) or mode < 0 or mode > 0o7777:
        raise FileError("invalid", "mode out of range")
    if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
        raise FileError("invalid", "not a regular file")
    directory = os.path.dirname(target)
    temporary = os.path.join(directory, ".sandboxd-put-%d" % os.getpid())
    try:
        os.makedirs(directory, exist_ok=True)
        if resolve(directory) != directory:
            raise FileError("invalid", "leaves /workspace")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode & 0o777)
        finally:
            os.close(fd)
        os.rename(temporary, target)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise os_error(exc)
    return {"size": len(data)}, b""


def file_get(header, _):
    target = resolve(header.get("path"))
    limit = header.get("max_size", 64 << 20)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused right after).
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise os_error(exc)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileError("invalid", "a directory")
        if not stat.S_ISREG(info.st_mode):
            raise FileError("invalid", "not a regular file")
        if info.st_size > limit:
            raise FileError("too_large", "%d bytes, more than %d" % (info.st_size, limit))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileError("too_large", "more than %d bytes" % limit)
    except OSError as exc:
        raise os_error(exc)
    finally:
        os.close(fd)
    return {"size": size}, b"".join(chunks)


def file_list(header, _):
    target = resolve(header.get("path") or WORKSPACE)
    if not os.path.isdir(target):
        raise FileError("invalid", "not a directory")
    entries = []
    try:
        with os.scandir(target) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                kind = ("dir" if stat.S_ISDIR(info.st_mode) else "file"
                        if stat.S_ISREG(info.st_mode) else "symlink"
                        if stat.S_ISLNK(info.st_mode) else "other")
                entries.append({"name": entry.name, "type": kind, "size": info.st_size,
                                "mtime": int(info.st_mtime), "mode": stat.S_IMODE(info.st_mode)})
                if len(entries) >= 10000:
                    break
    except OSError as exc:
        raise os_error(exc)
    entries.sort(key=lambda e: e["name"])
    return {"entries": entries}, b""


def file_delete(header, _):
    target = resolve(header.get("path"))
    if target == WORKSPACE:
        raise FileError("invalid", "the workspace itself")
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode):
            os.rmdir(target)
        else:
            os.unlink(target)
    except OSError as exc:
        raise os_error(exc)
    return {}, b""


FILE_OPS = {"put": file_put, "get": file_get, "list": file_list, "delete": file_delete}


# --- the loop --------------------------------------------------------------------------------

def run_cell(session, header, stdin):
    saved = {}
    env = header.get("env") or {}
    for name, value in env.items():
        saved[name] = os.environ.get(name)
        os.environ[name] = value
    DISPLAYS.count = 0
    try:
        count, error, exit_code, exited = session.run(header.get("code", ""), stdin)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    flush_output()
    send({"op": "done", "execution_count": count, "error": error, "exit_code": exit_code,
          "exited": exited})


def interpreter(language, restarted):
    """The child: the session's interpreter, serving fd 3 until the engine closes it."""
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    if language == "bash":
        session = BashSession()
        # The keeper's SIGINT, passed on: to the shell's process group.
        signal.signal(signal.SIGINT, lambda *_: session.interrupt())
    else:
        signal.signal(signal.SIGINT, on_interrupt)
        session = PythonSession()
    send({"op": "ready", "language": language, "restarted": restarted})
    while True:
        try:
            header, payload = receive()
        except EOFError:
            return 0
        op = header.get("op")
        if op == "run":
            run_cell(session, header, payload)
        elif op in EPISODE_OPS and isinstance(session, PythonSession):
            run_episode(session, header)
        elif op in FILE_OPS:
            try:
                reply, data = FILE_OPS[op](header, payload)
                reply.update(op="reply", ok=True)
            except FileError as exc:
                reply, data = {"op": "reply", "ok": False, "kind": exc.kind,
                               "message": exc.message, "errno": exc.code}, b""
            except Exception as exc:  # the agent outlives any file operation
                reply, data = {"op": "reply", "ok": False, "kind": "failed",
                               "message": "%s: %s" % (type(exc).__name__, exc),
                               "errno": None}, b""
            send(reply, data)
        else:
            send({"op": "reply", "ok": False, "kind": "invalid",
                  "message": "unknown op %r" % (op,), "errno": None})


def channel_closed():
    """Whether the engine closed fd 3 (peeked: the next interpreter's frames stay unread)."""
    try:
        channel = socket.socket(fileno=os.dup(AGENT_FD))
    except OSError:
        return True
    try:
        return channel.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        channel.close()


def keeper(language):
    """The parent: starts the interpreter, passes interrupts on, restarts it when asked or when
    it died, ends when the channel is closed."""
    child = 0
    restart = False

    def interrupt(*_):
        if child:
            try:
                os.kill(child, signal.SIGINT)
            except ProcessLookupError:
                pass

    def ask_restart(*_):
        nonlocal restart
        restart = True
        # In the sandbox (this is its program, init's child): every process but init and this
        # one, the interpreter and whatever its cells left. Outside (the agent's own tests): the
        # interpreter's process group.
        try:
            if IN_SANDBOX and os.getppid() == 1:
                os.kill(-1, signal.SIGKILL)
            elif child:
                os.killpg(child, signal.SIGKILL)
        except OSError:
            pass

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGUSR1, ask_restart)
    restarted = False
    while True:
        child = os.fork()
        if child == 0:
            os.setpgid(0, 0)
            os._exit(interpreter(language, restarted) or 0)
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        child = 0
        if not restart and channel_closed():
            return 0
        send({"op": "ended", "code": os.waitstatus_to_exitcode(status)
              if os.WIFEXITED(status) else None,
              "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None})
        restart = False
        restarted = True


def main():
    language = sys.argv[1] if len(sys.argv) > 1 else "python"
    if language not in ("python", "bash"):
        return 2
    os.chdir(WORKSPACE)
    return keeper(language)


if __name__ == "__main__":
    sys.exit(main())
