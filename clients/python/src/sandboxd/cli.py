"""sandboxd-cli (also `python -m sandboxd`): run a file, talk to a session, or run a batch.

    sandboxd-cli run prog.py [-- ARGS...]     the output streamed as it comes; exits with the
                                              program's exit code
    sandboxd-cli session [--language bash]    an interactive session (readline history)
    sandboxd-cli batch a.py b.sh ...          submit as one batch, poll, print each result

The server and the token come from --url/--token or SANDBOXD_URL/SANDBOXD_TOKEN.
"""

from __future__ import annotations

import argparse
import codeop
import json
import os
import sys
from typing import Any, Sequence, TextIO

from . import __version__
from .client import Client
from .errors import APIError, SandboxdError, TransportError
from .execution import Execution
from .session import Session

# Exit codes: the program's own when it ran, else as `sandboxd run` exits for each status
# (README, "Statuses and exit codes"), so that scripts can treat both alike.
STATUS_EXIT = {"ok": 0, "timeout": 124, "memory_limit": 125, "pids_limit": 123,
               "output_limit": 122, "disk_full": 121, "compile_error": 1, "internal_error": 70,
               "canceled": 75, "error": 1}
EXIT_USAGE = 64        # bad usage, an unknown language, a 400 (EX_USAGE)
EXIT_NO_INPUT = 66     # a file that cannot be read (EX_NOINPUT)
EXIT_UNAVAILABLE = 69  # the server cannot be reached or refused (EX_UNAVAILABLE)
EXIT_NO_PERMISSION = 77  # 401, 403 (EX_NOPERM)

HISTORY_FILE = os.path.expanduser(os.environ.get("SANDBOXD_HISTORY", "~/.sandboxd_history"))

REPL_HELP = """\
Commands (at the start of a cell):
  %put LOCAL [REMOTE]   copy a local file into the session's workspace
  %get REMOTE [LOCAL]   copy a file of the workspace here
  %ls [PATH]            list a directory of the workspace
  %help                 this text
  %quit                 end the session (so does Ctrl-D)
"""


class UsageError(Exception):
    """Bad usage: the message is printed and the CLI exits 64."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def exit_code(execution: Execution) -> int:
    """What the CLI exits with for an execution's result."""
    if execution.status == "exit_nonzero" and execution.exit_code is not None:
        return execution.exit_code
    if execution.status == "signaled" and execution.signal is not None:
        return 128 + execution.signal
    return STATUS_EXIT.get(execution.status, 70)


def _write(stream: TextIO, text: str) -> None:
    # Flushed at once: the point of streaming is to see output as the program writes it.
    stream.write(text)
    stream.flush()


def _read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise FileNotFoundError(f"{path}: {e.strerror}") from e


def _limits(pairs: Sequence[str]) -> dict[str, int] | None:
    limits = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise UsageError(f"--limit {pair!r}: NAME=INTEGER, e.g. wall_ms=5000")
        limits[name] = int(value)
    return limits or None


def _language(client: Client, path: str, given: str | None) -> str:
    if given:
        return given
    try:
        return client.language_for_file(path)
    except KeyError:
        raise UsageError(f"{path}: no language has this file's extension: "
                         "give --language") from None


def _stdin(option: str | None) -> str | None:
    if option is None:
        return None
    if option == "-":
        return sys.stdin.read()
    return _read_file(option)


def _describe_end(execution: Execution) -> str | None:
    """A line for stderr when the program did not simply exit (a cap, an internal error)."""
    if execution.status in ("ok", "exit_nonzero"):
        return None
    text = f"sandboxd-cli: {execution.status}"
    if execution.status == "signaled":
        text += f" (signal {execution.signal})"
    if execution.error:
        text += f": {execution.error}"
    return text


# --- run ------------------------------------------------------------------------------------------


def command_run(client: Client, options: argparse.Namespace) -> int:
    code = _read_file(options.file)
    language = _language(client, options.file, options.language)
    fields: dict[str, Any] = {"stdin": _stdin(options.stdin), "args": options.args or None,
                              "limits": _limits(options.limit)}
    if options.json:
        execution = client.run(code, language, **fields)
        print(json.dumps(execution.raw, indent=2))
        return exit_code(execution)
    execution = client.run(code, language, **fields,
                           on_stdout=lambda text: _write(sys.stdout, text),
                           on_stderr=lambda text: _write(sys.stderr, text))
    note = _describe_end(execution)
    if note:
        print(note, file=sys.stderr)
    return exit_code(execution)


# --- session --------------------------------------------------------------------------------------


def _setup_history(interactive: bool) -> None:
    """readline's line editing and history, kept in HISTORY_FILE across runs (interactive use
    only: piped input has no lines to edit, and must not fill the history)."""
    if not interactive:
        return
    try:
        import atexit
        import readline
    except ImportError:  # a Python built without readline: plain input() still works
        return
    try:
        readline.read_history_file(HISTORY_FILE)
    except OSError:
        pass
    readline.set_history_length(1000)
    atexit.register(lambda: _save_history(readline))


def _save_history(readline: Any) -> None:
    try:
        readline.write_history_file(HISTORY_FILE)
    except OSError:
        pass


def _complete(language: str, lines: list[str]) -> bool:
    """Whether the lines so far make a cell to run. Python: what the interactive interpreter
    would run (a block needs its blank line; a syntax error is sent as it is, for the session to
    report); bash: a line not ending with a backslash."""
    source = "\n".join(lines)
    if language != "python":
        return not source.endswith("\\")
    try:
        return codeop.compile_command(source, "<cell>", "exec") is not None
    except (SyntaxError, ValueError, OverflowError):
        return True


def _magic(session: Session, line: str) -> bool:
    """Runs a %command; False for %quit."""
    words = line[1:].split()
    name, args = (words[0], words[1:]) if words else ("help", [])
    if name in ("quit", "exit"):
        return False
    if name == "put" and 1 <= len(args) <= 2:
        with open(args[0], "rb") as f:
            size = session.files.write(args[-1] if len(args) == 2 else os.path.basename(args[0]),
                                       f.read())
        print(f"{size} bytes written", file=sys.stderr)
    elif name == "get" and 1 <= len(args) <= 2:
        data = session.files.read(args[0])
        with open(args[1] if len(args) == 2 else os.path.basename(args[0]), "wb") as f:
            f.write(data)
        print(f"{len(data)} bytes read", file=sys.stderr)
    elif name == "ls" and len(args) <= 1:
        for entry in session.files.list(args[0] if args else ""):
            kind = "/" if entry["type"] == "dir" else ""
            print(f"{entry['size']:>10}  {entry['name']}{kind}")
    else:
        print(REPL_HELP, end="", file=sys.stderr)
    return True


def _run_cell(session: Session, source: str) -> None:
    execution = session.run(
        source, on_stdout=lambda text: _write(sys.stdout, text),
        on_stderr=lambda text: _write(sys.stderr, text),
        on_result=lambda bundle: _write(sys.stdout, str(bundle.get("text/plain", "")) + "\n"))
    if execution.exception is not None:
        _write(sys.stderr, "\n".join(execution.exception.traceback) + "\n")
    elif execution.status not in ("ok", "exit_nonzero", "error"):
        reason = f": {execution.error}" if execution.error else ""
        _write(sys.stderr, f"[{execution.status}{reason}]\n")
    if execution.restarted:
        _write(sys.stderr, "[the interpreter was restarted: variables are gone, files stay]\n")


def command_session(client: Client, options: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    _setup_history(interactive)
    with client.session(options.language) as session:
        if interactive:
            print(f"sandboxd session {session.id} ({session.language}); %help for commands, "
                  "Ctrl-D to end it", file=sys.stderr)
        lines: list[str] = []
        while True:
            prompt = ("... " if lines else ">>> ") if interactive else ""
            try:
                line = input(prompt)
            except EOFError:
                if interactive:
                    print(file=sys.stderr)
                if lines:  # an unfinished block at the end of the input still runs
                    _run_cell(session, "\n".join(lines))
                return 0
            except KeyboardInterrupt:
                print("\nKeyboardInterrupt", file=sys.stderr)
                lines = []
                continue
            if not lines and line.startswith("%"):
                try:
                    if not _magic(session, line):
                        return 0
                except (OSError, SandboxdError) as e:
                    print(f"{line.split()[0]}: {e}", file=sys.stderr)
                continue
            if not lines and not line.strip():
                continue
            lines.append(line)
            if not _complete(session.language, lines):
                continue
            source, lines = "\n".join(lines), []
            try:
                _run_cell(session, source)
            except KeyboardInterrupt:
                # The stream was closed on the way out, which cancels the run on the server.
                print("\nKeyboardInterrupt", file=sys.stderr)
            except APIError as e:
                print(f"sandboxd-cli: {e}", file=sys.stderr)


# --- batch ----------------------------------------------------------------------------------------


def command_batch(client: Client, options: argparse.Namespace) -> int:
    stdin = _stdin(options.stdin)
    executions = []
    for path in options.files:
        execution: dict[str, Any] = {"language": _language(client, path, options.language),
                                     "code": _read_file(path)}
        if stdin is not None:
            execution["stdin"] = stdin
        limits = _limits(options.limit)
        if limits:
            execution["limits"] = limits
        executions.append(execution)
    batch = client.batch(executions)
    for rejected in batch.rejected:
        problem = rejected["problem"]
        print(f"{options.files[rejected['index']]}: rejected: {problem.get('detail')}",
              file=sys.stderr)
    if not batch.cases:
        return 1
    print(f"batch {batch.id}: {batch.cases} queued", file=sys.stderr)
    batch = client.wait_batch(batch, timeout=options.timeout, poll_interval=options.poll)
    if options.json:
        named = [{**r, "file": options.files[r["index"]]} for r in batch.results]
        print(json.dumps({"id": batch.id, "summary": batch.summary, "results": named,
                          "rejected": batch.rejected}, indent=2))
    else:
        for result in batch.results:
            exit_text = "" if result.get("exit_code") is None else f", exit {result['exit_code']}"
            print(f"==> {options.files[result['index']]}: {result.get('verdict')} "
                  f"({result.get('status')}{exit_text})")
            _write(sys.stdout, result.get("stdout") or "")
            if result.get("stderr"):
                _write(sys.stderr, result["stderr"])
    counts = ", ".join(f"{k} {v}" for k, v in sorted(batch.summary.items()))
    print(f"batch {batch.id}: {counts}", file=sys.stderr)
    return 0 if batch.accepted and not batch.rejected else 1


# --- main -----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="sandboxd-cli", description="Run code on a sandboxd server.")
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top.add_argument("--url", help="the server (default $SANDBOXD_URL)")
    top.add_argument("--token", help="the tenant's token (default $SANDBOXD_TOKEN)")
    top.add_argument("--retries", type=int, default=3,
                     help="retry a request refused with 429 or 503 this many times, after the "
                          "Retry-After it gave (default 3)")
    commands = top.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = commands.add_parser("run", help="run a file, streaming its output")
    run.add_argument("file")
    run.add_argument("args", nargs="*", help="the program's arguments (after --)")
    run.add_argument("-l", "--language", help="default: from the file's extension")
    run.add_argument("--stdin", metavar="FILE", help="the program's standard input (- : ours)")
    run.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                     help="a limit, e.g. wall_ms=5000 (repeatable)")
    run.add_argument("--json", action="store_true", help="print the whole result as JSON")

    session = commands.add_parser("session", help="an interactive session (a REPL)")
    session.add_argument("-l", "--language", default="python", choices=["python", "bash"])

    batch = commands.add_parser("batch", help="run files as one batch and print the results")
    batch.add_argument("files", nargs="+")
    batch.add_argument("-l", "--language", help="default: from each file's extension")
    batch.add_argument("--stdin", metavar="FILE", help="every execution's standard input")
    batch.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE")
    batch.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
    batch.add_argument("--poll", type=float, default=0.25, help="seconds between polls")
    batch.add_argument("--json", action="store_true", help="print the results as JSON")
    return top


def _api_exit(error: APIError) -> int:
    if error.status == 400:
        return EXIT_USAGE
    if error.status in (401, 403):
        return EXIT_NO_PERMISSION
    return EXIT_UNAVAILABLE


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        client = Client(options.url, options.token, retries=options.retries)
    except ValueError as e:  # no URL, or not an http(s) one
        print(f"sandboxd-cli: {e}", file=sys.stderr)
        return EXIT_USAGE
    command = {"run": command_run, "session": command_session,
               "batch": command_batch}[options.command]
    try:
        with client:
            return command(client, options)
    except UsageError as e:
        print(f"sandboxd-cli: {e}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as e:
        print(f"sandboxd-cli: {e}", file=sys.stderr)
        return EXIT_NO_INPUT
    except APIError as e:
        print(f"sandboxd-cli: {e}", file=sys.stderr)
        for error in e.errors:
            print(f"  {error.get('field')}: {error.get('message')}", file=sys.stderr)
        return _api_exit(e)
    except (TransportError, TimeoutError) as e:
        print(f"sandboxd-cli: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        return 130
