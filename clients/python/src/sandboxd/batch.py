"""Batches: many executions queued at once, each in a fresh sandbox, polled to their end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass
class Batch:
    """A batch as the server last described it.

    Right after Client.batch() only id, cases, queue_position and rejected are known (done is
    False); Client.get_batch() and wait_batch() fill in the rest. summary counts the cases by
    verdict (pending, accepted, wrong_answer, or a run's own status such as timeout); results
    has one dict per case: index, id, status, verdict, exit_code, signal, error, stdout,
    stderr, usage, timing (or only those asked for with fields=)."""

    id: str
    cases: int = 0
    done: bool = False
    summary: dict[str, int] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    # A list of executions: those refused, each {index, problem}; they were not queued.
    rejected: list[dict[str, Any]] = field(default_factory=list)
    compare: str | None = None
    queue_position: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], previous: object = None) -> Batch:
        """From a BatchQueued or a Batch object; what only the submission's answer says
        (rejected, queue_position) is kept from previous, when it is a Batch."""
        earlier = previous if isinstance(previous, Batch) else None
        return cls(
            id=str(data["id"]),
            cases=int(data.get("cases", 0)),
            done=bool(data.get("done", False)),
            summary=dict(data.get("summary") or {}),
            results=list(data.get("results") or []),
            rejected=list(data.get("rejected") or (earlier.rejected if earlier else [])),
            compare=data.get("compare"),
            queue_position=data.get("queue_position",
                                    earlier.queue_position if earlier else None),
            raw=dict(data),
        )

    @property
    def accepted(self) -> bool:
        """Every case was accepted (a list of executions: every one ended ok)."""
        return self.done and set(self.summary) == {"accepted"}
