"""Stream consumption details: trimming keeps every unread and unacknowledged entry, and
handled entries are acknowledged without waiting behind the rest of their batch."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_host.durable.connections import as_text
from agent_host.durable.poison import POISON_AFTER, errors_key
from agent_host.durable.slots import set_aside
from agent_host.durable.streams import (
    READ_AHEAD,
    Handler,
    StreamConsumer,
    WithAck,
    trim_acknowledged,
)
from tests.support.waiting import eventually


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


async def _pending(redis: Redis) -> list[bytes]:
    rows = await redis.xpending_range("s", "g", min="-", max="+", count=10)
    return [row["message_id"] for row in rows]


@pytest.mark.parametrize("concurrent", [True, False], ids=["concurrent", "one-by-one"])
async def test_an_entry_handled_while_others_of_its_batch_run_is_acknowledged_at_once(
    redis: Redis, concurrent: bool
) -> None:
    """The run loop sends the last acknowledgement of a batch with its next read; every
    other one goes as soon as its entry is handled, so a handled entry never waits, idle,
    behind a slow one of its batch (where another consumer could reclaim it)."""
    await redis.xadd("s", {"n": "quick"})  # one by one, it is handled first
    slow = await redis.xadd("s", {"n": "slow"})
    release, handled = asyncio.Event(), asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "slow":
            await release.wait()
        handled.set()

    consumer = StreamConsumer(redis, "s", "g", "c", handler, concurrent=concurrent)
    await consumer.ensure_group()
    polling = asyncio.create_task(consumer.poll(block_ms=1, flush=False))
    await handled.wait()
    await eventually(lambda: _pending_is(redis, [slow]), within=2)  # the quick one: acked

    release.set()
    assert await polling == 2
    assert await _pending(redis) == [slow]  # the batch's last: with the next read
    assert await consumer.poll(block_ms=1, flush=False) == 0
    assert await _pending(redis) == []


async def _pending_is(redis: Redis, expected: list[bytes]) -> bool:
    return await _pending(redis) == expected


async def test_a_stopping_consumer_acknowledges_what_it_handled(redis: Redis) -> None:
    await redis.xadd("s", {"n": "last"})
    stop = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        stop.set()  # the run loop stops right after this entry, before any next read

    consumer = StreamConsumer(redis, "s", "g", "c", handler)
    await consumer.ensure_group()
    await asyncio.wait_for(consumer.run(stop), 5)
    assert await _pending(redis) == []
    assert (await redis.xinfo_groups("s"))[0]["entries-read"] == 1


@pytest.mark.parametrize("batch", ["one-in-flight", "one-by-one"])
async def test_an_entry_waiting_for_its_turn_is_not_reclaimed_by_another_consumer(
    redis: Redis, batch: str
) -> None:
    """The second entry of a read waits longer than `idle_ms` behind the first: for a slot
    (the outbox's bound on entries in flight) or for its turn (a resume worker handles its
    entries one by one). It is held meanwhile, so another consumer never takes it over (and
    handles it a second time)."""
    for n in ("first", "second"):
        await redis.xadd("s", {"n": n})
    handled: list[tuple[str, str]] = []

    def handler_of(consumer: str) -> Handler:
        async def handler(entry_id: str, fields: dict[str, str]) -> None:
            handled.append((consumer, fields["n"]))
            if fields["n"] == "first":
                await asyncio.sleep(0.9)  # three times idle_ms

        return handler

    concurrent = batch == "one-in-flight"
    waiting = StreamConsumer(
        redis,
        "s",
        "g",
        "a",
        handler_of("a"),
        idle_ms=300,
        count=2,
        concurrent=concurrent,
        batch_wait=5,  # the poll sees both through (neither finishes behind it)
        in_flight=asyncio.Semaphore(1) if concurrent else None,
    )
    other = StreamConsumer(redis, "s", "g", "b", handler_of("b"), idle_ms=300)
    await waiting.ensure_group()
    polling = asyncio.create_task(waiting.poll(block_ms=1))
    await eventually(lambda: _has(handled, ("a", "first")), within=2)
    for _ in range(8):  # over the whole wait, the other consumer looks for idle entries
        await asyncio.sleep(0.1)
        other._reclaimed_at = None  # due at every poll
        assert await other.poll(block_ms=1) == 0

    assert await polling == 2
    assert handled == [("a", "first"), ("a", "second")]
    assert await _pending(redis) == []


async def _has(items: list[tuple[str, str]], item: tuple[str, str]) -> bool:
    return item in items


async def test_a_heartbeat_refused_by_redis_is_logged_and_the_entry_still_handled(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream goes away under a slow handler (someone deleted it, or Redis lost it): the
    heartbeat's XCLAIM is refused with NOGROUP, which is said in the log, and the handler
    finishes undisturbed."""
    await redis.xadd("s", {"n": "slow"})
    deleted, finished = asyncio.Event(), asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        await redis.delete("s")
        deleted.set()
        await asyncio.sleep(0.3)  # three beats of idle_ms=300
        finished.set()

    consumer = StreamConsumer(redis, "s", "g", "c", handler, idle_ms=300)
    await consumer.ensure_group()
    with caplog.at_level(logging.WARNING, logger="agent_host.durable.streams"):
        assert await consumer.poll(block_ms=1, flush=False) == 1
    assert finished.is_set()
    assert any("heartbeat of 1 entries failed" in r.getMessage() for r in caplog.records)


async def test_entries_a_failed_poll_never_began_are_let_go_to_be_reclaimed(
    redis: Redis,
) -> None:
    """A poll stopped by an error (here the first entry's acknowledgement fails) leaves the
    rest of its read unhandled: they are no longer held, so another consumer reclaims them
    once idle, instead of their being kept claimed for ever."""
    for n in ("first", "second"):
        await redis.xadd("s", {"n": n})
    handled: list[tuple[str, str]] = []

    async def broken_ack(pipe: Pipeline) -> None:
        raise RuntimeError("the acknowledgement's writes could not be queued")

    async def first(entry_id: str, fields: dict[str, str]) -> WithAck:
        handled.append(("a", fields["n"]))
        return broken_ack

    async def second(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(("b", fields["n"]))

    failing = StreamConsumer(redis, "s", "g", "a", first, idle_ms=300, count=2)
    other = StreamConsumer(redis, "s", "g", "b", second, idle_ms=300)
    await failing.ensure_group()
    with pytest.raises(RuntimeError, match="could not be queued"):
        await failing.poll(block_ms=1, flush=False)
    assert handled == [("a", "first")]

    async def reclaimed() -> bool:
        other._reclaimed_at = None  # due at every poll
        await other.poll(block_ms=1)
        return ("b", "second") in handled

    await eventually(reclaimed, within=3)


async def test_a_poll_that_reclaims_first_acknowledges_what_the_last_one_handled(
    redis: Redis,
) -> None:
    """The run loop's last handled entry is acknowledged with its next command: a read, or,
    when reclaiming is due and finds entries, the XAUTOCLAIM. It is never left pending
    while the reclaimed entry's handler runs (another consumer would reclaim and handle it
    a second time)."""
    await redis.xadd("s", {"n": "left by a dead consumer"})
    await redis.xgroup_create("s", "g", id="0")
    await redis.xreadgroup("g", "dead", {"s": ">"}, count=1)  # pending, never acknowledged
    handled_last = await redis.xadd("s", {"n": "handled"})
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "left by a dead consumer":
            started.set()
            await release.wait()

    consumer = StreamConsumer(redis, "s", "g", "c", handler, idle_ms=100, count=1)
    consumer._reclaimed_at = asyncio.get_running_loop().time()  # reclaiming not due yet
    await consumer.ensure_group()
    assert await consumer.poll(block_ms=1, flush=False) == 1  # the new entry, unacked yet
    assert handled_last in await _pending(redis)

    await asyncio.sleep(0.15)  # the dead consumer's entry is idle long enough
    consumer._reclaimed_at = None  # reclaiming is due
    polling = asyncio.create_task(consumer.poll(block_ms=1, flush=False))
    await asyncio.wait_for(started.wait(), 2)
    assert handled_last not in await _pending(redis)  # acknowledged with the XAUTOCLAIM
    release.set()
    assert await polling == 1


async def test_a_failed_acknowledgement_in_a_concurrent_batch_waits_for_the_rest(
    redis: Redis,
) -> None:
    """One entry's acknowledgement fails while the rest of its concurrent batch is still
    being handled: the poll raises only once the rest are through, so none is left running,
    unwatched, after the loop has moved on."""
    for n in ("quick", "slow"):
        await redis.xadd("s", {"n": n})
    slow_done = asyncio.Event()

    async def broken_ack(pipe: Pipeline) -> None:
        raise RuntimeError("the acknowledgement's writes could not be queued")

    async def handler(entry_id: str, fields: dict[str, str]) -> WithAck | None:
        if fields["n"] == "quick":
            return broken_ack
        await asyncio.sleep(0.2)
        slow_done.set()
        return None

    consumer = StreamConsumer(redis, "s", "g", "c", handler, count=2, concurrent=True)
    await consumer.ensure_group()
    with pytest.raises(RuntimeError, match="could not be queued"):
        await consumer.poll(block_ms=1, flush=False)
    assert slow_done.is_set()
    await consumer.flush()  # the slow one's acknowledgement was kept, and goes now
    assert await _pending(redis) == [(await redis.xrange("s"))[0][0]]  # the quick one waits


async def test_a_consumer_started_again_keeps_its_entries_claimed(redis: Redis) -> None:
    """A consumer stopped while its heartbeat's XCLAIM was about to start, then run again,
    still keeps a slow entry claimed: no other consumer takes it over."""
    consumer_entries: list[tuple[str, str]] = []

    async def slow(entry_id: str, fields: dict[str, str]) -> None:
        consumer_entries.append(("a", fields["n"]))
        await asyncio.sleep(0.9)  # three times idle_ms

    async def other_handler(entry_id: str, fields: dict[str, str]) -> None:
        consumer_entries.append(("b", fields["n"]))

    consumer = StreamConsumer(redis, "s", "g", "a", slow, idle_ms=300)
    other = StreamConsumer(redis, "s", "g", "b", other_handler, idle_ms=300)
    await consumer.ensure_group()
    consumer._hold("0-1")  # a first run: a beat is about to claim, and the run stops
    consumer._held["0-1"] -= 1
    consumer._heartbeat()
    consumer._release("0-1")
    consumer._stop_heartbeat()
    await asyncio.sleep(0)

    await redis.xadd("s", {"n": "slow"})
    polling = asyncio.create_task(consumer.poll(block_ms=1))
    await eventually(lambda: _has(consumer_entries, ("a", "slow")), within=2)
    for _ in range(8):  # over the whole wait, the other consumer looks for idle entries
        await asyncio.sleep(0.1)
        other._reclaimed_at = None
        assert await other.poll(block_ms=1) == 0
    assert await polling == 1
    assert consumer_entries == [("a", "slow")]


async def test_a_slow_entry_finishes_behind_the_poll_and_those_after_it_go_first(
    redis: Redis,
) -> None:
    """A concurrent consumer (the outbox) waits `batch_wait` for its batch, then reads on:
    an entry still going (a post waiting for its channel's turn) finishes behind it, kept
    claimed all along, and the entries written after it are handled meanwhile."""
    slow = await redis.xadd("s", {"n": "slow"})
    release, handled = asyncio.Event(), []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "slow":
            await release.wait()
        handled.append(fields["n"])

    async def taken_over(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(f"taken over: {fields['n']}")

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, idle_ms=300, concurrent=True, batch_wait=0.05
    )
    other = StreamConsumer(redis, "s", "g", "b", taken_over, idle_ms=300)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await eventually(lambda: _pending_is(redis, [slow]), within=2)
        await redis.xadd("s", {"n": "later"})
        await eventually(lambda: _has_item(handled, "later"), within=2)
        await eventually(lambda: _pending_is(redis, [slow]), within=2)  # "later": acked
        for _ in range(8):  # three times idle_ms: the slow one is still claimed
            await asyncio.sleep(0.1)
            other._reclaimed_at = None
            assert await other.poll(block_ms=1) == 0

        release.set()
        await eventually(lambda: _pending_is(redis, []), within=2)
        assert handled == ["later", "slow"]
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_a_stopping_consumer_leaves_what_is_behind_its_poll_pending(
    redis: Redis,
) -> None:
    """Stopped while an entry is still going behind its poll, the consumer waits for it
    (the host's grace); cancelled once the grace is spent, it stops it too and leaves it
    pending, for another consumer (or itself, restarted) to reclaim."""
    slow = await redis.xadd("s", {"n": "slow"})
    started = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        started.set()
        await asyncio.sleep(60)

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, concurrent=True, batch_wait=0.05, block_ms=50
    )
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    await asyncio.wait_for(started.wait(), 2)
    await asyncio.sleep(0.1)  # the poll has moved on, leaving it behind
    stop.set()
    await asyncio.sleep(0.3)  # reads of 50 ms: its loop has seen the stop
    assert not running.done()  # waiting for it
    running.cancel()  # the grace spent
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert not consumer._behind
    assert await _pending(redis) == [slow]


async def test_a_stopping_consumer_lets_what_is_behind_its_poll_finish(redis: Redis) -> None:
    """A post under way behind the poll when the stop comes (a deploy) finishes within the
    host's grace and is acknowledged, rather than cut short after Slack took it and posted
    again by the next consumer."""
    await redis.xadd("s", {"n": "slow"})
    finished: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        await asyncio.sleep(1)
        finished.append(entry_id)

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, concurrent=True, batch_wait=0.1, block_ms=50
    )  # (reads of 50 ms: its loop sees the stop long before the entry is done)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    await asyncio.sleep(0.3)  # the poll has moved on, leaving it behind
    stop.set()
    await asyncio.wait_for(running, 5)
    assert len(finished) == 1
    assert await _pending(redis) == []


async def test_a_stop_while_a_read_waits_for_a_connection_keeps_the_acknowledgements_due(
    redis_url: str,
) -> None:
    """The acknowledgement of the entry handled last goes with the next read; stopped while
    that read waits for a connection (every one busy), it is still sent by the last flush,
    not lost (and the entry done again by another consumer)."""
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=1)
    client = Redis(connection_pool=pool)
    try:
        first = await client.xadd("s", {"n": "a"})
        handled = asyncio.Event()
        busy: list[asyncio.Task[Any]] = []

        async def handler(entry_id: str, fields: dict[str, str]) -> None:
            busy.append(asyncio.create_task(client.blpop(["nothing"], 0.5)))  # the only one
            handled.set()

        consumer = StreamConsumer(client, "s", "g", "a", handler, count=1)
        await consumer.ensure_group()
        stop = asyncio.Event()
        running = asyncio.create_task(consumer.run(stop))
        await asyncio.wait_for(handled.wait(), 5)
        await asyncio.sleep(0.1)  # its next read waits for the connection
        stop.set()
        running.cancel()  # as the host does once what is under way is done
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 5)
        await asyncio.gather(*busy)
        pending = await client.xpending_range("s", "g", "-", "+", 10)
        assert as_text(first) not in [as_text(p["message_id"]) for p in pending]
    finally:
        await client.aclose()
        await pool.disconnect()  # a pool handed to the client is not closed with it


async def _has_item(items: list[str], item: str) -> bool:
    return item in items


async def test_an_entry_handled_behind_the_poll_is_acknowledged_when_the_consumer_stops(
    redis: Redis,
) -> None:
    """An entry handled behind the poll (its message posted) whose acknowledgement is on its
    way when the host stops (the stop event, then every background task cancelled): the
    acknowledgement goes back on the list and the consumer's last flush sends it, so the
    entry is not handled again after the restart (a message posted twice)."""
    entry = await redis.xadd("s", {"n": "slow"})
    posted = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        await asyncio.sleep(0.3)  # its channel's turn
        posted.set()  # chat.postMessage answered: the message is out

    consumer = StreamConsumer(redis, "s", "g", "a", handler, concurrent=True, batch_wait=0.05)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    await asyncio.wait_for(posted.wait(), 5)
    # AgentHost.stop(): the stop event, then every background task cancelled.
    stop.set()
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert await _pending(redis) == [], "a handled entry was left pending: it will be redone"
    assert entry


async def test_a_consumer_cancelled_mid_batch_leaves_no_handler_running(redis: Redis) -> None:
    """Cancelled while its poll waits for a batch, the consumer returns only once the
    batch's handlers have ended (their clean-up included): nothing runs on after a stop."""
    await redis.xadd("s", {"n": "slow"})
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.2)  # e.g. set_aside taking its slot back
            cleaned.set()

    consumer = StreamConsumer(redis, "s", "g", "a", handler, concurrent=True, batch_wait=5)
    await consumer.ensure_group()
    running = asyncio.create_task(consumer.run(asyncio.Event()))
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    try:
        assert cleaned.is_set(), "run() returned with a handler of its batch still running"
    finally:
        await asyncio.wait_for(cleaned.wait(), 5)


@contextlib.asynccontextmanager
async def consuming(consumer: StreamConsumer) -> AsyncIterator[asyncio.Task[None]]:
    """`consumer` running (its group made), until told to stop as the host does at the end."""
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        yield running
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 5)


async def test_a_cancel_a_library_swallowed_still_stops_the_consumer(redis: Redis) -> None:
    """Python 3.11's wait_for (redis-py's, around a write with a socket timeout) can return
    a result for a task cancelled as its future completes, the cancel request left pending:
    the consumer still ends, cancelled, rather than polling on for ever."""
    consumer = StreamConsumer(redis, "s", "g", "a", _nothing)
    in_library = asyncio.Event()
    make_group = consumer.ensure_group

    async def swallowing_a_cancel() -> None:
        in_library.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        await make_group()

    consumer.ensure_group = swallowing_a_cancel  # type: ignore[method-assign]
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.wait_for(in_library.wait(), 5)
        running.cancel()
        await asyncio.wait([running], timeout=3)
        assert running.done(), "the consumer polls on after it was cancelled"
        assert running.cancelled()
    finally:
        stop.set()
        await asyncio.wait([running], timeout=3)


async def _nothing(entry_id: str, fields: dict[str, str]) -> None:
    return None


async def test_a_stopping_consumer_begins_no_more_entries_of_its_read(redis: Redis) -> None:
    """Told to stop while handling the first entry of a read, it begins none of the others:
    they stay pending for another consumer, not handled as the deploy waits."""
    for n in "abc":
        await redis.xadd("s", {"n": n})
    handled: list[str] = []
    stop = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(fields["n"])
        stop.set()

    consumer = StreamConsumer(redis, "s", "g", "a", handler, count=3)
    await consumer.ensure_group()
    await asyncio.wait_for(consumer.run(stop), 5)
    assert handled == ["a"]
    summary: Any = await redis.xpending("s", "g")
    assert summary["pending"] == 2


async def test_an_entry_finished_as_the_stop_came_is_acknowledged_not_done_again(
    redis: Redis,
) -> None:
    """The host's cancel landing in the loop turn the handler finished in (its grace
    spent): the handler's work is kept and acknowledged, not let go to be done again."""
    first = await redis.xadd("s", {"n": "a"})
    await redis.xadd("s", {"n": "b"})
    stop = asyncio.Event()
    running: asyncio.Task[None] | None = None
    handled: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(fields["n"])
        assert running is not None
        stop.set()
        asyncio.get_running_loop().call_soon(running.cancel)  # as its task ends

    consumer = StreamConsumer(redis, "s", "g", "a", handler, count=2)
    await consumer.ensure_group()
    running = asyncio.create_task(consumer.run(stop))
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert running.cancelled()  # the stop went on
    assert handled == ["a"]
    pending = await redis.xpending_range("s", "g", "-", "+", 10)
    assert as_text(first) not in [as_text(p["message_id"]) for p in pending]


async def polled_until_given_up(consumer: StreamConsumer, given_up: Callable[[], bool]) -> None:
    """`consumer` (idle_ms 100) polled, its failing entry reclaimed each time, until
    `given_up()` (or as many tries as giving up may take)."""
    await consumer.ensure_group()
    for _ in range(2 * POISON_AFTER):
        await consumer.poll(block_ms=1)
        if given_up():
            return
        await asyncio.sleep(0.15)  # idle past idle_ms: reclaimed


async def test_giving_an_entry_up_sets_its_slot_aside_while_it_waits(redis: Redis) -> None:
    """The slot an entry holds goes to its handler's task and back: giving it up (a post
    paced into its channel, the admins told) still frees the slot while it waits."""
    await redis.xadd("s", {"n": "bug"})
    slots = asyncio.Semaphore(1)
    free_while_aside: list[int] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        raise ValueError("a bug")

    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        async with set_aside():
            free_while_aside.append(slots._value)

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, idle_ms=100, give_up=give_up, in_flight=slots
    )
    await polled_until_given_up(consumer, lambda: bool(free_while_aside))
    assert free_while_aside == [1]
    assert slots._value == 1  # and taken back, then given back, once


async def test_a_handler_raising_cancelled_error_does_not_stop_the_consumer(
    redis: Redis,
) -> None:
    """A CancelledError out of a handler that nobody cancelled (a child task it awaited was
    cancelled) is a failure like any other: the entry is retried later and the consumer goes
    on, instead of the outbox stopping for good while the host runs on."""
    await redis.xadd("s", {"n": "poison"})
    handled: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "poison":
            raise asyncio.CancelledError()
        handled.append(fields["n"])

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, concurrent=True, batch_wait=0.5, idle_ms=300
    )
    async with consuming(consumer):
        await asyncio.sleep(0.3)
        await redis.xadd("s", {"n": "next"})
        await eventually(lambda: "next" in handled, within=3, what="the consumer to go on")


async def test_a_handler_raising_cancelled_error_for_ever_is_given_up_like_any_error(
    redis: Redis,
) -> None:
    """Not a stop, so not "left pending for the next process": an error of countersign's
    own, given up after POISON_AFTER attempts instead of retried for ever."""
    await redis.xadd("s", {"n": "cancels itself"})
    attempts: list[str] = []
    given_up: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        attempts.append(entry_id)
        raise asyncio.CancelledError()

    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        given_up.append(type(exc).__name__)

    consumer = StreamConsumer(redis, "s", "g", "a", handler, idle_ms=100, give_up=give_up)
    await polled_until_given_up(consumer, lambda: bool(given_up))
    assert given_up == ["CancelledByNobody"]
    assert len(attempts) == POISON_AFTER
    summary: Any = await redis.xpending("s", "g")
    assert summary["pending"] == 0


async def test_an_error_a_handler_makes_of_a_stop_is_not_counted_against_its_entry(
    redis: Redis,
) -> None:
    """Stopped (a deploy), a handler that turns the CancelledError into an error of its own
    has not failed: five deploys must not give its entry up."""
    await redis.xadd("s", {"n": "slow"})
    began = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        began.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("interrupted") from None

    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        raise AssertionError("given up for a stop")

    consumer = StreamConsumer(redis, "s", "g", "a", handler, give_up=give_up)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    await asyncio.wait_for(began.wait(), 5)
    stop.set()  # as the host stops: told, then cancelled
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert running.cancelled()  # the stop went on, not swallowed
    [(entry_id, _)] = await redis.xrange("s")
    assert await redis.exists(errors_key("s", as_text(entry_id))) == 0
    summary: Any = await redis.xpending("s", "g")
    assert summary["pending"] == 1  # left for the next process


async def a_taskgroup_whose_child_fails() -> None:
    """Raises ExceptionGroup; on Python 3.11 it can leave a cancel request on its task."""

    async def child_fails() -> None:
        raise ValueError("child")

    async with asyncio.TaskGroup() as group:
        group.create_task(child_fails())
        group.create_task(asyncio.sleep(1))


async def test_a_taskgroup_failing_in_a_handler_is_its_entrys_error_not_a_stop(
    redis: Redis,
) -> None:
    """Python 3.11's TaskGroup, when a child fails, can leave a cancel request on the task
    it runs in (the consumer's own, for the resume worker): the ExceptionGroup is the
    entry's error, counted, and the entries after it are handled as ever."""
    await redis.xadd("s", {"n": "taskgroup"})
    await redis.xadd("s", {"n": "fails"})
    await redis.xadd("s", {"n": "next"})
    handled: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "taskgroup":
            await a_taskgroup_whose_child_fails()
        if fields["n"] == "fails":
            raise RuntimeError("an ordinary bug")
        handled.append(fields["n"])

    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        raise AssertionError("not after one error")

    consumer = StreamConsumer(redis, "s", "g", "a", handler, give_up=give_up)
    async with consuming(consumer) as running:
        await eventually(lambda: "next" in handled, within=5, what="the entries after it")
        assert not running.done()
        ids = [as_text(entry_id) for entry_id, _ in await redis.xrange("s")]
        for entry_id in ids[:2]:  # each error counted against its entry
            assert await redis.get(errors_key("s", entry_id)) == b"1"


async def never_after_one(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
    raise AssertionError("given up after one error")


async def first_failed_and_it_went_on(
    redis: Redis, consumer: StreamConsumer, handled: list[str]
) -> None:
    """`consumer`, run, fails the entry of "s" already there (its error counted once) and
    handles the next one added: it did not end."""
    async with consuming(consumer) as running:
        await asyncio.sleep(0.3)
        await redis.xadd("s", {"n": "next"})
        await eventually(lambda: "next" in handled, within=3, what="the consumer to go on")
        assert not running.done()
        [first, _] = [as_text(entry_id) for entry_id, _ in await redis.xrange("s")]
        assert await redis.get(errors_key("s", first)) == b"1"


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
async def test_a_handler_that_cancels_its_own_task_fails_its_entry_not_the_consumer(
    redis: Redis, concurrent: bool
) -> None:
    """A handler cancelling its own task has failed its entry (counted, given up in the
    end), as a bug would: the consumer (the resume worker's runs handlers one at a time)
    goes on, instead of taking it for a stop and ending while the host runs."""
    await redis.xadd("s", {"n": "cancels its task"})
    handled: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "cancels its task":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)
        handled.append(fields["n"])

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, concurrent=concurrent, batch_wait=0.5,
        give_up=never_after_one,
    )  # fmt: skip
    await first_failed_and_it_went_on(redis, consumer, handled)


async def test_a_cancel_request_a_taskgroup_leaves_is_not_a_stop_when_a_cancel_follows(
    redis: Redis,
) -> None:
    """In one entry, a TaskGroup whose child failed (caught by the handler), then a
    CancelledError out of a cancelled future: the entry's error, not a stop that would end
    the resume worker's consumer."""
    await redis.xadd("s", {"n": "both"})
    handled: list[str] = []

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        if fields["n"] == "both":
            with contextlib.suppress(ExceptionGroup):
                await a_taskgroup_whose_child_fails()
            cancelled = asyncio.get_running_loop().create_future()
            cancelled.cancel()
            await cancelled
        handled.append(fields["n"])

    consumer = StreamConsumer(redis, "s", "g", "a", handler, give_up=never_after_one)
    await first_failed_and_it_went_on(redis, consumer, handled)


async def test_a_consumer_never_reclaims_an_entry_it_is_still_handling_behind(
    redis: Redis,
) -> None:
    """When the heartbeat could not keep an entry claimed for a while (a Redis blip, a
    stalled loop), the consumer's own XAUTOCLAIM returns the entry it is still handling
    behind the poll: it is not started a second time."""
    await redis.xadd("s", {"n": "slow"})
    calls: list[str] = []
    release = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        calls.append(entry_id)
        await release.wait()

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, idle_ms=300, concurrent=True, batch_wait=0.05
    )
    beats = consumer._heartbeat
    consumer._heartbeat = lambda: None  # type: ignore[method-assign]  # XCLAIMs failing
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await eventually(lambda: len(calls) == 1, within=3)
        await asyncio.sleep(2.5)  # Redis back; the run loop reclaims what is idle
        consumer._heartbeat = beats  # type: ignore[method-assign]
        assert len(calls) == 1, f"one entry started {len(calls)} times by one consumer"
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_a_backlog_into_one_slow_channel_is_not_read_into_memory_at_once(
    redis: Redis,
) -> None:
    """A backlog into one paced channel (one post a second, each post's slot set aside while
    it waits): the consumer reads ahead at most READ_AHEAD batches behind its poll, not the
    whole stream into memory (one task each, all heartbeated)."""
    pipe = redis.pipeline(transaction=False)
    for n in range(3000):
        pipe.xadd("s", {"n": str(n)})
    await pipe.execute()
    slots = asyncio.Semaphore(256)
    next_turn = [0.0]
    loop = asyncio.get_running_loop()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        now = loop.time()
        start = max(now, next_turn[0])
        next_turn[0] = start + 1.05
        async with set_aside():  # ChannelPacer.wait_turn
            await asyncio.sleep(start - now)

    consumer = _bounded(redis, handler, slots)  # (batch_wait: BATCH_WAIT ten times faster)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.sleep(2)
        held = len(consumer._held)
    finally:
        stop.set()  # then, as the host does once its grace is spent (a backlog of
        running.cancel()  # paced posts is not worked off in it), cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 20)
    bound = (READ_AHEAD + 1) * consumer.count
    assert held <= bound, f"{held} entries read ahead and held (of 3000)"


def _bounded(redis: Redis, handler: Handler, slots: asyncio.Semaphore) -> StreamConsumer:
    """A consumer like the outbox's: batches of 100 at once, `slots` in flight."""
    return StreamConsumer(
        redis, "s", "g", "a", handler, count=100, concurrent=True, batch_wait=0.05, in_flight=slots
    )


async def test_entries_set_aside_never_exceed_the_in_flight_bound(redis: Redis) -> None:
    """Slots set aside are taken again through the semaphore: no more than the bound run
    outside a set-aside wait at once, and every slot comes back."""
    pipe = redis.pipeline(transaction=False)
    for n in range(300):
        pipe.xadd("s", {"n": str(n)})
    await pipe.execute()
    slots = asyncio.Semaphore(8)
    active, most = [0], [0]

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        active[0] += 1
        most[0] = max(most[0], active[0])
        await asyncio.sleep(0.01)
        active[0] -= 1
        async with set_aside():
            await asyncio.sleep(0.05)
        active[0] += 1
        most[0] = max(most[0], active[0])
        await asyncio.sleep(0.01)
        active[0] -= 1

    consumer = _bounded(redis, handler, slots)
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await eventually(lambda: _pending_is_empty(redis), within=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert most[0] <= 8
    assert slots._value == 8


async def _pending_is_empty(redis: Redis) -> bool:
    return (await redis.xinfo_groups("s"))[0]["pending"] == 0 and (await redis.xinfo_groups("s"))[
        0
    ]["entries-read"] == 300


async def test_an_ack_left_by_a_failed_flush_goes_with_the_next_read(
    redis: Redis,
) -> None:
    """An entry finishing behind the poll while another's flush is in flight leaves its
    acknowledgement to that flush; when the flush fails, the acknowledgement stays on the
    list and goes with the run loop's next read (well within idle_ms)."""
    for n in ("a", "b"):
        await redis.xadd("s", {"n": n})
    go = asyncio.Event()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        await go.wait()
        if fields["n"] == "b":
            await asyncio.sleep(0)  # finishes while a's flush is in flight

    consumer = StreamConsumer(
        redis, "s", "g", "a", handler, idle_ms=5_000, concurrent=True, batch_wait=0.05
    )
    real_flush, failed = consumer.flush, []

    async def flaky_flush() -> None:
        if not failed:
            failed.append(1)
            consumer._handled.clear()  # what the failed round trip had taken
            await asyncio.sleep(0.05)
            raise RedisConnectionError("blip")
        await real_flush()

    consumer.flush = flaky_flush  # type: ignore[method-assign]
    await consumer.ensure_group()
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.sleep(0.2)
        go.set()
        await eventually(lambda: _pending_count_is(redis, 1), within=3)  # the failed one's
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def _pending_count_is(redis: Redis, n: int) -> bool:
    return len(await _pending(redis)) == n


async def test_a_heartbeat_leaves_an_entry_another_consumer_reclaimed_with_it(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Consumer a holds an entry and falls silent past idle_ms (a stalled loop); b
    reclaims it. When a's heartbeat beats again, the entry stays b's: taking it back would
    let a third consumer reclaim it from a silent owner again, and hand it round."""
    entry_id = as_text(await redis.xadd("s", {"n": "slow"}))
    release = asyncio.Event()
    started: list[str] = []

    async def handler(entry: str, fields: dict[str, str]) -> None:
        started.append(entry)
        await release.wait()

    a = StreamConsumer(redis, "s", "g", "a", handler, idle_ms=300, concurrent=True)
    b = StreamConsumer(redis, "s", "g", "b", handler, idle_ms=300, concurrent=True)
    a._heartbeat = lambda: None  # type: ignore[method-assign]  # silent: a stalled loop
    await a.ensure_group()
    stop = asyncio.Event()
    running = [asyncio.create_task(a.run(stop))]
    try:
        await eventually(lambda: len(started) == 1, within=3)
        running.append(asyncio.create_task(b.run(stop)))
        await eventually(lambda: len(started) == 2, within=5)  # b reclaimed it

        await a._keep_claimed([entry_id])  # a's next beat

        [pending] = await redis.xpending_range("s", "g", min="-", max="+", count=10)
        assert as_text(pending["consumer"]) == "b", pending
        assert any("reclaimed by another consumer" in r.getMessage() for r in caplog.records)
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*running), 5)


async def test_one_heartbeat_keeps_every_entry_held_however_many(redis: Redis) -> None:
    """The heartbeat's script claims its entries 500 at a time: all 1,200 held here get
    their idle time reset, each still this consumer's."""
    pipe = redis.pipeline(transaction=False)
    for n in range(1200):
        pipe.xadd("s", {"n": str(n)})
    await pipe.execute()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        raise AssertionError("not handled: only held")

    consumer = StreamConsumer(redis, "s", "g", "a", handler, idle_ms=300)
    await consumer.ensure_group()
    read = await redis.xreadgroup("g", "a", {"s": ">"}, count=1200)
    held = [as_text(entry_id) for entry_id, _ in read[0][1]]
    await asyncio.sleep(0.2)

    await consumer._keep_claimed(held)

    pending = await redis.xpending_range("s", "g", min="-", max="+", count=2000)
    assert len(pending) == 1200
    assert {as_text(p["consumer"]) for p in pending} == {"a"}
    assert max(p["time_since_delivered"] for p in pending) < 150  # reset, not 200 ms old


async def test_a_dead_consumer_s_entry_behind_many_held_by_live_ones_is_reclaimed(
    redis: Redis,
) -> None:
    """XAUTOCLAIM looks at no more than ten times its count of pending entries per call:
    with the first of them held by live consumers (each in a long tool call, its
    heartbeat keeping it fresh), the pass goes on past them to an entry a dead consumer
    left, rather than starting over at the first each time."""
    idle_ms, live_count = 600, 12
    ids = [await redis.xadd("s", {"n": str(n)}) for n in range(live_count + 1)]
    await redis.xgroup_create("s", "g", id="0")
    release = asyncio.Event()

    async def long_call(entry_id: str, fields: dict[str, str]) -> None:
        await release.wait()

    live = [
        StreamConsumer(redis, "s", "g", f"live{i}", long_call, idle_ms=idle_ms, count=1)
        for i in range(live_count)
    ]
    polls = []
    for consumer in live:  # each takes the next entry and holds it
        polls.append(asyncio.create_task(consumer.poll(block_ms=1)))
        await eventually(lambda c=consumer: len(c._held) == 1)
    await redis.xreadgroup("g", "dead", {"s": ">"}, count=1)  # taken, then its worker killed
    handled: list[str] = []

    async def rescue(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(entry_id)

    rescuer = StreamConsumer(redis, "s", "g", "rescuer", rescue, idle_ms=idle_ms, count=1)
    try:
        for _ in range(40):
            await rescuer.poll(block_ms=100)
            if handled:
                break
        assert handled == [as_text(ids[live_count])], "the dead consumer's entry was left"
        pending: Any = await redis.xpending_range("s", "g", "-", "+", 100)
        owners = {as_text(p["message_id"]): as_text(p["consumer"]) for p in pending}
        assert all(owners[as_text(i)] == f"live{n}" for n, i in enumerate(ids[:live_count]))
    finally:
        release.set()
        for task in polls:
            with contextlib.suppress(Exception):
                await task
