"""A reader of Server-Sent Events (the WHATWG event-stream format), enough for what sandboxd
sends: `event:` and `data:` lines, events ended by a blank line, comments (`:` lines, which a
server may send to keep a quiet connection alive) ignored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator


@dataclass(frozen=True)
class Event:
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


def read_events(stream: BinaryIO) -> Iterator[Event]:
    """The events of stream as they arrive (each as soon as its blank line is read); ends at
    the end of the stream. A last event without its blank line is dropped, as the format says:
    the connection broke in its middle."""
    name = ""
    data: list[str] = []
    while True:
        raw = stream.readline()
        if not raw:
            return
        # The stream is UTF-8 always; its lines end with LF or CRLF (the format also allows a
        # lone CR, which sandboxd never sends).
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line == "":
            if data:
                yield Event(name or "message", "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
        # id and retry mean reconnection, which a run's stream does not do: ignored.
