"""What is due by Redis's clock in per-shard schedules (sorted sets scored in milliseconds).

The sweeper's deadlines and the escalation ladder are such schedules, one sorted set per
shard. Reading them costs two round trips, whatever the number of shards: Redis's clock,
then one pipeline of a ZRANGE per shard (a cluster pipeline sends each to its node).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

__all__ = ["due_now"]


async def due_now(redis: Redis, schedules: list[str], batch: int) -> list[list[Any]]:
    """For each schedule, up to `batch` members whose score is at or before Redis's now."""
    seconds, micros = await redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    async with redis.pipeline(transaction=False) as pipe:
        for key in schedules:
            pipe.zrange(key, 0, now_ms, byscore=True, offset=0, num=batch)
        rows: list[list[Any]] = await pipe.execute()
    return rows
