"""Test helpers that read a shard-spread key across every shard (see agent_host.durable.keys)."""

from __future__ import annotations

from typing import Any

from agent_host.durable import keys as K


async def zcard_all(redis: Any, index: str) -> int:
    """`index` is a Shard attribute: "pending", "deadlines" or "runs"."""
    return sum([int(await redis.zcard(getattr(s, index))) for s in K.shards()])


async def zrange_all(redis: Any, index: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for shard in K.shards():
        for member, score in await redis.zrange(getattr(shard, index), 0, -1, withscores=True):
            found[member.decode() if isinstance(member, bytes) else member] = score
    return found


async def xlen_all(redis: Any, stream: str) -> int:
    """`stream` is "resume" or "outbox"."""
    total = 0
    for shard in K.shards():
        name = getattr(shard, stream)
        total += int(await redis.xlen(name)) if await redis.exists(name) else 0
    return total


async def xrange_all(redis: Any, stream: str) -> list[tuple[Any, Any]]:
    entries: list[tuple[Any, Any]] = []
    for shard in K.shards():
        entries += await redis.xrange(getattr(shard, stream))
    return entries


async def metric(redis: Any, name: str) -> float:
    return sum([float(await redis.hget(s.metrics, name) or 0) for s in K.shards()])


async def pass_deadline(redis: Any, request_id: str, seconds_ago: float = 1.0) -> None:
    """Make a pending request due now by Redis's clock (the one DECIDE and the sweeper
    read), by moving its deadline back: Redis's own clock cannot be moved."""
    seconds, micros = await redis.time()
    deadline = int(seconds) + int(micros) / 1e6 - seconds_ago
    k = K.Keys(request_id)
    await redis.hset(k.request(request_id), "expires_at", repr(deadline))
    await redis.zadd(k.shard.deadlines, {request_id: int(deadline * 1000)})
