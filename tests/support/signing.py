"""Signed requests as countersign's callers send them: the approval webhook's HMAC, Slack's
request signature (the stand-in's own `sign_request`, one implementation for both) and the
API's bearer token."""

from __future__ import annotations

import hashlib
import hmac
import time

from slack_sandbox.signing import sign_request

__all__ = ["FORM", "Header", "bearer", "slack_headers", "webhook_signature"]

Header = tuple[str | bytes, str | bytes]
FORM = "application/x-www-form-urlencoded"


def webhook_signature(body: bytes, secret: str) -> str:
    """The `X-Webhook-Signature` of `body`: `sha256=` and the hex HMAC-SHA256 with `secret`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def slack_headers(
    body: bytes, secret: str, *, at: int | None = None, content_type: str = FORM
) -> list[Header]:
    """Content-Type and Slack's signature headers for `body`, signed now (or at `at`)."""
    signed = sign_request(secret, int(time.time()) if at is None else at, body)
    return [("Content-Type", content_type), *signed.items()]


def bearer(token: str) -> Header:
    return ("Authorization", f"Bearer {token}")
