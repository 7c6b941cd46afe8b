"""Verifying the webhooks sandboxd sends (Standard Webhooks, standardwebhooks.com).

Each delivery carries the headers webhook-id (the same on every attempt: deduplicate by it),
webhook-timestamp (seconds since the epoch) and webhook-signature: "v1," and the base64 of
HMAC-SHA256 over "<id>.<timestamp>.<body>" (several, space-separated, when the key is being
rotated). The key is the tenant's webhook_secret: "whsec_" and base64 (the key is the decoded
bytes), or any other string (its UTF-8 bytes are the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Mapping

from .errors import WebhookVerificationError

SECRET_PREFIX = "whsec_"
# How far the timestamp may be from now, either way: an older message may be a replay.
DEFAULT_TOLERANCE_S = 300


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        return secret
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
        except binascii.Error as e:
            raise ValueError("webhook secret: whsec_ and invalid base64") from e
    return secret.encode()


def sign_webhook(secret: str | bytes, webhook_id: str, timestamp: int | str,
                 body: bytes) -> str:
    """The webhook-signature value sandboxd sends for this message ("v1,..."): for tests of a
    receiver."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    mac = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def verify_webhook(secret: str | bytes, headers: Mapping[str, str], body: bytes | str, *,
                   tolerance: float = DEFAULT_TOLERANCE_S, now: float | None = None) -> Any:
    """Checks a delivery and returns its parsed body ({type, timestamp, data}).

    headers: the request's headers, in any letter case (a dict, http.server's message, ...);
    body: the raw bytes as received (not re-serialized JSON: any change breaks the signature).
    Raises WebhookVerificationError when a header is missing, the timestamp is more than
    tolerance seconds from now (a replay, or a clock far off), or no signature matches;
    ValueError when the secret is whsec_ and not base64 (a configuration error)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        webhook_id = lowered["webhook-id"]
        timestamp_text = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as e:
        raise WebhookVerificationError(f"missing header {e.args[0]}") from None
    try:
        timestamp = int(timestamp_text)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError(
            f"webhook-timestamp is {int(current - timestamp)} s from now (tolerance {tolerance} s)")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    # Signed over the header's text as sent, not a number printed again.
    expected = sign_webhook(secret, webhook_id, timestamp_text, raw)
    # compare_digest: the time taken must not tell how much of a forged signature was right.
    if not any(hmac.compare_digest(expected, s) for s in signatures.split()):
        raise WebhookVerificationError("no signature matches")
    return json.loads(raw)
