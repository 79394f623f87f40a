"""Deliveries taken at most once: a Slack request sent again while its signature is fresh
(a replay), or an event Slack re-sends because it thinks it was missed
(`X-Slack-Retry-Num`), is ignored.

The first delivery of an id sets a marker with SET NX and a time to live longer than the
sender's retries (or the signature's freshness); every later one finds it. The marker is
set before the work, so a process dying mid-way loses that one delivery rather than doing
it twice: for an event (refreshing a view) the next one redoes it, and a person whose click
was lost clicks again (a click of their own is a request of its own). Redis must answer
within `within` seconds, Slack's answer waiting on it; otherwise StoreUnavailable.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.connections import unavailable_on_redis_errors

__all__ = ["SeenOnce"]

KEEP_SECONDS = 2 * 3600  # Slack retries an event three times within minutes
# Seconds: the marker is set before Slack is answered, within the 3 s Slack allows, and
# before the listener's own budget (bot.listeners.budget.LISTENER_BUDGET, 2 s).
ANSWER_WITHIN = 0.5


@unavailable_on_redis_errors
class SeenOnce:
    def __init__(
        self,
        redis: Redis,
        kind: str,
        keep_seconds: int = KEEP_SECONDS,
        within: float = ANSWER_WITHIN,
    ) -> None:
        self.redis, self.kind, self.keep_seconds = redis, kind, keep_seconds
        self.within = within

    async def first(self, delivery_id: str, within: float | None = None) -> bool:
        """True for the first delivery of `delivery_id`, False for every repeat; Redis must
        answer within `within` seconds (default: the guard's own)."""
        key = K.seen_once(self.kind, delivery_id)
        async with asyncio.timeout(within or self.within):  # TimeoutError: StoreUnavailable
            return bool(await self.redis.set(key, "1", nx=True, ex=self.keep_seconds))
