"""Request signing as Slack documents it, for the local sandbox's requests to the app.

Slack signs every request it sends an app: the base string ``v0:{timestamp}:{raw body}`` is
HMAC-SHA256-ed with the app's signing secret, hex-encoded and sent as
``X-Slack-Signature: v0=<hex>`` next to ``X-Slack-Request-Timestamp: <unix seconds>``.
Tests use :func:`sign_request` directly to forge stale or wrongly signed requests.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_VERSION = "v0"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"


def compute_signature(secret: str, timestamp: str | int, body: bytes | str) -> str:
    """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` keyed with ``secret``."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    base = f"{SIGNATURE_VERSION}:{timestamp}:".encode() + raw
    digest = hmac.new(secret.encode("utf-8"), base, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def sign_request(secret: str, timestamp: str | int, body: bytes | str) -> dict[str, str]:
    """The two headers Slack adds to a request whose raw body is ``body``."""
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: compute_signature(secret, timestamp, body),
    }
