"""The Python SDK of sandboxd: run untrusted code in kernel-enforced sandboxes over its HTTP API.

    from sandboxd import Client
    client = Client()  # SANDBOXD_URL, SANDBOXD_TOKEN
    print(client.run("print(2 + 2)").stdout)

The standard library only. See README.md for the whole tour.
"""

# Set before the submodules are imported: _http sends it in User-Agent.
__version__ = "0.1.0"

from .batch import Batch  # noqa: E402
from .client import Client, encode_files  # noqa: E402
from .episode import Env, decode_value, encode_value  # noqa: E402
from .errors import (APIError, BadRequest, Conflict, EnvironmentFailed, EpisodeError,  # noqa: E402
                     ExecutionFailed, Forbidden, InternalError, NotFound, PayloadTooLarge,
                     QuotaExceeded, SandboxdError, ServiceUnavailable, TransportError,
                     Unauthorized, WebhookVerificationError)
from .execution import ExceptionInfo, Execution  # noqa: E402
from .session import Files, Session  # noqa: E402
from .webhooks import sign_webhook, verify_webhook  # noqa: E402

__all__ = [
    "APIError", "BadRequest", "Batch", "Client", "Conflict", "Env", "EnvironmentFailed",
    "EpisodeError", "ExceptionInfo", "Execution", "ExecutionFailed", "Files", "Forbidden",
    "InternalError", "NotFound", "PayloadTooLarge", "QuotaExceeded", "SandboxdError",
    "ServiceUnavailable", "Session", "TransportError", "Unauthorized",
    "WebhookVerificationError", "__version__", "decode_value", "encode_files", "encode_value",
    "sign_webhook", "verify_webhook",
]
