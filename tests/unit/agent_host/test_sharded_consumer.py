"""A process's consumer of one stream kind runs one consumer per shard; stopped (cancelled
by the host once its grace is spent), it ends only once every shard's consumer has: the
host closes Redis right after, and a shard still sending its last acknowledgements then
would lose them (and leave its connection open)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_host.durable.streams import ShardedConsumer


class _Shard:
    """A shard's consumer whose stop takes `seconds` (its last flush)."""

    def __init__(self, seconds: float, ended: list[float]) -> None:
        self.seconds, self.ended = seconds, ended

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await stop.wait()
        finally:
            await asyncio.sleep(self.seconds)
            self.ended.append(self.seconds)


async def test_a_cancelled_sharded_consumer_ends_only_once_every_shard_has() -> None:
    ended: list[float] = []
    shards: list[Any] = [_Shard(0.0, ended), _Shard(0.2, ended), _Shard(0.1, ended)]
    running = asyncio.create_task(ShardedConsumer(shards).run(asyncio.Event()))
    await asyncio.sleep(0.05)
    running.cancel()
    await asyncio.wait([running], timeout=5)
    assert running.cancelled()
    assert sorted(ended) == [0.0, 0.1, 0.2]  # none still going once it ended


async def test_a_stopped_sharded_consumer_ends_once_every_shard_has() -> None:
    ended: list[float] = []
    stop = asyncio.Event()
    shards: list[Any] = [_Shard(0.0, ended), _Shard(0.2, ended)]
    running = asyncio.create_task(ShardedConsumer(shards).run(stop))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert sorted(ended) == [0.0, 0.2]
