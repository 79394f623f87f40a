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
Redis tells such an entry apart: its delivery count. A handling that ends in a caught
failure, or is let go by a consumer stopping on purpose (a deploy), starts that count
afresh (COUNT_AFRESH), so an entry reclaimed with a count above SUSPECT_AFTER was taken
that many times in a row and never reached a verdict: a suspect. A suspect is handled
alone in its process (`suspects.SuspectGate`: after what is in flight, waited for at most
`suspects.QUIET_WAIT`, and before anything else), each such attempt counted in Redis before
it begins; after POISON_AFTER attempts alone that never finished, it is given up without
being handled again (`NeverFinished`), and after as many more (giving it up stopped the
process too), abandoned: a copy kept in `<stream>:abandoned` and counted in /metrics
(`abandon`) before it is acknowledged, and a critical log line. Entries that were merely in
flight beside it are handled alone once, and go on.

Errors are counted in Redis too, one counter per entry (`errors_key`, kept a week after
its last error), and only by the consumer the entry is pending under (COUNT_ERROR): an
entry whose errors alternate with deaths, each in a new process, is still given up after
POISON_AFTER errors. What was counted of an entry (its errors, its attempts alone) goes
with its acknowledgement. Only an entry that failed is retried (reclaimed), so one handled
at its first delivery costs nothing more.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.errors import RetryLater, StoreError

__all__ = [
    "POISON_AFTER",
    "SUSPECT_AFTER",
    "TRANSIENT",
    "GiveUp",
    "NeverFinished",
    "abandon",
    "abandoned_key",
    "attempt_alone",
    "attempts_key",
    "errors_key",
    "forget_attempts",
    "suspects",
    "take_back_attempt",
]

# Attempts of one entry failing with an error of countersign's own before it is given up.
POISON_AFTER = 5

# Errors that pass: "not now", and Redis or the network away. Never given up for.
TRANSIENT = (RetryLater, StoreError, RedisError, RedisClusterException, OSError)

# What giving up an entry means, given (entry id, fields, the last error). Raising a
# TRANSIENT error leaves the entry pending: it is given up again on its next attempt.
GiveUp = Callable[[str, dict[str, str], Exception], Awaitable[None]]

# Deliveries in a row that reached no verdict before an entry is a suspect. One is not
# enough: everything a process held when it died (or when Redis went away before a count
# could start afresh) has one, and handling all that alone, one by one, would stall the
# process for nothing. A second in a row is a crash loop, and costs at most one death more.
SUSPECT_AFTER = 2

# How long a stream's attempts hash outlives its last suspect, and an entry's error count
# its last error (both are dropped once the entry is acknowledged; this only bounds what an
# entry trimmed or deleted while pending would leave behind).
KEPT_SECONDS = 7 * 86400

# Copies of abandoned entries kept per stream, about (the newest).
ABANDONED_KEPT = 1000

# The shard's counter of abandoned entries, by stream name: `abandoned:resume`, ...
ABANDONED = "abandoned:"


class NeverFinished(Exception):
    """Handed to `GiveUp` for an entry whose process died every time it was handled alone,
    POISON_AFTER times: the entry is what stops it."""

    def __init__(self, attempts: int) -> None:
        super().__init__(
            f"handled alone {attempts} times and never finished: each process that took it "
            "stopped (killed or crashed) before it was done"
        )
        self.attempts = attempts


def attempts_key(stream: str) -> str:
    """The hash of a stream's suspects' attempts alone (in the stream's own hash slot)."""
    return f"{stream}:attempts"


def errors_key(stream: str, entry_id: str) -> str:
    """The count of an entry's errors of countersign's own (in its stream's hash slot)."""
    return f"{stream}:errors:{entry_id}"


async def suspects(
    redis: Any, stream: str, group: str, consumer: str, entry_ids: list[str]
) -> set[str]:
    """Of `entry_ids`, just reclaimed by `consumer`, those whose last SUSPECT_AFTER
    deliveries reached no verdict (XPENDING's delivery count). One round trip, paid only
    when a reclaim found entries."""
    if not entry_ids:
        return set()
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id in entry_ids:
            pipe.xpending_range(stream, group, entry_id, entry_id, 1, consumername=consumer)
        rows = await pipe.execute()
    return {
        as_text(row[0]["message_id"])
        for row in rows
        if row and row[0]["times_delivered"] > SUSPECT_AFTER
    }


async def attempt_alone(redis: Any, stream: str, entry_id: str) -> int:
    """Count one more attempt of suspect `entry_id`, before it begins; returns the count."""
    key = attempts_key(stream)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hincrby(key, entry_id, 1)
        pipe.expire(key, KEPT_SECONDS)
        count, _ = await pipe.execute()
    return int(count)


async def take_back_attempt(redis: Any, stream: str, entry_id: str) -> None:
    """The attempt just counted for suspect `entry_id` ended in a caught failure (giving it
    up met Slack's "not now"): not a death. Best effort: with Redis away it stays counted."""
    with contextlib.suppress(RedisError, OSError):
        await redis.hincrby(attempts_key(stream), entry_id, -1)


def forget_attempts(stream: str, entry_id: str) -> Callable[[Any], Awaitable[None]]:
    """The write dropping what was counted of a retried entry (its errors, its attempts as
    a suspect), to send with its acknowledgement."""

    async def queue(pipe: Any) -> None:
        pipe.hdel(attempts_key(stream), entry_id)
        pipe.delete(errors_key(stream, entry_id))

    return queue


def abandoned_key(stream: str) -> str:
    """The stream keeping copies of the entries `stream` abandoned (in its hash slot)."""
    return f"{stream}:abandoned"


async def abandon(
    redis: Any, stream: str, entry_id: str, fields: dict[str, str], deaths: int
) -> None:
    """Keep a copy of an entry about to be acknowledged unhandled (its handling, then its
    giving up, stopped every process that took it), and count it in its shard's counters
    (/metrics), both or neither: nothing is lost, nor let go in silence."""
    copy = {"entry_id": entry_id, "deaths": str(deaths), "fields": json.dumps(fields)}
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(abandoned_key(stream), copy, maxlen=ABANDONED_KEPT, approximate=True)
        pipe.hincrby(K.metrics_of(stream), f"{ABANDONED}{stream.rpartition(':')[2]}", 1)
        await pipe.execute()
