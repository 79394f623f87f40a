"""The channel pacer: one post a second into each channel, whatever holds a post up."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise

from agent_host.durable.slots import holding
from bot.slack_notifier import ChannelPacer


async def test_posts_into_one_channel_stay_an_interval_apart_when_a_slot_comes_back_late() -> None:
    """A post reserves its channel's turn, waits with its slot set aside, and takes a slot
    again only when one is free: late, when every slot is busy (slow Slack calls). The post
    reserved after it still goes out an interval after it, not inside the same second (where
    Slack would answer 429)."""
    pacer = ChannelPacer(interval=0.3)
    slots = asyncio.Semaphore(1)  # (IN_FLIGHT is 256: the same with 256 slow calls)
    went: list[tuple[str, float]] = []

    async def post(name: str, after: float) -> None:
        await asyncio.sleep(after)
        async with holding(slots):
            await pacer.wait_turn("C")
            went.append((name, time.monotonic()))

    async def slow_call_elsewhere() -> None:
        await asyncio.sleep(0.1)
        async with holding(slots):
            await asyncio.sleep(0.45)  # a post into another channel, slow to answer

    await asyncio.wait_for(
        asyncio.gather(post("a", 0), post("b", 0.01), post("c", 0.02), slow_call_elsewhere()), 5
    )
    gaps = [round(later - earlier, 3) for (_, earlier), (_, later) in pairwise(went)]
    assert all(gap >= 0.29 for gap in gaps), f"posts into one channel {gaps} s apart"
