# The warm-pool loader for Python (DESIGN.md "Warm pools"). sandboxd starts it, fully sandboxed
# (every isolation layer is already in force), as `python3 -c <this file>` in a pool entry. It
# pays the interpreter's start-up while no client waits, says "R" on fd 3, the agent channel (a
# socket), and blocks there for one execution (format: src/sandbox/agent.h):
#
#   u32 (little-endian) header length, then the header: NUL-terminated fields
#     count, argv..., count, "NAME=value"..., count, (path, size, flags)..., main path
#   then each file's bytes in order. argv[0] is this interpreter (an exec entry's: its
#   program); flags hold "x" when the file is executable.
#
# Under the gVisor and uml backends no fd but 0, 1 and 2 reaches the loader, and sandboxd starts
# it with the argument "stdio": the channel is stdin, "R" goes to stdout before anything else,
# and the header ends with the rlimits to set, which the loader sets itself (no prlimit reaches
# into those kernels): their count, then each resource's number, soft and hard value. The rest
# of stdin is the program's. Further arguments, gVisor's: "pid", its pid and a newline follow the
# "R" (sandboxd waits for this process's exit by that pid); "exec" (an exec entry, for a language
# without a loader: sh, bash), it executes the execution's argv in its own place instead.
#
# It writes the files into /workspace, closes fd 3 and runs the program as `python3 main.py`
# would: as __main__, with sys.argv, __file__, sys.path[0], stdin, exceptions (traceback on
# stderr, exit 1), sys.exit codes, threads, atexit handlers and output flushing the same. A
# program compile() refuses is handed to the interpreter itself (exec python3 main.py).
#
# It imports nothing beyond what the interpreter has loaded at start-up (os, sys and the frozen
# import machinery), atexit and _signal (built in) and, on a stdio channel, resource: every
# module imported here would be paid for by each pool entry and would sit in its memory. One
# execution per loader: the sandbox is destroyed afterwards, never reused. Standard library only.
#
# As a template (src/sandbox/native/template.h), the engine starts it outside any sandbox with
# the arguments "template MODULE FD": it loads sandboxd's shared module MODULE and serves
# launches on FD there; the module's call returns only in a sandbox's program, a fork of this
# interpreter already locked down, which then goes on as a pool entry's loader started in the
# sandbox would (fd 3 is its agent channel).
import atexit
import os
import sys

STDIO = sys.argv[1:2] == ["stdio"]
SAY_PID = STDIO and "pid" in sys.argv[2:]
# An exec entry's (gVisor's: stdin is the only way into its sandbox): the execution's program
# takes this process's place, as an exec entry's init starts it on the other backends.
EXEC = STDIO and "exec" in sys.argv[2:]
AGENT_FD = 0 if STDIO else 3
if STDIO:
    # Only a stdio loader (gVisor's, uml's) sets its own rlimits: a native entry's came by
    # prlimit. Imported before "R": under gVisor, finding and loading the extension took 5-7 ms
    # of every warm run.
    import resource
if EXEC:
    import _signal  # built in: the dispositions the interpreter changed, put back before exec


def read_exactly(size):
    chunks = []
    while size > 0:
        # Never more than asked: on stdin, what follows the execution is the program's.
        chunk = os.read(AGENT_FD, min(size, 1 << 20))
        if not chunk:
            raise EOFError("agent channel closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive():
    """The execution: argv, environment, the main file's path and source; files written."""
    length = int.from_bytes(read_exactly(4), "little")
    fields = iter(read_exactly(length).split(b"\0"))

    def items(count_field):
        return [next(fields) for _ in range(int(count_field))]

    argv = [os.fsdecode(a) for a in items(next(fields))]  # argv[0]: the interpreter, or an
    # exec entry's program
    env = [os.fsdecode(e).split("=", 1) for e in items(next(fields))]
    files = [(next(fields), int(next(fields)), b"x" in next(fields))
             for _ in range(int(next(fields)))]
    main = os.fsdecode(next(fields))
    items(next(fields))  # the limits: applied already, by the cgroup and prlimit or below
    if STDIO:
        set_rlimits([int(next(fields)) for _ in range(3 * int(next(fields)))])
    source = None
    for path, size, executable in files:
        data = read_exactly(size)
        target = os.path.join(b"/workspace", path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o755 if executable else 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        if os.fsdecode(target) == main:
            source = data
    if not STDIO:
        os.close(AGENT_FD)
    return argv, env, main, source


def set_rlimits(numbers):
    # A limit already as asked is left alone: gVisor refuses (EPERM) any setrlimit of
    # SIGPENDING, which the entry's spec has set as every execution's.
    for i in range(0, len(numbers), 3):
        limit = tuple(n if n < 1 << 63 else resource.RLIM_INFINITY for n in numbers[i + 1:i + 3])
        if resource.getrlimit(numbers[i]) != limit:
            resource.setrlimit(numbers[i], limit)


def user_traceback(exc, main):
    # The loader's own frames are not the program's: drop them, so that the traceback reads
    # exactly as under `python3 main.py`.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != main:
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


def exec_program(argv, env):
    """An exec entry's execution: its program in this process's place (the pid sandboxd waits
    for), with exactly its environment, found on that environment's PATH as a cold run's setpriv
    finds it, with the signal dispositions an exec from sandboxd's stage shell would leave. The
    rlimits are set, the files written, and no_new_privs holds from the stage."""
    for name in ("SIGPIPE", "SIGXFSZ"):  # the interpreter ignores these; a shell does not
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, dict(env))
    except OSError as exc:
        os.write(2, f"sandboxd: {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)  # as the shell and setpriv say "not found"


def run(argv, env, main, source):
    """Runs source as the __main__ module, the way `python3 main.py` sets it up (argv[0] is
    the interpreter)."""
    argv = argv[1:]
    for name, value in env:
        os.environ[name] = value
    sys.argv = argv
    sys.orig_argv = [sys.executable] + argv  # as `python3 main.py ARGS` has it
    sys.path[0] = os.path.dirname(main)
    module = type(sys)("__main__")
    module.__file__ = main
    module.__builtins__ = __builtins__
    module.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader(
        "__main__", main)
    module.__spec__ = None
    sys.modules["__main__"] = module
    try:
        code = compile(source, main, "exec")
    except (SyntaxError, ValueError):
        # compile() and the interpreter's own file reader disagree on some bytes (CPython 3.11
        # ends a line at a NUL byte where compile() refuses it, and words an undecodable byte
        # differently), and on every program that does not compile the error is the reader's:
        # the interpreter itself runs such a program, as `python3 main.py` does cold.
        os.execv(sys.executable, [sys.executable] + argv)
    try:
        exec(code, module.__dict__)
        return 0
    except SystemExit as exc:
        return exit_code(exc)
    except BaseException as exc:  # what the interpreter itself would report, then exit 1
        exc = user_traceback(exc, main)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 1


def become_program(module, fd):
    """Serves launches as a template; returns in a sandbox's program only."""
    before = set(sys.modules)
    import ctypes
    if ctypes.CDLL(module).sbx_template_serve(int(fd)) != 0:
        os._exit(1)
    # The fork was made in C: what os.fork() does in its child (the interpreter's locks and
    # thread states, the at-fork handlers), then the modules only the template needed go, so
    # that the program's sys.modules is a fresh interpreter's.
    ctypes.pythonapi.PyOS_AfterFork_Child()
    for name in set(sys.modules) - before:
        del sys.modules[name]


def warm_up():
    """Pays, before "R", what an execution's first steps would pay while its client waits: the
    pages of the compiler and of the evaluation loop made this process's own (in a template's
    fork, copied from the template's on first write). Its namespace is thrown away."""
    exec(compile("x = str(2 + 2)", "<warm-up>", "exec"), {})


if sys.argv[1:2] == ["template"]:
    become_program(*sys.argv[2:4])
warm_up()

if SAY_PID:
    os.write(1, b"R%d\n" % os.getpid())
else:
    os.write(1 if STDIO else AGENT_FD, b"R")
execution = receive()
if EXEC:
    exec_program(*execution[:2])
finish(run(*execution))
