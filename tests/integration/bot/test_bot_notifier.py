"""Posting under Slack's rate limits and errors: every message exactly once, paced."""

from __future__ import annotations

from pathlib import Path

from bot import blocks
from tests.support.stack import CHANNEL, REVIEWER, running_stack
from tests.support.waiting import eventually


def top_level_posts(calls: list[dict]) -> list[dict]:
    return [c for c in calls if not c.get("thread_ts")]


async def test_429_storm_on_post_message_still_posts_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.inject("chat.postMessage", status=429, retry_after=1, times=3)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        assert len(top_level_posts(stack.standin.calls_to("chat.postMessage"))) == 4
        [message] = stack.channel_messages(CHANNEL)
        assert message["ts"] == request.message_ts
        assert stack.standin.core.faults.pending() == []

        await stack.click(REVIEWER, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        await stack.thread_replies(CHANNEL, request.message_ts)
        assert len(stack.channel_messages(CHANNEL)) == 1
        assert stack.effects.count("refund") == 1


async def test_server_errors_on_post_message_are_retried_to_one_message(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.inject("chat.postMessage", status=500, times=2)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert len(stack.standin.calls_to("chat.postMessage")) == 3
        [message] = stack.channel_messages(CHANNEL)
        assert message["ts"] == request.message_ts


async def test_five_runs_into_one_channel_stay_under_one_post_per_second(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, rate_limit=1.0) as stack:
        runs = [await stack.start_run("refund-agent", "refund order 123") for _ in range(5)]

        async def all_posted() -> list | None:
            requests = [r for run in runs for r in await stack.host.store.run_requests(run)]
            return requests if len(requests) == 5 and all(r.message_ts for r in requests) else None

        requests = await eventually(all_posted, within=15)
        tops = stack.channel_messages(CHANNEL)
        assert len(tops) == 5
        assert sorted(m["ts"] for m in tops) == sorted(r.message_ts for r in requests)
        assert len(stack.standin.post_times[CHANNEL]) == 5
        assert stack.standin.max_posts_per_second(CHANNEL) <= 1
