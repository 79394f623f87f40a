"""The local Slack sandbox's HTTP client towards the app: signed POSTs, as Slack sends them.

Every request carries ``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` computed over
the exact bytes sent, and is given up after ``answer_within`` seconds (Slack waits three seconds
for an acknowledgement and then shows the user an error).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from slack_sandbox.signing import sign_request

logger = logging.getLogger(__name__)

USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
JSON_CONTENT_TYPE = "application/json"  # the Events API's deliveries


@dataclass(frozen=True)
class AppReply:
    """What the app answered a sandbox interaction request with."""

    status: int
    body: str
    content_type: str

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class AppUnreachable(Exception):
    """The app did not answer in time, or could not be reached at all."""


async def post_signed(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    *,
    signing_secret: str,
    answer_within: float,
    content_type: str = FORM_CONTENT_TYPE,
    extra_headers: dict[str, str] | None = None,
) -> AppReply:
    headers = {
        "Content-Type": content_type,
        "User-Agent": USER_AGENT,
        **(extra_headers or {}),
        **sign_request(signing_secret, int(time.time()), body),
    }
    try:
        async with session.post(
            url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=answer_within)
        ) as response:
            text = await response.text()
            reply = AppReply(response.status, text, response.content_type)
    except TimeoutError as exc:
        raise AppUnreachable(f"the app at {url} did not answer within {answer_within:g}s") from exc
    except aiohttp.ClientError as exc:
        raise AppUnreachable(f"the app at {url} could not be reached: {exc}") from exc
    logger.debug("app answered %s with HTTP %d (%d bytes)", url, reply.status, len(reply.body))
    return reply
