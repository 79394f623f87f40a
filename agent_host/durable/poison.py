"""Stream entries that fail with an error of countersign's own: given up after
POISON_AFTER attempts, visibly, rather than retried for ever in silence.

A consumer leaves an entry whose handler raised pending, to be reclaimed and tried again.
That is right for what passes: Slack's "not now" (`RetryLater`), Redis or the network
away. Any other error is countersign's own, and the same entry would meet it on every
attempt. The consumer's owner says what giving such an entry up means (the outbox records
a refusal and tells the administrators; the resume worker fails the run, so its requester
hears of it in the thread); the consumer then acknowledges it.

An entry can also stop the process handling it (killed for its memory, a crash in native
code): no error is ever caught then, and each process that reclaims it would stop in turn.
Redis counts those attempts across processes (the entry's delivery count), so an entry
reclaimed after POISON_AFTER deliveries that never finished is given up without being
taken a further time (`NeverFinished`). A failure that passes (TRANSIENT) starts that count
afresh, so an outage is never taken for a process dying on the entry; so does a consumer
stopping on purpose (a deploy) for the entries it let go unfinished.

Errors are counted by each consumer in its own process; deliveries by Redis.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from agent_host.durable.connections import as_text
from agent_host.errors import RetryLater, StoreError

__all__ = [
    "POISON_AFTER",
    "TRANSIENT",
    "Failures",
    "GiveUp",
    "NeverFinished",
    "count_afresh",
    "never_finished",
]

# Attempts of one entry failing with an error of countersign's own before it is given up.
POISON_AFTER = 5

# Errors that pass: "not now", and Redis or the network away. Never given up for.
TRANSIENT = (RetryLater, StoreError, RedisError, RedisClusterException, OSError)

# What giving up an entry means, given (entry id, fields, the last error). Raising a
# TRANSIENT error leaves the entry pending: it is given up again on its next attempt.
GiveUp = Callable[[str, dict[str, str], Exception], Awaitable[None]]

_KEPT = 10_000  # entries whose failures are counted at once (then counted afresh)


class Failures:
    """How many times each entry has failed with an error of countersign's own."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def failed(self, entry_id: str) -> bool:
        """Count one more failure of `entry_id`; True once it is due to be given up."""
        count = self._counts.get(entry_id, 0) + 1
        if count == 1 and len(self._counts) >= _KEPT:
            self._counts.clear()
        self._counts[entry_id] = count
        return count >= POISON_AFTER

    def forget(self, entry_id: str) -> None:
        """`entry_id` succeeded, or was given up."""
        self._counts.pop(entry_id, None)


class NeverFinished(Exception):
    """Handed to `GiveUp` for an entry taken POISON_AFTER times or more before and never
    acknowledged: every process that took it stopped before it was done."""

    def __init__(self, attempts: int) -> None:
        super().__init__(
            f"taken {attempts} times and never finished: each process that took it "
            "stopped (killed or crashed) before it was done"
        )
        self.attempts = attempts


async def never_finished(
    redis: Any, stream: str, group: str, consumer: str, entry_ids: list[str]
) -> dict[str, int]:
    """Of `entry_ids`, just reclaimed by `consumer`, those taken POISON_AFTER times or more
    before this delivery, with that count. One round trip, paid only when a reclaim found
    entries (a consumer died, or a handler failed)."""
    if not entry_ids:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id in entry_ids:
            pipe.xpending_range(stream, group, entry_id, entry_id, 1, consumername=consumer)
        rows = await pipe.execute()
    before = {
        as_text(row[0]["message_id"]): int(row[0]["times_delivered"]) - 1 for row in rows if row
    }
    return {entry_id: n for entry_id, n in before.items() if n >= POISON_AFTER}


async def count_afresh(
    redis: Any, stream: str, group: str, consumer: str, entry_ids: list[str]
) -> None:
    """`entry_ids` (held by `consumer`) failed in a way that passes, or were let go by a
    consumer stopping on purpose: their delivery counts start again (XCLAIM RETRYCOUNT 0).
    Best effort: with Redis away they count one more."""
    with contextlib.suppress(RedisError, OSError):
        await redis.xclaim(stream, group, consumer, 0, entry_ids, retrycount=0, justid=True)
