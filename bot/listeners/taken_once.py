"""Each signed Slack request taken once: its replay guard's answer, awaited before the
request can change anything.

`bot.wiring.mount_slack` starts the guard (`SeenOnce` on the request's signature) as the
request arrives and hands it to Bolt in the request's context, so the Redis round trip
overlaps the dispatch. A decision button's listener awaits it together with its first
read of the request (one round trip of latency, not two); every other request waits for it
here, before its listener runs. A copy of a request taken already gets an empty 200.

A guard that could not answer (Redis away, or slower than its half second) refuses the
request rather than let it through: a slow Redis still takes a copy's writes. A command is
told to try again; anything else gets a 503, which Slack shows as an error (a form stays
open to submit again, an event is sent again), and a decision button's listener tells its
reviewer the decision was not recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.response import BoltResponse

from agent_host.errors import StoreUnavailable
from bot.listeners.replies import unreachable

__all__ = ["FIRST_TIME", "first_time", "taken_once"]

log = logging.getLogger(__name__)

FIRST_TIME = "countersign_first_time"  # the context's key: the guard's answer to come

Middleware = Callable[[dict[str, Any], AsyncBoltContext, Any], Awaitable[BoltResponse | None]]


async def first_time(context: AsyncBoltContext | None) -> bool:
    """Whether the request is taken for the first time (True where nothing guards it:
    Socket Mode, whose socket carries no copies); StoreUnavailable when the guard could
    not tell."""
    guard: asyncio.Future[bool] | None = context.get(FIRST_TIME) if context else None
    # shielded: a listener's budget running out does not cancel the guard it shares
    if guard is None or await asyncio.shield(guard):
        return True
    log.warning("a signed Slack request was sent again; ignored")
    return False


def taken_once(awaited_by_listener: Callable[[dict[str, Any]], bool]) -> Middleware:
    """The middleware: a request goes on once its guard says it is new; those for which
    `awaited_by_listener` holds go on at once, their listener awaiting the guard itself."""

    async def first_time_only(
        body: dict[str, Any], context: AsyncBoltContext, next: Any
    ) -> BoltResponse | None:
        try:
            new = awaited_by_listener(body) or await first_time(context)
        except StoreUnavailable as exc:
            log.warning(
                "a signed Slack request could not be checked against replays (%s); refused", exc
            )
            if body.get("command"):  # the reply is the command's ephemeral answer
                return BoltResponse(
                    status=200, body={"response_type": "ephemeral", "text": unreachable(exc)}
                )
            return BoltResponse(status=503, body={"error": unreachable(exc)})
        if new:
            await next()
            return None
        return BoltResponse(status=200, body="")

    return first_time_only
