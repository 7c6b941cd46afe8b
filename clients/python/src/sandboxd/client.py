"""The client: one object per server and token, with every operation of the API."""

from __future__ import annotations

import base64
import os
import time
import urllib.parse
from typing import Any, Callable, Mapping, Sequence

from ._http import EventStream, Query, Response, Transport
from .batch import Batch
from .episode import Env
from .errors import TransportError, api_error
from .execution import Execution
from .session import Session

# A program's files: {path: text or bytes}, or the API's own objects ({path, content,
# encoding, executable}) for full control.
Files = Mapping[str, str | bytes] | Sequence[Mapping[str, Any]]
TextCallback = Callable[[str], None]
ResultCallback = Callable[[dict[str, Any]], None]

# The most a long poll may ask the server to wait (GET /v1/executions/{id}?wait=).
LONG_POLL_MAX_S = 60


def encode_files(files: Files) -> list[dict[str, Any]]:
    """The API's file objects: bytes travel base64-encoded, text as it is."""
    if not isinstance(files, Mapping):
        return [dict(f) for f in files]
    encoded = []
    for path, content in files.items():
        if isinstance(content, (bytes, bytearray, memoryview)):
            encoded.append({"path": path, "encoding": "base64",
                            "content": base64.b64encode(bytes(content)).decode("ascii")})
        else:
            encoded.append({"path": path, "content": content})
    return encoded


def _given(**fields: Any) -> dict[str, Any]:
    """The fields that were given, as JSON can take them: an optional argument left at None is
    not sent, so that the server's default applies."""
    given: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, Mapping):
            value = dict(value)
        elif isinstance(value, (list, tuple)):
            value = list(value)
        if value is not None:
            given[name] = value
    return given


def _id(item: str | Execution | Batch) -> str:
    return item if isinstance(item, str) else item.id


def _quote(item_id: str) -> str:
    return urllib.parse.quote(item_id, safe="")


class Client:
    """A connection to a sandboxd server, as one tenant.

    url and token default to the environment variables SANDBOXD_URL and SANDBOXD_TOKEN.
    timeout is the socket timeout in seconds (a synchronous run sends nothing back until it
    ends, so it must be longer than the longest run). retries: how many times a request refused
    with 429 (quota) or 503 (at capacity, shutting down) is sent again after the Retry-After the
    server gave (at most max_retry_wait seconds each); 0, the default, raises at once.

    A Client may be shared by threads: each thread gets its own kept-alive connection. Close it
    (or use it as a context manager) to close them."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout: float | None = 300.0, retries: int = 0,
                 max_retry_wait: float = 60.0) -> None:
        url = url or os.environ.get("SANDBOXD_URL")
        if not url:
            raise ValueError("no server URL: pass url or set SANDBOXD_URL")
        token = token if token is not None else os.environ.get("SANDBOXD_TOKEN")
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        self._transport = Transport(url, token, timeout=timeout, retries=retries,
                                    max_retry_wait=max_retry_wait)
        self._languages: list[dict[str, Any]] | None = None

    @property
    def url(self) -> str:
        return self._transport.url

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing shared with Session, Env and the CLI --

    def _request(self, method: str, path: str, *, json_body: Any = None,
                 data: bytes | None = None, content_type: str | None = None,
                 query: Query | None = None, headers: Mapping[str, str] | None = None) -> Response:
        answer = self._transport.request(method, path, json_body=json_body, data=data,
                                         content_type=content_type, query=query, headers=headers)
        assert isinstance(answer, Response)
        return answer

    def _json(self, method: str, path: str, body: Any = None, *,
              query: Query | None = None) -> Any:
        return self._request(method, path, json_body=body, query=query).json()

    def _streamed(self, path: str, body: Mapping[str, Any], *,
                  on_stdout: TextCallback | None = None, on_stderr: TextCallback | None = None,
                  on_result: ResultCallback | None = None) -> dict[str, Any]:
        """POSTs body asking for Server-Sent Events, calls the callbacks as output arrives, and
        returns the end event's object. A callback that raises ends the stream, which cancels
        the run on the server, and the exception goes on to the caller."""
        answer = self._transport.request("POST", path, json_body=body, stream=True)
        if isinstance(answer, Response):  # a server that does not stream: the whole result
            return dict(answer.json())
        stream: EventStream = answer
        with stream:
            for event in stream:
                if event.event == "stdout" and on_stdout:
                    on_stdout(event.json()["text"])
                elif event.event == "stderr" and on_stderr:
                    on_stderr(event.json()["text"])
                elif event.event == "result" and on_result:
                    on_result(event.json())
                elif event.event == "end":
                    return dict(event.json())
                elif event.event == "problem":
                    problem = event.json()
                    raise api_error(int(problem.get("status", 500)), problem)
        raise TransportError(f"POST {path}: the event stream ended before its end event")

    # -- executions --

    def languages(self) -> list[dict[str, Any]]:
        """GET /v1/languages (fetched once per client): name, aliases, extensions, entrypoint,
        compiled, version, and whether the tenant's tier allows each."""
        if self._languages is None:
            self._languages = list(self._json("GET", "/v1/languages")["languages"])
        return self._languages

    def language(self, name: str) -> dict[str, Any]:
        """The language a name or alias means; KeyError when the server knows none."""
        for language in self.languages():
            if name == language["name"] or name in language.get("aliases", []):
                return language
        raise KeyError(name)

    def _entrypoint(self, language: str) -> str:
        """Where a language's code goes among files (main.py), as the server names it."""
        try:
            return str(self.language(language)["entrypoint"])
        except KeyError:
            raise ValueError(f"unknown language {language!r}: give the entrypoint to put the "
                             "code in") from None

    def language_for_file(self, filename: str) -> str:
        """The language of a file by its extension (".py": "python"); KeyError if unknown."""
        extension = os.path.splitext(filename)[1].lower()
        for language in self.languages():
            if extension and extension in language.get("extensions", []):
                return str(language["name"])
        raise KeyError(extension or filename)

    def run(self, code: str | None = None, language: str = "python", *,
            files: Files | None = None, entrypoint: str | None = None, stdin: str | None = None,
            args: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
            limits: Mapping[str, int] | None = None,
            compile_limits: Mapping[str, int] | None = None, network: str | None = None,
            backend: str | None = None, wait: bool = True, retry: bool | None = None,
            callback_url: str | None = None, on_stdout: TextCallback | None = None,
            on_stderr: TextCallback | None = None) -> Execution:
        """Runs code (or files with an entrypoint) in a fresh sandbox and returns its result.

        With code and files, the code becomes the language's entrypoint file (main.py) among
        the files, unless entrypoint names another path for it. With on_stdout or on_stderr the
        output is streamed: each callback gets the text as the program writes it, before this
        returns. wait=False queues it instead and returns at once (status queued): then
        get(), wait() and cancel() it; retry and callback_url go with wait=False only."""
        body: dict[str, Any] = {"language": language}
        if files is not None:
            body["files"] = encode_files(files)
            if code is not None:
                entrypoint = entrypoint or self._entrypoint(language)
                body["files"] = [f for f in body["files"] if f.get("path") != entrypoint]
                body["files"].append({"path": entrypoint, "content": code})
            body["entrypoint"] = entrypoint
        elif code is not None:
            body["code"] = code
        else:
            raise ValueError("run() needs code, or files and an entrypoint")
        body.update(_given(stdin=stdin, args=args, env=env, limits=limits,
                           compile_limits=compile_limits, network=network, backend=backend,
                           retry=retry, callback_url=callback_url))
        if not wait:
            if on_stdout or on_stderr:
                raise ValueError("an execution with wait=False cannot stream its output")
            body["wait"] = False
            return Execution.from_json(self._json("POST", "/v1/executions", body))
        if on_stdout or on_stderr:
            return Execution.from_json(self._streamed("/v1/executions", body,
                                                      on_stdout=on_stdout, on_stderr=on_stderr))
        return Execution.from_json(self._json("POST", "/v1/executions", body))

    def get(self, execution: str | Execution, *, wait: int | None = None) -> Execution:
        """An execution's record (GET /v1/executions/{id}): queued, running, or its outcome with
        the output. wait: long poll, up to that many seconds (at most 60) for its end."""
        query = {"wait": wait} if wait else None
        return Execution.from_json(
            self._json("GET", f"/v1/executions/{_quote(_id(execution))}", query=query))

    def wait(self, execution: str | Execution, *, timeout: float | None = None) -> Execution:
        """Waits (long polling) until an asynchronous execution has ended and returns its
        record; TimeoutError after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = LONG_POLL_MAX_S
        if self._transport.timeout is not None:  # the answer must come before the socket's
            poll = max(1, min(poll, int(self._transport.timeout) - 5))
        while True:
            seconds = poll
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"execution {_id(execution)} did not end in {timeout} s")
                seconds = max(1, min(poll, int(left)))
            record = self.get(execution, wait=seconds)
            if record.done:
                return record

    def cancel(self, execution: str | Execution) -> Execution:
        """Cancels a queued or running asynchronous execution (DELETE /v1/executions/{id});
        returns its record (status canceled, unless it ended first). 409 when it had ended."""
        return Execution.from_json(
            self._json("DELETE", f"/v1/executions/{_quote(_id(execution))}"))

    # -- sessions --

    def session(self, language: str = "python", *, limits: Mapping[str, int] | None = None,
                env: Mapping[str, str] | None = None, files: Files | None = None,
                idle_timeout_s: int | None = None,
                max_lifetime_s: int | None = None) -> Session:
        """Opens a session: a sandbox kept for many runs, whose interpreter keeps its state.
        Use it as a context manager (closing it deletes the session)."""
        body: dict[str, Any] = {"language": language}
        body.update(_given(limits=limits, env=env,
                           files=encode_files(files) if files is not None else None,
                           idle_timeout_s=idle_timeout_s, max_lifetime_s=max_lifetime_s))
        return Session(self, self._json("POST", "/v1/sessions", body))

    def sessions(self) -> list[dict[str, Any]]:
        """The tenant's open sessions."""
        return list(self._json("GET", "/v1/sessions")["sessions"])

    # -- episodes --

    def env(self, code: str | None = None, *, env_class: str | None = None,
            files: Files | None = None, entrypoint: str | None = None,
            limits: Mapping[str, int] | None = None, step_timeout_ms: int | None = None,
            max_steps: int | None = None, idle_timeout_s: int | None = None,
            max_lifetime_s: int | None = None, observation_space: Any = None,
            action_space: Any = None) -> Env:
        """A Gymnasium-compatible environment whose code runs in a sandbox (an RL episode).
        Nothing is opened until its first reset()."""
        return Env(self, code, env_class=env_class, files=files, entrypoint=entrypoint,
                   limits=limits, step_timeout_ms=step_timeout_ms, max_steps=max_steps,
                   idle_timeout_s=idle_timeout_s, max_lifetime_s=max_lifetime_s,
                   observation_space=observation_space, action_space=action_space)

    # -- batches --

    def batch(self, executions: Sequence[Mapping[str, Any]] | None = None, *,
              program: Mapping[str, Any] | None = None,
              cases: Sequence[Mapping[str, Any]] | None = None, compare: str | None = None,
              callback_url: str | None = None) -> Batch:
        """Queues many executions at once: a list of POST /v1/executions bodies (each validated
        on its own: the invalid ones come back in Batch.rejected), or one program and its test
        cases ({stdin, args, limits, expected_stdout}) judged with compare (exact, trim,
        tokens). Returns at once; wait_batch() polls it to its end."""
        if (executions is None) == (program is None):
            raise ValueError("batch() takes either executions, or program and cases")
        body: dict[str, Any]
        if executions is not None:
            body = {"executions": [dict(e) for e in executions]}
        else:
            body = {"program": dict(program or {}), "cases": [dict(c) for c in cases or []]}
            if compare is not None:
                body["compare"] = compare
        if callback_url is not None:
            body["callback_url"] = callback_url
        return Batch.from_json(self._json("POST", "/v1/batches", body))

    def get_batch(self, batch: str | Batch, *, fields: Sequence[str] | None = None) -> Batch:
        """A batch's state: done, summary (cases by verdict) and each case's result; fields
        keeps only those members of each result (and its index)."""
        query = {"fields": ",".join(fields)} if fields else None
        return Batch.from_json(self._json("GET", f"/v1/batches/{_quote(_id(batch))}",
                                          query=query), previous=batch)

    def wait_batch(self, batch: str | Batch, *, timeout: float | None = None,
                   poll_interval: float = 0.25, fields: Sequence[str] | None = None) -> Batch:
        """Polls a batch until every case has ended; TimeoutError after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.get_batch(batch, fields=fields)
            if state.done:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"batch {state.id} did not end in {timeout} s")
            time.sleep(poll_interval)

    # -- webhooks and the server --

    def webhook_deliveries(self, status: str | None = None) -> list[dict[str, Any]]:
        """The tenant's webhook deliveries, newest first (status: pending, delivered, failed)."""
        return list(self._json("GET", "/v1/webhooks/deliveries",
                               query={"status": status})["deliveries"])

    def retry_webhook_delivery(self, delivery_id: str) -> dict[str, Any]:
        """Sends a failed delivery again."""
        return dict(self._json("POST", f"/v1/webhooks/deliveries/{_quote(delivery_id)}/retry"))

    def health(self) -> dict[str, Any]:
        return dict(self._json("GET", "/health"))
