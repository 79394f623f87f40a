"""What each reviewer decided lately, newest first: their App Home's "decided recently".

DECIDE records the decision itself; this only keeps, per reviewer, which requests they
decided (a sorted set by time, cut to the latest KEPT), written when the decision's
notification is delivered. That delivery may come twice, so a note is idempotent.

It also remembers who opened their App Home tab lately (HOME_SEEN_SECONDS): only their
tabs are published again after a decision. Anyone else's tab is published fresh when they
open it (`app_home_opened`), so refreshing it for every decision would be work no one sees.
"""

from __future__ import annotations

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors

__all__ = ["KEPT", "ReviewerLog"]

KEPT = 50  # decisions kept per reviewer
IDLE_SECONDS = 90 * 86400  # a reviewer's list is dropped after this long without a decision
HOME_SEEN_SECONDS = 7 * 86400  # a tab opened this long ago is still refreshed after decisions


@unavailable_on_redis_errors
class ReviewerLog:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def note(self, user_id: str, request_id: str, at: float) -> bool:
        """`user_id` decided (or voted on) `request_id` at `at`; a repeat changes nothing.
        True when they opened their App Home tab lately (see `home_opened`)."""
        key = K.decided_by(user_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {request_id: at}, nx=True)
            pipe.zremrangebyrank(key, 0, -(KEPT + 1))
            pipe.expire(key, IDLE_SECONDS)
            pipe.exists(K.home_seen(user_id))
            replies = await pipe.execute()
        return bool(replies[-1])

    async def home_opened(self, user_id: str) -> None:
        """`user_id` opened their App Home tab: it is published again after their decisions
        for the next HOME_SEEN_SECONDS."""
        await self.redis.set(K.home_seen(user_id), "1", ex=HOME_SEEN_SECONDS)

    async def recent(self, user_id: str, count: int) -> list[str]:
        """The request ids `user_id` decided lately, newest first."""
        ids = await self.redis.zrange(K.decided_by(user_id), 0, count - 1, desc=True)
        return [as_text(i) for i in ids]
