"""The exceptions the SDK raises.

Every refusal of the API is an RFC 9457 problem (application/problem+json): APIError carries its
members (status, title, detail, errors, type) and whatever else the problem holds (execution_id,
end_reason, rejected, ...) in `problem`. A subclass per status lets a caller catch the one it
expects (`except QuotaExceeded`) without comparing numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .execution import Execution

PROBLEM_TYPE_BASE = "https://sandboxd.dev/problems/"


class SandboxdError(Exception):
    """The base of every exception this package raises."""


class TransportError(SandboxdError):
    """The server could not be reached, or the connection broke before an answer came."""


class APIError(SandboxdError):
    """The API answered with a problem (HTTP 4xx or 5xx)."""

    def __init__(self, status: int, problem: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        problem = dict(problem or {})
        self.status: int = int(problem.get("status", status))
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        self.type: str = str(problem.get("type", ""))
        # [{field, message}]: the request fields to blame (empty when none is).
        self.errors: list[dict[str, str]] = list(problem.get("errors") or [])
        self.problem: dict[str, Any] = problem
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.status} {self.title}".strip()
        if self.detail:
            text += f": {self.detail}"
        return text

    @property
    def slug(self) -> str:
        """The problem's class: the type URI's last part ("quota-exceeded", "at-capacity")."""
        if self.type.startswith(PROBLEM_TYPE_BASE):
            return self.type[len(PROBLEM_TYPE_BASE):]
        return self.type

    @property
    def fields(self) -> list[str]:
        """The names of the offending fields (errors[].field)."""
        return [e.get("field", "") for e in self.errors]

    @property
    def retry_after(self) -> int | None:
        """Seconds the server asked to wait before trying again (429 and 503), if it said."""
        value = self.headers.get("retry-after", "")
        return int(value) if value.isdigit() else None


class BadRequest(APIError):
    """400: malformed JSON, a wrong type, an unknown field or language; `errors` names them."""


class Unauthorized(APIError):
    """401: the token is missing or matches no tenant."""


class Forbidden(APIError):
    """403: the language or backend is not allowed for the tenant's tier."""


class NotFound(APIError):
    """404: no such execution, session, episode or batch for this tenant (or it ended:
    `problem["end_reason"]` says how)."""


class Conflict(APIError):
    """409: another operation of the session or episode is in progress, or the episode is done
    and needs a reset, or the execution has already ended."""


class PayloadTooLarge(APIError):
    """413: the body or a file is larger than the server or the sandbox's disk allows."""


class EnvironmentFailed(APIError):
    """422: an episode's environment could not be made or its first reset failed;
    `problem["error"]` has its name, value and traceback."""


class QuotaExceeded(APIError):
    """429: the tenant is at its concurrency, CPU budget, sessions or queue limit; retry after
    `retry_after` seconds."""


class InternalError(APIError):
    """500: sandboxd failed in a way the request did not cause."""


class ServiceUnavailable(APIError):
    """503: at capacity, shutting down, or the engine is unavailable; nothing ran unless
    `problem["execution_id"]` names a record that says otherwise."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 422: EnvironmentFailed, 429: QuotaExceeded, 500: InternalError,
    503: ServiceUnavailable,
}


def api_error(status: int, problem: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None) -> APIError:
    """The APIError subclass for the status (APIError itself for one without a class)."""
    return _BY_STATUS.get(status, APIError)(status, problem, headers)


class ExecutionFailed(SandboxdError):
    """Execution.raise_for_status(): the execution's status is not ok."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        text = f"execution {execution.id} ended {execution.status}"
        if execution.exit_code is not None:
            text += f" (exit code {execution.exit_code})"
        if execution.error:
            text += f": {execution.error}"
        super().__init__(text)


class EpisodeError(SandboxdError):
    """A step or reset of an episode did not succeed: the environment raised (status error; the
    episode is failed until a reset), the step passed its deadline (timeout: the episode ended),
    or a cap stopped it. `answer` is the API's step object."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        self.answer: dict[str, Any] = dict(answer)
        self.status: str = str(answer.get("status", ""))
        error = answer.get("error") or {}
        self.name: str | None = error.get("name")
        self.value: str | None = error.get("value")
        self.traceback: list[str] = list(error.get("traceback") or [])
        text = f"episode step ended {self.status}"
        if self.name:
            text += f": {self.name}: {self.value}"
        super().__init__(text)


class WebhookVerificationError(SandboxdError):
    """verify_webhook(): the signature does not match, a header is missing, or the timestamp is
    outside the tolerance."""
