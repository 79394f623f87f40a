"""burst_500_dropped and burst_max_per_channel_per_s.

500 approval requests become pending at once (saved concurrently, as many workers pausing
at the same moment would), routed 10 to each of 50 channels in a shuffled order (seeded),
while `countersign serve` runs: its outbox hands each to the SlackNotifier, which posts to
the stand-in. The stand-in enforces Slack's limit for chat.postMessage,
`rate_limit_per_channel=1.0`, answering 429 with Retry-After when a channel is posted to
sooner than a second after its last post.

At 1 post/s per channel, 10 posts per channel take at least 9 s (the notifier's pacer
spaces them 1.05 s apart: 9.45 s), so the wait is bounded at DEADLINE seconds. `dropped` is
requests not posted by then (the details say whether they were still queued in the outbox,
i.e. late, or gone); `max_per_channel_per_s` is the stand-in's `max_posts_per_second`: the
most accepted posts to one channel within any one-second window.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent_host.approvals import Route
from slack_sandbox import SlackStandIn

from .common import Figure, clone_paused, dedicated_redis, refund_paused
from .stack import (
    group_backlog,
    outbox_streams,
    persist_pauses,
    serve_process,
    standin,
    wait_streams_drained,
)

__all__ = ["run"]

REQUESTS = 500
CHANNELS = [f"C0BURST{n:02d}" for n in range(50)]
DEADLINE = 45.0  # seconds from the burst to giving up on the rest
PACED_IDEAL = (REQUESTS // len(CHANNELS) - 1) * 1.05  # the notifier's pacing, at best
SEED = 7
_REQUEST_ID = re.compile(r"req_[0-9a-f]+_\d{4}")


class ShuffledRouter:
    """Hands out the channels of a pre-shuffled list, one per request."""

    def __init__(self, order: list[str]) -> None:
        self.order = iter(order)

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return Route(route_id="burst", destination=next(self.order))


def posted(slack: SlackStandIn) -> list[tuple[str, str]]:
    """(channel, request id) of every top-level approval message in the burst channels."""
    found = []
    for message in slack.workspace.messages:
        if message.channel in CHANNELS and message.thread_ts is None:
            match = _REQUEST_ID.search(message.text)
            found.append((message.channel, match.group(0) if match else ""))
    return found


async def _all_posted(slack: SlackStandIn, changes: asyncio.Queue[Any]) -> None:
    """Returns once every request is posted (woken by the stand-in's change events)."""
    while len(posted(slack)) < REQUESTS:
        await changes.get()


async def run(tmp: Path) -> list[Figure]:
    template = await refund_paused()
    order = CHANNELS * (REQUESTS // len(CHANNELS))
    random.Random(SEED).shuffle(order)
    outcomes = [clone_paused(template) for _ in range(REQUESTS)]
    async with (
        dedicated_redis(tmp, "burst") as (server, redis),
        standin(rate_limit=1.0, extra_channels=CHANNELS) as slack,
        serve_process(tmp / "serve", server.url, slack),
    ):
        await wait_streams_drained(redis)  # the outbox's consumer group exists
        changes = slack.subscribe()
        started = time.time()
        requests = await persist_pauses(
            redis, outcomes, ShuffledRouter(order), batch=100, create_runs=False
        )
        saved_s = time.time() - started
        expected = {r.request_id for r in requests}
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_all_posted(slack, changes), started + DEADLINE - time.time())
        slack.unsubscribe(changes)
        elapsed = time.time() - started
        messages = posted(slack)
        queued = await group_backlog(redis, outbox_streams())
        post_calls = len(slack.calls_to("chat.postMessage"))
        max_rate = slack.max_posts_per_second()
        times = [t for ch in CHANNELS for t in slack.post_times.get(ch, [])]

    delivered = {rid for _, rid in messages} & expected
    dropped = REQUESTS - len(delivered)
    per_channel = Counter(channel for channel, _ in messages)
    details = {
        "requests": REQUESTS,
        "channels": len(CHANNELS),
        "order": f"10 per channel, shuffled (seed {SEED})",
        "deadline_s": DEADLINE,
        "saved_in_s": round(saved_s, 3),
        "posted": len(delivered),
        "duplicate_posts": len(messages) - len(delivered),
        "still_queued_in_outbox_at_deadline": queued,
        "last_post_after_s": round(max(times) - started, 2) if times else None,
        "paced_ideal_s": round(PACED_IDEAL, 2),
        "waited_s": round(elapsed, 2),
        "post_calls": post_calls,
        "refused_429": post_calls - len(times),
        "posts_per_channel_min_max": [
            min(per_channel.values(), default=0),
            max(per_channel.values(), default=0),
        ],
    }
    return [
        Figure(
            "burst_500_dropped",
            dropped,
            "requests",
            0,
            f"all {REQUESTS} posted within {DEADLINE:g} s",
            "<= 0",
            details,
        ),
        Figure(
            "burst_max_per_channel_per_s",
            max_rate,
            "/s",
            1.0,
            "stand-in limit (Slack: 1 post/s per channel)",
            "<= 1.2",
        ),
        Figure(
            "burst_500_seconds",
            round(max(times) - started, 2) if times else None,
            "s",
            round(PACED_IDEAL, 2),
            "10 posts per channel at the pacer's 1.05 s spacing",
            "",
        ),
    ]
