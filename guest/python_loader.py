# The warm-pool loader for Python (DESIGN.md "Warm pools"). sandboxd starts it, fully sandboxed
# (every isolation layer is already in force), as `python3 -c <this file> ...` in a pool entry.
# It pays the interpreter's start-up while no client waits, says "R" on fd 3, the agent channel
# (a socket), and blocks there for one execution:
#
#   u32 (little-endian) header length, header (JSON), then the files' bytes back to back
#   header = {"argv": ["/workspace/main.py", ...], "env": {"NAME": "value"},
#             "files": [{"path": "main.py", "size": 12, "executable": false}],
#             "main": "/workspace/main.py"}
#
# It writes the files into /workspace, closes fd 3 and runs the program as `python3 main.py`
# would: as __main__, with sys.argv, __file__, sys.path[0], stdin, exceptions (traceback on
# stderr, exit 1), sys.exit codes, threads, atexit handlers and output flushing the same. One execution per loader: the sandbox is destroyed
# afterwards, never reused. Standard library only.
import atexit
import json
import os
import pkgutil  # noqa: F401 -- runpy.run_path imports it (and typing, weakref) on first use:
import runpy    # here, before "R", that cost is paid while no client waits
import struct
import sys

AGENT_FD = 3


def read_exactly(fd, size):
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("agent channel closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive():
    (length,) = struct.unpack("<I", read_exactly(AGENT_FD, 4))
    header = json.loads(read_exactly(AGENT_FD, length))
    for entry in header["files"]:
        data = read_exactly(AGENT_FD, entry["size"])
        path = os.path.join("/workspace", entry["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        mode = 0o755 if entry.get("executable") else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    os.close(AGENT_FD)
    return header


def user_traceback(exc):
    # The frames of this loader and of runpy are not the program's: drop them, so that the
    # traceback reads exactly as under `python3 main.py`.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != MAIN:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def exit_code(exc):
    # What the interpreter does with an uncaught SystemExit (Python/pythonrun.c).
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(str(code) + "\n")
    return 1


def finish(code):
    # The part of interpreter shutdown a program can observe, in the interpreter's order: wait
    # for non-daemon threads, run atexit handlers, flush stdout and stderr (a failed flush is
    # exit status 120). Then exit without the rest of finalization (~3 ms of freeing memory in
    # a sandbox that is destroyed right after): the exit status still comes from the kernel.
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120
    os._exit(code)


os.write(AGENT_FD, b"R")
header = receive()
MAIN = header["main"]
os.environ.update(header["env"])
sys.argv = header["argv"]
sys.path[0] = os.path.dirname(MAIN)
del header
try:
    runpy.run_path(MAIN, run_name="__main__")
    status = 0
except SystemExit as exc:
    status = exit_code(exc)
except BaseException as exc:  # what the interpreter itself would report, then exit 1
    exc = user_traceback(exc)
    sys.excepthook(type(exc), exc, exc.__traceback__)
    status = 1
finish(status)
