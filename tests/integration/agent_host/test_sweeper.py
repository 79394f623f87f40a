"""The expiry sweeper: deadlines from a sorted set, decided through the same compare-and-set."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, FixedRouter
from agent_host.durable import keys as K
from agent_host.durable.sweeper import EXPIRED_BY, Sweeper
from agent_host.runtime.decisions import DEFAULT_EXPIRED_MESSAGE, Approve
from tests.support.host_env import Env, FakeClock, make_env, resume_entries
from tests.support.keyspace import metric, zcard_all
from tests.support.routers import QuorumRouter


async def test_nothing_expires_before_its_deadline(redis: Redis) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock, router=FixedRouter())
    run_id = await env.start("refund-agent", "refund order 123")
    await env.age(DEFAULT_EXPIRY_SECONDS - 5)
    assert await Sweeper(env.store).sweep() == 0
    (request,) = await env.requests(run_id)
    assert request.status == "pending" and await zcard_all(redis, "deadlines") == 1


async def test_two_sweepers_expire_once_and_the_run_resumes_rejected(redis: Redis) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock, router=FixedRouter())
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    # The deadline is set by Redis's clock, the creation time by the pausing process's.
    assert abs(request.expires_at - request.created_at - DEFAULT_EXPIRY_SECONDS) < 2
    await env.age(DEFAULT_EXPIRY_SECONDS + 1)

    one, two = Sweeper(env.store), Sweeper(env.store)
    counts = await asyncio.gather(one.sweep(), two.sweep(), one.sweep(), two.sweep())
    assert sum(counts) == 1

    expired = await env.store.get_request(request.request_id)
    assert expired is not None
    assert expired.status == "expired" and expired.decided_by == EXPIRED_BY
    assert await zcard_all(redis, "deadlines") == 0 and await zcard_all(redis, "pending") == 0
    assert len(await resume_entries(redis, run_id)) == 1
    assert int(await metric(redis, "decisions_expired")) == 1

    late = await env.store.decide(request.request_id, Approve(decided_by="bob"))
    assert late.outcome == "already_decided"
    assert late.request is not None and late.request.decided_by == EXPIRED_BY

    await env.drain()
    info = await env.info(run_id)
    assert info.status == "succeeded"
    assert "not approved" in info.output and "expired" in info.output
    assert env.effects.count("refund") == 0
    refund = (await env.final_state(run_id)).call(request.call_id)
    assert refund is not None
    assert refund.outcome == "expired" and refund.result == DEFAULT_EXPIRED_MESSAGE


async def test_click_racing_the_sweeper_gives_one_terminal_outcome(redis: Redis) -> None:
    env = make_env(redis, clock=FakeClock())
    sweeper = Sweeper(env.store)
    runs, winners = [], {"click": 0, "sweeper": 0}
    for n in range(8):
        run_id = await env.start("refund-agent", "refund order 123")
        runs.append(run_id)
        (request,) = await env.requests(run_id)
        # Every other request is just past its deadline (by Redis's clock): the sweeper
        # must win it and the click be refused (past its deadline, or expired already:
        # whichever compare-and-set runs first); the others the click must win.
        due = n % 2 == 0
        await env.age(DEFAULT_EXPIRY_SECONDS + (0.01 if due else -30))
        swept, click = await asyncio.gather(
            sweeper.sweep(), env.store.decide(request.request_id, Approve(decided_by="bob"))
        )
        final = await env.store.get_request(request.request_id)
        assert final is not None and final.status == ("expired" if due else "approved")
        assert (click.outcome == "decided") + swept == 1  # exactly one of them decided
        refused = ("past_deadline", "already_decided")
        assert click.outcome in (refused if due else ("decided",)), click.outcome
        assert len(await resume_entries(redis, run_id)) == 1
        winners["click" if swept == 0 else "sweeper"] += 1

    await env.drain()
    assert env.effects.count("refund") == winners["click"] == 4
    for run_id in runs:
        assert await env.status(run_id) == "succeeded"
    assert await zcard_all(redis, "deadlines") == 0 and await zcard_all(redis, "pending") == 0


async def test_a_click_after_the_deadline_is_refused_even_before_the_sweep(
    redis: Redis,
) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    await env.age(DEFAULT_EXPIRY_SECONDS + 1)
    late = await env.store.decide(request.request_id, Approve(decided_by="bob"))
    assert late.outcome == "past_deadline"
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.status == "pending"  # the sweeper's to expire
    assert await Sweeper(env.store).sweep() == 1
    await env.drain()
    assert env.effects.count("refund") == 0


async def test_many_sweepers_share_the_work_without_double_expiry(redis: Redis) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock)
    run_id = await env.start("cleanup-agent", " ".join(f"/tmp/f{n}" for n in range(12)))
    assert len(await env.requests(run_id)) == 12
    await env.age(DEFAULT_EXPIRY_SECONDS + 1)
    sweepers = [Sweeper(env.store, batch=5) for _ in range(4)]
    total = 0
    for _ in range(4):
        total += sum(await asyncio.gather(*(s.sweep() for s in sweepers)))
    assert total == 12
    assert len(await resume_entries(redis, run_id)) == 1
    await env.drain()
    assert env.effects.count("delete_file") == 0
    assert await env.status(run_id) == "succeeded"


async def test_quorum_in_progress_still_expires(redis: Redis) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock, router=QuorumRouter(2, expiry_seconds=60))
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="a"))).outcome == (
        "progress"
    )
    await env.age(61)
    assert await Sweeper(env.store).sweep() == 1
    after = await env.store.decide(request.request_id, Approve(decided_by="b"))
    assert after.outcome == "already_decided"
    await env.drain()
    assert env.effects.count("refund") == 0


async def test_deadline_of_a_vanished_request_is_dropped(redis: Redis) -> None:
    env = make_env(redis)
    ghost = "req_0123456789abcdef_1"
    await redis.zadd(K.Keys(ghost).shard.deadlines, {ghost: 1})
    assert await Sweeper(env.store).sweep() == 0
    assert await zcard_all(redis, "deadlines") == 0


async def due_requests_in_every_shard(env: Env) -> list[str]:
    """Pending requests, at least one in each shard, all past their deadline."""
    started: list[str] = []
    while len({K.Keys(r).shard for r in started}) < K.SHARDS:
        (request,) = await env.requests(await env.start("refund-agent", "refund order 123"))
        started.append(request.request_id)
    await env.age(DEFAULT_EXPIRY_SECONDS + 1)
    return started


@pytest.mark.parametrize("damage", ["a field another version wrote", "a key of another type"])
async def test_an_entry_that_cannot_be_expired_holds_up_no_other(redis: Redis, damage: str) -> None:
    """Entries naming no request of their shard (junk, another shard's request) and a
    request that cannot be read sit before every other deadline: the others still expire,
    in every shard, on the first sweep. The junk is dropped; the unreadable request keeps
    its deadline, tried again later."""
    env = make_env(redis, clock=FakeClock(), router=FixedRouter())
    unreadable, *due = await due_requests_in_every_shard(env)
    home = K.Keys(unreadable).shard
    ghosts = (f"req_{n:08x}aaaaaaaaaaaa_0001" for n in range(1, 100))
    elsewhere = next(g for g in ghosts if K.Keys(g).shard != home)  # a request of another
    await redis.zadd(home.deadlines, {"junk": 1, elsewhere: 1, unreadable: 1})
    key = K.Keys(unreadable).request(unreadable)
    if damage == "a key of another type":
        await redis.delete(key)
        await redis.set(key, "not a hash")
    else:
        await redis.hset(key, "route", '{"unknown": 1}')

    assert await Sweeper(env.store).sweep() == len(due)
    for request_id in due:
        expired = await env.store.get_request(request_id)
        assert expired is not None and expired.status == "expired"
    left = {m: score for m, score in await redis.zrange(home.deadlines, 0, -1, withscores=True)}
    assert list(left) == [unreadable.encode()]  # kept, and no longer due at once
    seconds, _ = await redis.time()
    assert left[unreadable.encode()] > seconds * 1000
    assert await Sweeper(env.store).sweep() == 0


async def test_sweeper_run_loop_expires_and_stops(redis: Redis) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock, router=FixedRouter(expiry_seconds=10))
    run_id = await env.start("refund-agent", "refund order 123")
    await env.age(11)
    stop = asyncio.Event()
    task = asyncio.create_task(Sweeper(env.store, interval=0.01).run(stop))
    for _ in range(200):
        (request,) = await env.requests(run_id)
        if request.status == "expired":
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert request.status == "expired"


async def test_an_error_of_its_own_in_a_round_is_logged_with_its_traceback_and_it_goes_on(
    redis: Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis away is one warning line a round; a bug would fail every round the same way,
    so it is an error, with where it happened, and the ladder still climbs meanwhile."""
    env = make_env(redis, clock=FakeClock(), router=FixedRouter())
    sweeper = Sweeper(env.store, interval=0.01)
    rounds: list[str] = []

    async def broken() -> int:
        rounds.append("sweep")
        raise KeyError("deadline_ms")

    climbed_twice = asyncio.Event()

    async def climbed() -> int:
        rounds.append("climb")
        if rounds.count("climb") >= 2:
            climbed_twice.set()
        return 0

    monkeypatch.setattr(sweeper, "sweep", broken)
    monkeypatch.setattr(sweeper.ladder, "climb", climbed)
    stop = asyncio.Event()
    with caplog.at_level("WARNING", logger="agent_host.durable.sweeper"):
        task = asyncio.create_task(sweeper.run(stop))
        await asyncio.wait_for(climbed_twice.wait(), 5)
        stop.set()
        await asyncio.wait_for(task, 2)

    [first] = [r for r in caplog.records if "sweep (" in r.getMessage()]  # once a minute
    assert first.levelname == "ERROR" and first.exc_info is not None
    assert "requests past their deadline are not expired" in first.getMessage()
    assert isinstance(first.exc_info[1], KeyError)
