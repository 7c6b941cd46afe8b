"""Sessions: a sandbox kept for many runs, whose Python interpreter (or bash shell) keeps its
state between them, with files in and out of its workspace."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import NotFound
from .execution import Execution

if TYPE_CHECKING:
    from .client import Client


class Files:
    """The files of a session's (or an episode's) /workspace. Paths are relative to it."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._base = base  # "/v1/sessions/{id}/files"

    def _path(self, path: str) -> str:
        return f"{self._base}/{urllib.parse.quote(path.lstrip('/'), safe='/')}"

    def write(self, path: str, data: bytes | str, *, mode: int | None = None) -> int:
        """Writes the file (directories are made; text as UTF-8); mode, e.g. 0o755, sets its
        permission bits. Returns its size."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        query = {"mode": format(mode, "o")} if mode is not None else None
        answer = self._client._request("PUT", self._path(path), data=payload,
                                       content_type="application/octet-stream", query=query)
        return int(answer.json()["size"])

    def read(self, path: str) -> bytes:
        return self._client._request("GET", self._path(path),
                                     headers={"Accept": "*/*"}).body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str = "") -> list[dict[str, Any]]:
        """The entries of a directory ({name, type, size, mtime, mode}); default the
        workspace itself."""
        query = {"path": path} if path else None
        return list(self._client._json("GET", self._base, query=query)["entries"])

    def delete(self, path: str) -> None:
        """Removes the file (or an empty directory)."""
        self._client._request("DELETE", self._path(path))


class Session:
    """An open session (Client.session()). Closing it, or leaving its `with` block, deletes it
    and everything in its sandbox."""

    def __init__(self, client: Client, info: Mapping[str, Any]) -> None:
        self._client = client
        self.id: str = str(info["id"])
        self.language: str = str(info.get("language", ""))
        # The session as POST /v1/sessions answered it: limits, expires_at, pooled, ...
        self.info: dict[str, Any] = dict(info)
        self.files = Files(client, f"/v1/sessions/{self.id}/files")
        self.closed = False

    def run(self, code: str, *, stdin: str | None = None, env: Mapping[str, str] | None = None,
            timeout_ms: int | None = None, on_stdout: Callable[[str], None] | None = None,
            on_stderr: Callable[[str], None] | None = None,
            on_result: Callable[[dict[str, Any]], None] | None = None) -> Execution:
        """Runs code in the session. A Python exception is status error (Execution.exception
        has its traceback), not a Python exception here. With a callback the run streams:
        on_stdout and on_stderr get text as it is written, on_result each rich result (a
        display() or the last expression's value, as {"text/plain": ..., ...}) as it comes."""
        body: dict[str, Any] = {"code": code}
        if stdin is not None:
            body["stdin"] = stdin
        if env is not None:
            body["env"] = dict(env)
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        path = f"/v1/sessions/{self.id}/run"
        if on_stdout or on_stderr or on_result:
            return Execution.from_json(self._client._streamed(
                path, body, on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result))
        return Execution.from_json(self._client._json("POST", path, body))

    def refresh(self) -> dict[str, Any]:
        """GET the session again (state, last_activity_at, ...); NotFound once it ended."""
        self.info = dict(self._client._json("GET", f"/v1/sessions/{self.id}"))
        return self.info

    def close(self) -> None:
        """Deletes the session; a session that already ended (idle timeout, lifetime) is fine."""
        if self.closed:
            return
        try:
            self._client._request("DELETE", f"/v1/sessions/{self.id}")
        except NotFound:
            pass
        self.closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
