"""An entry that kills the process handling it is told apart from those that were merely
in flight beside it (real Redis, the real consumer): a reclaimed entry whose last delivery
reached no verdict is a suspect, handled alone, and only one that dies alone POISON_AFTER
times is given up. Starting a count afresh never takes an entry from another consumer."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.metrics import MetricsPage
from agent_host.durable.poison import (
    POISON_AFTER,
    SUSPECT_AFTER,
    NeverFinished,
    abandoned_key,
    attempts_key,
    errors_key,
)
from agent_host.durable.slots import set_aside
from agent_host.durable.streams import StreamConsumer
from agent_host.durable.suspects import SuspectGate
from agent_host.errors import RetryLater
from tests.support.host_env import killed_while_polling, make_host
from tests.support.waiting import eventually


def consumer(redis: Redis, name: str, handler: Any, given_up: list[tuple[str, str]]) -> Any:
    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        given_up.append((fields["kind"], type(exc).__name__))

    return StreamConsumer(
        redis, "s", "g", name, handler, idle_ms=100, count=100, concurrent=True, give_up=give_up
    )


async def test_an_entry_in_flight_beside_one_that_kills_the_process_goes_on(
    redis: Redis,
) -> None:
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    await redis.xadd("s", {"kind": "kills"})
    await redis.xadd("s", {"kind": "healthy"})
    given_up: list[tuple[str, str]] = []
    for n in range(SUSPECT_AFTER + POISON_AFTER):
        taken = asyncio.Event()

        async def dying(
            entry_id: str, fields: dict[str, str], taken: asyncio.Event = taken
        ) -> None:
            if fields["kind"] == "kills":
                taken.set()  # and the process dies, with whatever else it handles
            await asyncio.Event().wait()

        await killed_while_polling(consumer(redis, f"killed-{n}", dying, given_up), taken)
        await asyncio.sleep(0.15)  # idle past idle_ms: the next process reclaims both
    handled: list[str] = []

    async def fine(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(fields["kind"])

    survivor = consumer(redis, "survivor", fine, given_up)

    async def settled() -> bool:
        await survivor.poll(block_ms=1)
        summary: Any = await redis.xpending("s", "g")
        return summary["pending"] == 0

    await eventually(settled, within=10)
    assert given_up == [("kills", NeverFinished.__name__)]
    assert handled == ["healthy"]


async def test_a_count_started_afresh_never_takes_the_entry_from_another_consumer(
    redis: Redis,
) -> None:
    """A handled the entry and stalled (its heartbeat silent); B reclaimed it and is
    handling it; A's handler then ends in "not now". A's fresh start of the entry's count
    must leave it with B, or a third consumer would handle it beside B."""
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    await redis.xadd("s", {"kind": "post"})
    given_up: list[tuple[str, str]] = []
    a_took, a_fails, b_took = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def a_handler(entry_id: str, fields: dict[str, str]) -> None:
        a_took.set()
        await a_fails.wait()
        raise RetryLater("Slack unreachable")

    async def b_handler(entry_id: str, fields: dict[str, str]) -> None:
        b_took.set()
        await asyncio.Event().wait()

    a = consumer(redis, "A", a_handler, given_up)
    a._beat_every = 3600  # its loop stalled: no heartbeat keeps the entry claimed
    b = consumer(redis, "B", b_handler, given_up)
    a_poll = asyncio.create_task(a.poll(block_ms=1))
    await asyncio.wait_for(a_took.wait(), 5)
    await asyncio.sleep(0.15)  # idle past idle_ms
    b_poll = asyncio.create_task(b.poll(block_ms=1))
    await asyncio.wait_for(b_took.wait(), 5)
    a_fails.set()
    await a_poll
    try:
        pending: Any = await redis.xpending_range("s", "g", "-", "+", 10)
        assert [as_name(p["consumer"]) for p in pending] == ["B"]
    finally:
        b_poll.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await b_poll


def as_name(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_an_entry_whose_giving_up_kills_the_process_too_is_abandoned_with_a_copy_kept(
    redis_url: str, redis: Redis, tmp_path: Path
) -> None:
    """Giving an entry up may meet what killed the process (the worker reads the run's
    state to fail it): past twice POISON_AFTER deaths alone it is abandoned rather than
    killing every process for ever; not in silence: a copy is kept beside its stream and
    /metrics counts it."""
    stream = K.Shard(3).resume
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    entry_id = as_name(await redis.xadd(stream, {"run_id": "run_x", "kind": "decided"}))
    deaths = 0
    while True:
        taken = asyncio.Event()

        async def dying(
            entry_id: str, fields: dict[str, str], taken: asyncio.Event = taken
        ) -> None:
            taken.set()
            await asyncio.Event().wait()

        async def dying_too(
            entry_id: str, fields: dict[str, str], exc: Exception, taken: asyncio.Event = taken
        ) -> None:
            taken.set()
            await asyncio.Event().wait()

        c = StreamConsumer(
            redis, stream, "g", f"killed-{deaths}", dying, idle_ms=100, give_up=dying_too
        )
        try:
            await killed_while_polling(c, taken)
        except TimeoutError:
            break  # neither handled nor given up: abandoned
        deaths += 1
        assert deaths <= SUSPECT_AFTER + 2 * POISON_AFTER, "taken again and again"
        await asyncio.sleep(0.15)
    summary: Any = await redis.xpending(stream, "g")
    assert summary["pending"] == 0
    assert deaths == SUSPECT_AFTER + 2 * POISON_AFTER  # then alone: handled, given up
    [(_, copy)] = await redis.xrange(abandoned_key(stream))
    assert {as_name(k): as_name(v) for k, v in copy.items()} == {
        "entry_id": entry_id,
        "deaths": str(2 * POISON_AFTER),
        "fields": json.dumps({"run_id": "run_x", "kind": "decided"}),
    }
    host, _ = make_host(Redis.from_url(redis_url), tmp_path)
    try:
        metrics = await MetricsPage(host).render()
    finally:
        await host.stop()
    assert 'countersign_entries_abandoned_total{stream="resume"} 1' in metrics
    assert 'countersign_entries_abandoned_total{stream="outbox"} 0' in metrics
    assert await redis.hgetall(attempts_key(stream)) == {}


async def test_an_entry_whose_errors_alternate_with_deaths_is_given_up(redis: Redis) -> None:
    """A state that sometimes raises (MemoryError caught) and sometimes gets its process
    killed never reaches two deliveries in a row without a verdict, so it is never a
    suspect; its errors, each in a new process, are counted in Redis and it is given up
    after POISON_AFTER of them, with nothing left counted behind it."""
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    await redis.xadd("s", {"kind": "sometimes raises, sometimes kills"})
    given_up: list[tuple[str, str]] = []
    for n in range(2 * POISON_AFTER):
        taken = asyncio.Event()

        async def raises_or_dies(
            entry_id: str, fields: dict[str, str], n: int = n, taken: asyncio.Event = taken
        ) -> None:
            if n % 2 == 0:
                raise MemoryError("state too large")
            taken.set()
            await asyncio.Event().wait()

        process = consumer(redis, f"process-{n}", raises_or_dies, given_up)
        if n % 2 == 0:
            await process.poll(block_ms=1)
        else:
            await killed_while_polling(process, taken)
        if given_up:
            break
        await asyncio.sleep(0.15)  # idle past idle_ms: the next process reclaims it
    assert given_up == [("sometimes raises, sometimes kills", "MemoryError")]
    assert n == 2 * (POISON_AFTER - 1)  # its fifth error
    summary: Any = await redis.xpending("s", "g")
    assert summary["pending"] == 0
    assert await redis.keys("s:*") == []  # nothing counted left behind


async def test_the_errors_counted_of_an_entry_go_when_it_succeeds(redis: Redis) -> None:
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    entry_id = as_name(await redis.xadd("s", {"kind": "fails twice"}))
    attempts = 0

    async def fails_twice(entry_id: str, fields: dict[str, str]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            raise ValueError("not yet")

    given_up: list[tuple[str, str]] = []
    process = consumer(redis, "process", fails_twice, given_up)
    for failed in (1, 2):
        await process.poll(block_ms=1)
        counted = await redis.get(errors_key("s", entry_id))
        assert (attempts, counted) == (failed, str(failed).encode())
        await asyncio.sleep(0.15)  # idle past idle_ms: reclaimed
    await process.poll(block_ms=1)
    await process.flush()
    assert attempts == 3
    assert await redis.exists(errors_key("s", entry_id)) == 0
    assert given_up == []
    assert process._retried == set()


async def test_an_error_met_after_another_consumer_took_the_entry_over_is_not_counted(
    redis: Redis,
) -> None:
    """A stalled (its heartbeat silent), B reclaimed the entry and acknowledged it; A's
    handler then fails. The entry is B's, and done: A counts nothing for it, and gives
    nothing up, whatever its count would have been."""
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    entry_id = as_name(await redis.xadd("s", {"kind": "post"}))
    await redis.set(errors_key("s", entry_id), POISON_AFTER - 1)  # one error from given up
    a_took, a_fails = asyncio.Event(), asyncio.Event()

    async def a_handler(entry_id: str, fields: dict[str, str]) -> None:
        a_took.set()
        await a_fails.wait()
        raise ValueError("stale")

    async def b_handler(entry_id: str, fields: dict[str, str]) -> None:
        return None

    given_up: list[tuple[str, str]] = []
    a = consumer(redis, "A", a_handler, given_up)
    a._beat_every = 3600  # its loop stalled: no heartbeat keeps the entry claimed
    a_poll = asyncio.create_task(a.poll(block_ms=1))
    await asyncio.wait_for(a_took.wait(), 5)
    await asyncio.sleep(0.15)  # idle past idle_ms
    b = consumer(redis, "B", b_handler, given_up)
    assert await b.poll(block_ms=1) == 1
    a_fails.set()
    await a_poll
    assert given_up == []
    assert await redis.exists(errors_key("s", entry_id)) == 0  # B's acknowledgement dropped it
    assert a._retried == set()


async def test_an_abandoned_entry_whose_copy_cannot_be_written_stays_a_suspect(
    redis: Redis,
) -> None:
    """The copy goes before the acknowledgement: refused (here, the copies' key is not a
    stream), the entry stays pending and a suspect, its deaths kept; once the copy can be
    written, it is abandoned with it."""
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    entry_id = as_name(await redis.xadd("s", {"kind": "kills"}))
    await redis.xreadgroup("g", "dead", {"s": ">"}, count=1)
    for _ in range(SUSPECT_AFTER):
        await redis.xclaim("s", "g", "dead", 0, [entry_id])  # died on again and again
    await redis.hset(attempts_key("s"), entry_id, 2 * POISON_AFTER)  # its give-ups died too
    await redis.set(abandoned_key("s"), "in the way")
    await asyncio.sleep(0.15)  # idle past idle_ms

    async def unreachable(entry_id: str, fields: dict[str, str]) -> None:
        raise AssertionError("an entry past its give-ups is not handled again")

    given_up: list[tuple[str, str]] = []
    survivor = consumer(redis, "survivor", unreachable, given_up)
    await survivor.poll(block_ms=1)
    summary: Any = await redis.xpending("s", "g")
    assert summary["pending"] == 1
    assert await redis.hget(attempts_key("s"), entry_id) == str(2 * POISON_AFTER).encode()
    await redis.delete(abandoned_key("s"))
    for _ in range(SUSPECT_AFTER + 1):  # delivered again until a suspect once more
        await redis.xclaim("s", "g", "dead", 0, [entry_id])
    await asyncio.sleep(0.15)
    survivor._reclaimed_at = None  # a reclaim is due now
    await survivor.poll(block_ms=1)
    summary = await redis.xpending("s", "g")
    assert summary["pending"] == 0
    assert len(await redis.xrange(abandoned_key("s"))) == 1
    assert given_up == []


async def suspects_of_a_dead_process(redis: Redis, count: int) -> list[str]:
    """`count` entries a process read and died on SUSPECT_AFTER times in a row: suspects
    for the next consumer to reclaim them."""
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    ids = [as_name(await redis.xadd("s", {"kind": f"post {n}"})) for n in range(count)]
    await redis.xreadgroup("g", "dead", {"s": ">"}, count=count)
    for _ in range(SUSPECT_AFTER - 1):
        await redis.xclaim("s", "g", "dead", 0, ids)  # reclaimed, and died on again
    await asyncio.sleep(0.15)  # idle past idle_ms
    return ids


async def test_suspects_outnumbering_the_slots_and_setting_theirs_aside_all_finish(
    redis: Redis,
) -> None:
    """Posts waiting for their channel's turn set their slot aside (so others can post);
    a suspect waiting for its turn to be alone must never hold one, nor wait for one held
    by an entry queued behind it."""
    await suspects_of_a_dead_process(redis, 3)
    given_up: list[tuple[str, str]] = []

    async def paced(entry_id: str, fields: dict[str, str]) -> None:
        async with set_aside():  # as SlackNotifier does while it waits for the channel
            await asyncio.sleep(0.05)

    c = StreamConsumer(
        redis, "s", "g", "survivor", paced, idle_ms=100, count=100, concurrent=True,
        in_flight=asyncio.Semaphore(2), give_up=give_up_into(given_up), gate=SuspectGate(),
    )  # fmt: skip

    async def settled() -> bool:
        await c.poll(block_ms=1)
        summary: Any = await redis.xpending("s", "g")
        return summary["pending"] == 0

    await eventually(settled, within=10)
    assert given_up == []


async def test_a_killer_whose_giving_up_fails_for_now_stays_a_suspect(redis: Redis) -> None:
    """Telling the administrators may meet Slack's "not now", however many times: the entry
    is given up again on its next reclaim, its deaths still counted (and those failures
    not counted as deaths), never handled again as a fresh one, never let go untold."""
    [entry_id] = await suspects_of_a_dead_process(redis, 1)
    await redis.hset("s:attempts", entry_id, POISON_AFTER)  # it died alone that often
    handled: list[str] = []
    tries: list[str] = []
    not_now = POISON_AFTER + 2  # more than the deaths left before it would be let go

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        handled.append(entry_id)

    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        tries.append(type(exc).__name__)
        if len(tries) <= not_now:
            raise RetryLater("Slack unreachable")

    c = StreamConsumer(redis, "s", "g", "survivor", handler, idle_ms=100, give_up=give_up)

    async def settled() -> bool:
        await c.poll(block_ms=1)
        summary: Any = await redis.xpending("s", "g")
        return summary["pending"] == 0

    await eventually(settled, within=15)
    assert tries == [NeverFinished.__name__] * (not_now + 1)  # told in the end
    assert handled == []
    assert await redis.hget("s:attempts", entry_id) is None  # dropped with the acknowledgement


def give_up_into(given_up: list[tuple[str, str]]) -> Any:
    async def give_up(entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        given_up.append((fields["kind"], type(exc).__name__))

    return give_up


async def test_every_consumer_of_a_host_waits_at_the_one_gate_of_its_process(
    redis_url: str, tmp_path: Path
) -> None:
    """Alone means alone in the process: resumes, posts and callbacks share one gate, so a
    suspect of one kind never runs beside an entry of another."""
    host, _ = make_host(Redis.from_url(redis_url), tmp_path)  # it closes its client
    host.start_background(1, sweeper=False)
    try:
        consumers = [c for sharded in host._consuming.values() for c in sharded.consumers]
        kinds = {c.stream.rsplit(":", 1)[-1] for c in consumers}
        assert {"resume", "outbox", "callbacks"} <= kinds, kinds
        assert {id(c.gate) for c in consumers} == {id(host.suspect_gate)}
    finally:
        await host.stop()
