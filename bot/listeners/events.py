"""Events API deliveries: `app_home_opened` publishes the person's App Home tab.

An event arrives verified like every other Slack request (the endpoint's signature check,
then the team check in `bot.middleware`). Slack re-sends an event it believes was missed
(`X-Slack-Retry-Num`), with the same `event_id`: `once_per_event` lets only the first
delivery of an id through, across processes (Redis, SET NX), and acks every repeat. The
listener acks at once and publishes after, so Slack never waits on Redis or the Web API.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from agent_host.durable.seen_once import SeenOnce
from agent_host.errors import StoreUnavailable
from bot.home import HomeTab
from bot.listeners.after_ack import BackgroundTasks

__all__ = ["HOME_OPENED", "home_opened_listener", "once_per_event"]

log = logging.getLogger(__name__)

HOME_OPENED = "app_home_opened"

Middleware = Callable[
    [AsyncBoltRequest, dict[str, Any], AsyncBoltContext, Any], Awaitable[BoltResponse | None]
]


def _retry_number(request: AsyncBoltRequest) -> str:
    values = request.headers.get("x-slack-retry-num") or []
    return str(values[0]) if values else ""


def once_per_event(seen: SeenOnce) -> Middleware:
    """Bolt middleware: an event whose id was taken before is acked and goes no further."""

    async def first_delivery_only(
        req: AsyncBoltRequest, body: dict[str, Any], context: AsyncBoltContext, next: Any
    ) -> BoltResponse | None:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if not isinstance(event_id, str) or not event_id:
            await next()
            return None
        try:
            first = await seen.first(event_id)
        except StoreUnavailable as exc:  # nothing it does can work without Redis: drop it
            log.warning("event %s dropped: %s", event_id, exc)
            return BoltResponse(status=200, body="")
        if not first:
            log.info("event %s seen before (retry %s): ignored", event_id, _retry_number(req))
            return BoltResponse(status=200, body="")
        await next()
        return None

    return first_delivery_only


def home_opened_listener(
    home: HomeTab, tasks: BackgroundTasks
) -> Callable[[dict[str, Any]], Awaitable[None]]:
    async def on_home_opened(event: dict[str, Any]) -> None:
        user = event.get("user")
        if event.get("tab") != "home" or not isinstance(user, str) or not user:
            return  # the Messages tab, or no one to show it to
        tasks.spawn(home.opened(user))

    return on_home_opened
