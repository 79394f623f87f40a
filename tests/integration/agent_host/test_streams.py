"""Stream consumption details: trimming keeps every unread and unacknowledged entry."""

from __future__ import annotations

from redis.asyncio import Redis

from agent_host.durable.streams import trim_acknowledged


async def test_trim_drops_only_acknowledged_entries(redis: Redis) -> None:
    ids = [await redis.xadd("s", {"n": n}) for n in range(6)]
    await redis.xgroup_create("s", "g", id="0")
    read = await redis.xreadgroup("g", "c", {"s": ">"}, count=4)  # 4 delivered, 2 unread
    assert len(read[0][1]) == 4
    await redis.xack("s", "g", ids[0], ids[1], ids[3])  # ids[2] still pending

    assert await trim_acknowledged(redis, "s", "g") == 2
    left = [entry_id for entry_id, _ in await redis.xrange("s")]
    assert left == ids[2:]  # the pending one, the acknowledged after it, the unread two


async def test_trim_with_nothing_pending_keeps_the_unread(redis: Redis) -> None:
    ids = [await redis.xadd("s", {"n": n}) for n in range(3)]
    await redis.xgroup_create("s", "g", id="0")
    await redis.xreadgroup("g", "c", {"s": ">"}, count=2)
    await redis.xack("s", "g", ids[0], ids[1])
    assert await trim_acknowledged(redis, "s", "g") == 2
    assert [entry_id for entry_id, _ in await redis.xrange("s")] == ids[2:]


async def test_trim_of_a_missing_stream_or_group_does_nothing(redis: Redis) -> None:
    assert await trim_acknowledged(redis, "nothing", "g") == 0
    await redis.xadd("s", {"n": 1})
    assert await trim_acknowledged(redis, "s", "no-group") == 0
    assert await redis.xlen("s") == 1
