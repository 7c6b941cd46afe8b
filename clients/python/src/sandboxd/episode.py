"""RL episodes as a Gymnasium-compatible environment: the environment's code runs in a sandbox
on the server, and Env forwards reset, step and close to it.

Env follows gymnasium.Env's protocol (reset(seed=, options=) -> (observation, info);
step(action) -> (observation, reward, terminated, truncated, info); close()) without importing
gymnasium: the spaces are the caller's to set, since the server knows nothing of them.

Values cross as JSON with tagged objects for what JSON has not, both ways: bytes as
{"$bytes": base64}, a float that is not finite as {"$float": "nan" | "inf" | "-inf"}, a numpy
array as {"$ndarray": {dtype, shape, data}}. An array comes back as a numpy array when numpy
is installed, and as that tagged object otherwise (this package needs no numpy).
"""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING, Any, Mapping

from .errors import EpisodeError, NotFound
from .session import Files

if TYPE_CHECKING:
    from .client import Client, Files as FilesArg

MAX_DEPTH = 100  # as the server's agent: a value that holds itself never ends


def _numpy_array(value: Any) -> bool:
    """Whether value is a numpy array, told without importing numpy."""
    return (type(value).__module__ == "numpy" and hasattr(value, "dtype")
            and hasattr(value, "shape") and hasattr(value, "tobytes"))


def encode_value(value: Any, depth: int = 0) -> Any:
    """value as strict JSON, tagged where JSON has no type for it (an action, reset options)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} deep")
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"}
    if isinstance(value, (list, tuple)):
        return [encode_value(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if _numpy_array(value):
        return {"$ndarray": {"dtype": value.dtype.str, "shape": [int(n) for n in value.shape],
                             "data": base64.b64encode(value.tobytes(order="C")).decode("ascii")}}
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)):
        return encode_value(value.item(), depth + 1)  # a numpy scalar
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


def decode_value(value: Any, depth: int = 0) -> Any:
    """What the server sent, with its tagged objects made values again."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} deep")
    if isinstance(value, list):
        return [decode_value(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag == "$bytes":
            return base64.b64decode(inner)
        if tag == "$float":
            return float(inner)
        if tag == "$ndarray":
            try:
                import numpy  # optional: only for arrays, and only if the caller has it
            except ImportError:
                return value
            data = base64.b64decode(inner["data"])
            return numpy.frombuffer(data, dtype=numpy.dtype(inner["dtype"])).reshape(
                inner["shape"]).copy()
    return {k: decode_value(v, depth + 1) for k, v in value.items()}


class Env:
    """A Gymnasium-compatible environment run by sandboxd (Client.env()).

    The first reset() opens the episode (POST /v1/episodes: the server imports the module,
    makes the environment and resets it), later ones reset it; step() steps it; close() calls
    the environment's close() and destroys its sandbox. A step whose environment raised, ran
    past step_timeout_ms or met a cap raises EpisodeError (a timeout ends the episode; after
    an error, reset() revives it). Stepping an episode that is done (terminated or truncated)
    without a reset raises Conflict."""

    metadata: dict[str, Any] = {"render_modes": []}
    render_mode: str | None = None
    spec: Any = None

    def __init__(self, client: Client, code: str | None = None, *, env_class: str | None = None,
                 files: FilesArg | None = None, entrypoint: str | None = None,
                 limits: Mapping[str, int] | None = None, step_timeout_ms: int | None = None,
                 max_steps: int | None = None, idle_timeout_s: int | None = None,
                 max_lifetime_s: int | None = None, observation_space: Any = None,
                 action_space: Any = None) -> None:
        from .client import _given, encode_files  # the client module imports this one

        if (code is None) == (files is None):
            raise ValueError("an environment needs code, or files and an entrypoint")
        self._client = client
        self._open_body: dict[str, Any] = {}
        if code is not None:
            self._open_body["code"] = code
        else:
            self._open_body["files"] = encode_files(files)  # type: ignore[arg-type]
        self._open_body.update(_given(entrypoint=entrypoint, env_class=env_class,
                                      limits=limits,
                                      step_timeout_ms=step_timeout_ms, max_steps=max_steps,
                                      idle_timeout_s=idle_timeout_s,
                                      max_lifetime_s=max_lifetime_s))
        self.observation_space = observation_space
        self.action_space = action_space
        self.id: str | None = None
        # The episode as the server last described it (limits, steps, resets, ...).
        self.info: dict[str, Any] = {}
        # The last reset's or step's whole answer (stdout, stderr, usage, evidence, timing).
        self.last: dict[str, Any] = {}
        self.files: Files | None = None
        self.closed = False

    @property
    def unwrapped(self) -> Env:
        return self

    def _checked(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        self.last = dict(answer)
        if answer.get("status") != "ok":
            raise EpisodeError(answer)
        return self.last

    def reset(self, *, seed: int | None = None,
              options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.closed:
            raise RuntimeError("the environment is closed")
        encoded = encode_value(options) if options is not None else None
        if self.id is None:
            body = dict(self._open_body)
            if seed is not None:
                body["seed"] = seed
            if encoded is not None:
                body["options"] = encoded
            opened = self._client._json("POST", "/v1/episodes", body)
            self.id = str(opened["id"])
            self.files = Files(self._client, f"/v1/episodes/{self.id}/files")
            self.info = {k: v for k, v in opened.items() if k not in ("observation", "info")}
            answer = {**opened, "status": "ok"}  # the open's answer is the first reset's
        else:
            body = {"seed": seed}
            if encoded is not None:
                body["options"] = encoded
            answer = self._client._json("POST", f"/v1/episodes/{self.id}/reset", body)
        answer = self._checked(answer)
        return decode_value(answer.get("observation")), decode_value(answer.get("info") or {})

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.id is None:
            raise RuntimeError("call reset() before step()")
        answer = self._checked(self._client._json(
            "POST", f"/v1/episodes/{self.id}/step", {"action": encode_value(action)}))
        return (decode_value(answer.get("observation")), float(answer.get("reward", 0.0)),
                bool(answer.get("terminated")), bool(answer.get("truncated")),
                decode_value(answer.get("info") or {}))

    def state(self) -> dict[str, Any]:
        """GET the episode: state, steps and reward since the last reset and over its life."""
        if self.id is None:
            raise RuntimeError("the episode is not open yet: call reset()")
        self.info = dict(self._client._json("GET", f"/v1/episodes/{self.id}"))
        return self.info

    def close(self) -> None:
        """Calls the environment's close() and destroys its sandbox (an episode that already
        ended is fine)."""
        if self.closed:
            return
        self.closed = True
        if self.id is not None:
            try:
                self._client._request("DELETE", f"/v1/episodes/{self.id}")
            except NotFound:
                pass

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

