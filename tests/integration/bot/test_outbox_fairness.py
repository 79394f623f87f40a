"""One busy channel does not hold up the others. Slack takes one post a second into a
channel, so a burst of requests into one channel goes out over seconds; a request for
another channel, paused meanwhile, is posted at once (against the Slack stand-in, which
refuses a second post within a second, and the bot's own pacer)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent_host.durable import keys as K
from agent_host.durable import outbox
from agent_host.durable.route_book import parse_spec
from tests.support.stack import ADMIN, OPS, REQUESTER, Stack, running_stack
from tests.support.waiting import eventually

BURST = 6  # requests into the busy channel: the last is posted some 5 s after the first
PROMPT = 2.0  # seconds within which the other channel's request is posted


async def _posted(stack: Stack, run_ids: list[str]) -> int:
    requests = [r for run_id in run_ids for r in await stack.host.store.run_requests(run_id)]
    return sum(1 for r in requests if r.message_ts)


async def _burst_then_another_channel(stack: Stack, burst: list[str], other: str) -> None:
    """Start the burst (refunds, into the default channel); once its first request is
    posted and the outbox has read the rest, start a run whose request goes to OPS; it
    must be posted within PROMPT seconds, while the burst is still being paced."""
    await stack.bot.routes.add(parse_spec(f"agent=cleanup-agent channel={OPS}"), ADMIN)
    store = stack.host.store
    for run_id in burst:
        await store.create_run("refund-agent", "refund order 123", REQUESTER, run_id)

    async def first_posted_rest_read() -> bool:
        if await _posted(stack, burst) < 1:
            return False
        read = 0
        for shard in {K.Keys(run_id).shard for run_id in burst}:
            pending = await stack.host.redis.xpending(shard.outbox, K.OUTBOX_GROUP)
            read += int(pending["pending"])
        return read >= len(burst) - 1

    await eventually(first_posted_rest_read, within=10)
    await store.create_run("cleanup-agent", "delete /tmp/a.docx", REQUESTER, other)
    started = time.monotonic()

    async def other_posted() -> bool:
        return await _posted(stack, [other]) == 1

    await eventually(other_posted, within=15)
    waited = time.monotonic() - started
    still_paced = len(burst) - await _posted(stack, burst)
    assert waited < PROMPT, f"the request for {OPS} waited {waited:.1f}s behind the burst"
    assert still_paced >= 2, "the burst was over before the other request: nothing was tested"
    [request] = await store.run_requests(other)
    assert request.message_channel == OPS


async def test_a_request_read_after_a_paced_burst_in_its_shard_is_posted_at_once(
    redis_url: str, tmp_path: Path
) -> None:
    """All in one shard: its outbox consumer is still waiting on the burst's posts when the
    other request is written, and reads it anyway."""
    shard = K.Shard(3)
    burst = [K.new_run_id_in(shard) for _ in range(BURST)]
    async with running_stack(redis_url, tmp_path, rate_limit=1.0) as stack:
        await _burst_then_another_channel(stack, burst, K.new_run_id_in(shard))


async def test_posts_waiting_for_their_turn_leave_their_slots_to_other_channels(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbox handles a bounded number of entries at once (here 2). The burst's posts
    waiting for their channel's turn set their slots aside, so the other channel's request,
    in another shard, does not wait for a slot."""
    monkeypatch.setattr(outbox, "IN_FLIGHT", 2)
    burst = [K.new_run_id_in(K.Shard(n)) for n in range(BURST)]
    async with running_stack(redis_url, tmp_path, rate_limit=1.0) as stack:
        await _burst_then_another_channel(stack, burst, K.new_run_id_in(K.Shard(9)))
