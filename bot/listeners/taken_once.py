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

A Redis that is full refuses the guard's write until an admin makes room, so a 503, which
says nothing of that, is kept for what cannot be answered otherwise (a click in App Home,
which has no response URL). A form shows the error under its first input; a click on a
message is answered in its channel, for the clicker only (the click's response URL, no
Redis needed); an event gets a 200, so that Slack does not send it again for nothing (nor
count the failures against the app). (The durable layer logs Redis being full.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.response import BoltResponse

from agent_host.errors import StoreFull, StoreUnavailable
from bot.listeners.replies import FULL_CLICK, FULL_FORM, form_error, unreachable
from bot.parsing import first_input

__all__ = ["FIRST_TIME", "first_time", "taken_once"]

log = logging.getLogger(__name__)

FIRST_TIME = "countersign_first_time"  # the context's key: the guard's answer to come
RESPOND_WITHIN = 1.0  # seconds: a click's answer through its response URL, before the ack

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
            if isinstance(exc, StoreFull) and (said := await _said_full(body, context)):
                return said
            return BoltResponse(status=503, body={"error": str(exc)})  # (Slack shows its own)
        if new:
            await next()
            return None
        return BoltResponse(status=200, body="")

    return first_time_only


async def _said_full(body: dict[str, Any], context: AsyncBoltContext) -> BoltResponse | None:
    """The answer to a request refused because Redis is full, telling the person so where
    Slack lets a request be answered; None where only a 503 can be (see the module)."""
    kind = body.get("type")
    if kind == "view_submission" and (block := first_input(body.get("view"))):
        errors = {block: form_error(FULL_FORM)}
        return BoltResponse(status=200, body={"response_action": "errors", "errors": errors})
    if kind == "block_actions" and context.response_url and context.respond is not None:
        try:
            async with asyncio.timeout(RESPOND_WITHIN):
                said = await context.respond(
                    text=FULL_CLICK, response_type="ephemeral", replace_original=False
                )
        except Exception as exc:  # Slack shows its own error for the 503 instead
            log.warning("could not tell a clicker Redis is full: %s", exc)
            return None
        if said.status_code != 200:  # (not raised: the webhook client returns it)
            log.warning("could not tell a clicker Redis is full: %s", said.status_code)
            return None
        return BoltResponse(status=200, body="")
    if kind == "event_callback":
        return BoltResponse(status=200, body="")
    return None
