"""HTTP for the client: http.client connections kept alive and reused, one per thread, the
bearer token, JSON in and out, problems turned into exceptions, and the opt-in retry of 429 and
503 after Retry-After.

Why one connection per thread: an http.client connection carries one request at a time (a
streamed run holds it until its end), so threads sharing one would have to queue behind each
other. Each thread gets its own instead, made on its first request and reused after that.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import select
import socket
import threading
import time
import urllib.parse
import weakref
from typing import Any, Iterator, Mapping

from . import __version__
from .errors import APIError, TransportError, api_error
from .sse import Event, read_events

# Methods that may be sent again when a kept-alive connection turns out to have been closed by
# the server while idle (RFC 9110, 9.2.2): doing them twice is the same as once.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# Errors that mean the kept-alive connection was dead before we used it.
STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError)

Query = Mapping[str, str | int | float | bool | None]


class Response:
    """A whole (not streamed) answer."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class EventStream:
    """A streamed answer (text/event-stream): iterate it for its events. Closing it before its
    end closes the connection, which the server takes as the client hanging up (and cancels the
    run)."""

    def __init__(self, response: http.client.HTTPResponse,
                 connection: http.client.HTTPConnection) -> None:
        self._response = response
        self._connection = connection

    def __iter__(self) -> Iterator[Event]:
        return read_events(self._response)

    def close(self) -> None:
        if not self._response.isclosed():
            self._response.close()
            self._connection.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), None without one."""
    value = headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if value:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    return None


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive socket was closed by the server: with no request in flight,
    a readable socket can only be at its end (or hold garbage). The server closes connections
    that stay idle (sandboxd after 10 s)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Transport:
    def __init__(self, url: str, token: str | None, *, timeout: float | None, retries: int,
                 max_retry_wait: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every thread's connection, for close(); weak, so that a thread's connection goes
        # away with the thread.
        self._connections: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()

    # -- connections --

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._connections.add(conn)
        return conn

    def close(self) -> None:
        """Closes every thread's connection (a later request opens a new one)."""
        with self._lock:
            for conn in list(self._connections):
                conn.close()

    # -- requests --

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"User-Agent": f"sandboxd-python/{__version__}", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        headers.update(extra or {})
        return headers

    def _target(self, path: str, query: Query | None) -> str:
        target = self._prefix + path
        if query:
            pairs = {k: str(v).lower() if isinstance(v, bool) else str(v)
                     for k, v in query.items() if v is not None}
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs)
        return target

    def _send(self, method: str, target: str, body: bytes | None,
              headers: dict[str, str]) -> tuple[http.client.HTTPResponse,
                                                 http.client.HTTPConnection]:
        """One exchange, up to the response's head. A kept-alive connection that the server
        closed meanwhile is replaced, and the request sent again on a new one when that is safe:
        for an idempotent method, or when the request failed while being sent."""
        for attempt in (1, 2):
            conn = self._connection()
            reused = conn.sock is not None
            if reused and _dropped(conn.sock):
                conn.close()
                reused = False
            sent = False
            try:
                conn.request(method, target, body=body, headers=headers)
                sent = True
                return conn.getresponse(), conn
            except STALE_CONNECTION as e:
                conn.close()
                if attempt == 1 and reused and (method in IDEMPOTENT or not sent):
                    continue
                raise TransportError(f"{method} {target}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{method} {target}: {e}") from e
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, *, json_body: Any = None, data: bytes | None = None,
                content_type: str | None = None, query: Query | None = None,
                headers: Mapping[str, str] | None = None,
                stream: bool = False) -> Response | EventStream:
        """Sends the request; a problem answer raises its APIError. With stream, a 200 answer
        of type text/event-stream comes back as an EventStream (anything else whole)."""
        all_headers = self._headers(headers)
        if json_body is not None:
            data = json.dumps(json_body).encode()
            content_type = "application/json"
        if data is not None:
            all_headers["Content-Type"] = content_type or "application/octet-stream"
        if stream:
            all_headers["Accept"] = "text/event-stream"
        target = self._target(path, query)
        attempt = 0
        while True:
            response, conn = self._send(method, target, data, all_headers)
            content = response.getheader("Content-Type", "")
            if stream and response.status == 200 and content.startswith("text/event-stream"):
                return EventStream(response, conn)
            try:
                body = response.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{method} {target}: {e}") from e
            answer = Response(response.status, dict(response.getheaders()), body)
            if answer.status < 400:
                return answer
            error = self._problem(answer)
            if attempt < self.retries and self._retryable(error):
                attempt += 1
                time.sleep(min(_retry_after(answer.headers) or 1.0, self.max_retry_wait))
                continue
            raise error

    @staticmethod
    def _problem(answer: Response) -> APIError:
        try:
            problem = answer.json()
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            text = answer.body.decode("utf-8", errors="replace").strip()
            problem = {"status": answer.status, "title": "HTTP error", "detail": text[:2000]}
        return api_error(answer.status, problem, answer.headers)

    @staticmethod
    def _retryable(error: APIError) -> bool:
        """429 and 503 refused the request before anything ran, except a 503 that names an
        execution (the engine went away during it: it may have run, so it is not sent again)."""
        return error.status in (429, 503) and "execution_id" not in error.problem
