"""Deliveries taken at most once: a sender that retries (Slack re-sends an event it thinks
was missed, with `X-Slack-Retry-Num`) gets its repeat ignored.

The first delivery of an id sets a marker with SET NX and a time to live longer than the
sender's retries; every later one finds it. The marker is set before the work, so a
process dying mid-way loses that one delivery rather than doing it twice: for what this
guards (refreshing a view) a lost one is redone by the next.
"""

from __future__ import annotations

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.connections import unavailable_on_redis_errors

__all__ = ["SeenOnce"]

KEEP_SECONDS = 2 * 3600  # Slack retries an event three times within minutes


@unavailable_on_redis_errors
class SeenOnce:
    def __init__(self, redis: Redis, kind: str, keep_seconds: int = KEEP_SECONDS) -> None:
        self.redis, self.kind, self.keep_seconds = redis, kind, keep_seconds

    async def first(self, delivery_id: str) -> bool:
        """True for the first delivery of `delivery_id`, False for every repeat."""
        key = K.seen_once(self.kind, delivery_id)
        return bool(await self.redis.set(key, "1", nx=True, ex=self.keep_seconds))
