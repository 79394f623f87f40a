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
alone in its process (`suspects.SuspectGate`), each such attempt counted in Redis before
it begins; after POISON_AFTER attempts alone that never finished, it is given up without
being handled again (`NeverFinished`), and after as many more (giving it up stopped the
process too), let go: acknowledged, a copy kept in `<stream>:let-go` (`let_go`), counted
in /metrics and logged as critical. Entries that were merely in flight beside it are
handled alone once, and go on.

Both are counted in Redis, in the stream's attempts hash (`attempts_key`): errors, so an
entry whose errors alternate with deaths, each in a new process, is still given up after
POISON_AFTER errors; and a suspect's attempts alone. What was counted of an entry goes
with its acknowledgement; only an entry that failed is retried (reclaimed), so an entry
handled at its first delivery costs nothing more.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from agent_host.durable.connections import as_text
from agent_host.errors import RetryLater, StoreError

__all__ = [
    "POISON_AFTER",
    "SUSPECT_AFTER",
    "TRANSIENT",
    "GiveUp",
    "NeverFinished",
    "attempt_alone",
    "attempts_key",
    "count_error",
    "forget_attempts",
    "let_go",
    "let_go_key",
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

# How long a stream's attempts hash outlives its last suspect (a field is dropped once its
# entry is acknowledged; this only bounds what a trimmed entry would leave behind).
ATTEMPTS_KEPT_SECONDS = 7 * 86400

# Entries let go kept per stream, newest (an entry let go is a crash loop giving up too).
LET_GO_KEPT = 1000


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
    """The hash of a stream's suspects' attempts (in the stream's own hash slot)."""
    return f"{stream}:attempts"


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
        pipe.expire(key, ATTEMPTS_KEPT_SECONDS)
        count, _ = await pipe.execute()
    return int(count)


async def take_back_attempt(redis: Any, stream: str, entry_id: str) -> None:
    """The attempt just counted for suspect `entry_id` ended in a caught failure (giving it
    up met Slack's "not now"): not a death. Best effort: with Redis away it stays counted."""
    with contextlib.suppress(RedisError, OSError):
        await redis.hincrby(attempts_key(stream), entry_id, -1)


async def count_error(redis: Any, stream: str, entry_id: str) -> int:
    """Count one more error of countersign's own of `entry_id`; returns the count."""
    key = attempts_key(stream)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hincrby(key, _errors_field(entry_id), 1)
        pipe.expire(key, ATTEMPTS_KEPT_SECONDS)
        count, _ = await pipe.execute()
    return int(count)


def _errors_field(entry_id: str) -> str:
    return f"errors:{entry_id}"


def forget_attempts(stream: str, entry_id: str) -> Callable[[Any], Awaitable[None]]:
    """The write dropping what was counted of a retried entry (its errors, its attempts as
    a suspect), to send with its acknowledgement."""

    async def queue(pipe: Any) -> None:
        pipe.hdel(attempts_key(stream), entry_id, _errors_field(entry_id))

    return queue


def let_go_key(stream: str) -> str:
    """The stream keeping copies of the entries `stream` let go (in its hash slot)."""
    return f"{stream}:let-go"


def let_go(
    stream: str, entry_id: str, fields: dict[str, str], deaths: int
) -> Callable[[Any], Awaitable[None]]:
    """The write keeping a copy of an entry let go (neither handled nor given up: its
    process stopped every time), to send with its acknowledgement: nothing is lost, and
    /metrics counts it (`countersign_entries_let_go`)."""

    async def queue(pipe: Any) -> None:
        copy = {"entry_id": entry_id, "deaths": str(deaths), "fields": json.dumps(fields)}
        pipe.xadd(let_go_key(stream), copy, maxlen=LET_GO_KEPT, approximate=True)

    return queue
