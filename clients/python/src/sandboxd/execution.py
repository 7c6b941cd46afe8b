"""The result of an execution: a one-shot run, a session's run, or an asynchronous execution's
record, all as one dataclass so that code handling results does not care which it got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import ExecutionFailed

# Statuses of an execution that has not ended yet (asynchronous ones only).
PENDING_STATUSES = frozenset({"queued", "running"})


@dataclass(frozen=True)
class ExceptionInfo:
    """An exception a session's Python code raised: its type's name, its message and the
    traceback's lines."""

    name: str
    value: str
    traceback: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.name}: {self.value}"


@dataclass
class Execution:
    """What an execution did. `raw` is the JSON object as the API sent it (every member, those
    without an attribute too: backend, pooled, compile, requested, ...)."""

    id: str
    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: int | None = None
    # What failed or why it stopped: internal_error, canceled and compile_error carry it; a
    # session run that raised has "Name: message" here and the whole of it in `exception`.
    error: str | None = None
    exception: ExceptionInfo | None = None
    # A session run's rich outputs (Jupyter-like MIME bundles: {"text/plain": ..., ...}): its
    # display() calls and its last expression's value. Always empty for a one-shot execution.
    results: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    # The kernel's counters for the sandbox (oom_kills, wall_timeout, ...), as deltas.
    evidence: dict[str, Any] | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    truncated: dict[str, bool] = field(default_factory=dict)
    clamped: list[str] = field(default_factory=list)
    session_id: str | None = None
    execution_count: int | None = None
    restarted: bool = False
    # Queued asynchronous executions: their place in the tenant's queue (1: next).
    queue_position: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Execution:
        """From any of the API's shapes: ExecutionResult, SessionRunResult, AuditRecord or
        ExecutionQueued."""
        error = data.get("error")
        exception = None
        if isinstance(error, Mapping):  # a session run's exception
            exception = ExceptionInfo(str(error.get("name", "")), str(error.get("value", "")),
                                      list(error.get("traceback") or []))
            error = str(exception)
        elif error is None and data.get("internal_error"):  # a session run sandboxd failed
            error = str(data["internal_error"])
        return cls(
            id=str(data.get("id", "")),
            status=str(data.get("status", "")),
            # A record's output is null while it runs, or when the server keeps none.
            stdout=data.get("stdout") or "",
            stderr=data.get("stderr") or "",
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            error=error,
            exception=exception,
            results=list(data.get("results") or []),
            usage=dict(data.get("usage") or {}),
            evidence=data.get("evidence"),
            timing=dict(data.get("timing") or {}),
            # A result says limits; an audit record says effective.
            limits=dict(data.get("limits") or data.get("effective") or {}),
            truncated=dict(data.get("truncated") or {}),
            clamped=list(data.get("clamped") or []),
            session_id=data.get("session_id"),
            execution_count=data.get("execution_count"),
            restarted=bool(data.get("restarted", False)),
            queue_position=data.get("queue_position"),
            raw=dict(data),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def done(self) -> bool:
        """False while an asynchronous execution is queued or running."""
        return self.status not in PENDING_STATUSES

    def raise_for_status(self) -> Execution:
        """Raises ExecutionFailed unless the status is ok (an execution that has not ended is
        not ok either: wait for it first); returns the execution, for chaining."""
        if not self.ok:
            raise ExecutionFailed(self)
        return self
