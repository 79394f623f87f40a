"""The escalation ladder in Redis: PAUSE and CREATE_EXTERNAL schedule a request's reminder
and escalation by Redis's clock, DECIDE takes them out, and sweepers claim each step once,
however many race and however often they restart, writing its audit and outbox entries."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.approvals.external import ExternalRequestSpec
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.external_store import ExternalRequests
from agent_host.durable.ladder import ESCALATED, LADDER_ACTOR, REMINDED
from agent_host.durable.sweeper import Sweeper
from agent_host.runtime.decisions import Approve
from tests.support.host_env import Env, make_env
from tests.support.keyspace import xrange_all, zrange_all
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.routers import StaticRouter

LADDER = Route(
    route_id="r1",
    destination="C-APPROVALS",
    reviewers=("U-REVIEWER", "S-REVIEWERS"),
    expiry_seconds=3600,
    remind_after_seconds=60,
    escalate_after_seconds=120,
    escalate_to="C-OPS",
)


async def _request_id(env: Env) -> str:
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.pending_requests(run_id)
    return request.request_id


async def _due_now(redis: Redis) -> None:
    """Make every step due by Redis's clock (which cannot be moved): move them back."""
    seconds, _ = await redis.time()
    for shard in K.shards():
        for member, _score in await redis.zrange(shard.ladder, 0, -1, withscores=True):
            await redis.zadd(shard.ladder, {member: (int(seconds) - 1) * 1000})


async def _steps(redis: Redis, request_id: str) -> tuple[list[str], list[str]]:
    """The request's ladder events in its run's audit, and its ladder outbox entries."""
    audit: Any = await redis.xrange(K.Keys(request_id).audit)
    events = [
        as_text(f[b"event"])
        for _, f in audit
        if f.get(b"request_id") == request_id.encode()
        and as_text(f[b"event"]) in ("reminded", "escalated")
    ]
    outbox = [
        as_text(f[b"type"])
        for _, f in await xrange_all(redis, "outbox")
        if f.get(b"request_id") == request_id.encode()
        and as_text(f[b"type"]) in (REMINDED, ESCALATED)
    ]
    return events, outbox


async def test_a_pause_schedules_the_routes_steps_by_redis_clock_and_a_decision_removes_them(
    redis: Redis,
) -> None:
    env = make_env(redis, router=StaticRouter(LADDER))
    rid = await _request_id(env)
    request = await env.store.get_request(rid)
    assert request is not None
    ladder = await zrange_all(redis, "ladder")
    assert set(ladder) == {f"remind|{rid}", f"escalate|{rid}"}
    # Both counted from the deadline's own moment (Redis TIME in PAUSE), not the worker's.
    deadline_ms = request.expires_at * 1000
    assert abs(ladder[f"remind|{rid}"] - (deadline_ms - (3600 - 60) * 1000)) < 5
    assert abs(ladder[f"escalate|{rid}"] - (deadline_ms - (3600 - 120) * 1000)) < 5

    assert (await env.store.decide(rid, Approve(decided_by="bob"))).outcome == "decided"
    assert await zrange_all(redis, "ladder") == {}


async def test_no_ladder_without_a_route_that_asks_for_one(redis: Redis) -> None:
    env = make_env(redis, router=StaticRouter(Route(destination="C-APPROVALS")))
    await _request_id(env)
    assert await zrange_all(redis, "ladder") == {}
    reminder_only = Route(destination="C-APPROVALS", remind_after_seconds=30)
    env = make_env(redis, router=StaticRouter(reminder_only))
    rid = await _request_id(env)
    assert set(await zrange_all(redis, "ladder")) == {f"remind|{rid}"}


async def test_a_request_from_elsewhere_gets_the_ladder_but_no_step_past_its_deadline(
    redis: Redis,
) -> None:
    late = Route(
        destination="C-APPROVALS",
        expiry_seconds=86400,
        remind_after_seconds=1800,
        escalate_after_seconds=4 * 3600,
        escalate_to="C-OPS",
    )
    env = make_env(redis, router=StaticRouter(late))
    external = ExternalRequests(env.store)
    spec = ExternalRequestSpec(agent="billing", tool="refund", arguments={"order": 1})
    full = await external.create(spec)
    short = await external.create(
        ExternalRequestSpec(
            agent="billing", tool="refund", arguments={"order": 2}, expires_in_hours=1
        )
    )
    ladder = await zrange_all(redis, "ladder")
    # An hour's request: its reminder (30 min) fits, its escalation (4 h) would come too late.
    assert set(ladder) == {
        f"remind|{full.request_id}",
        f"escalate|{full.request_id}",
        f"remind|{short.request_id}",
    }


async def test_two_sweepers_racing_claim_each_step_exactly_once_with_its_audit(
    redis: Redis,
) -> None:
    env = make_env(redis, router=StaticRouter(LADDER))
    rid = await _request_id(env)
    await _due_now(redis)

    one, two = Sweeper(env.store), Sweeper(env.store)
    # Both have read the same due steps; both try to claim each of them.
    shard = K.Keys(rid).shard
    due = [as_text(m) for m in await redis.zrange(shard.ladder, 0, -1)]
    assert sorted(due) == [f"escalate|{rid}", f"remind|{rid}"]
    tries = [s.ladder.claim(shard, member) for member in due for s in (one, two, two, one)]
    claims = await asyncio.gather(*tries)
    assert sorted(claims) == ["claimed"] * 2 + ["taken"] * 6
    # and whole passes of both, racing, find nothing more
    assert await asyncio.gather(one.ladder.climb(), two.ladder.climb()) == [0, 0]

    events, outbox = await _steps(redis, rid)
    assert sorted(events) == ["escalated", "reminded"]
    assert sorted(outbox) == [ESCALATED, REMINDED]
    audit: Any = await redis.xrange(K.Keys(rid).audit)
    details = {
        as_text(f[b"event"]): (as_text(f[b"actor"]), as_text(f[b"detail"]))
        for _, f in audit
        if as_text(f[b"event"]) in ("reminded", "escalated")
    }
    assert details == {
        "reminded": (LADDER_ACTOR, "U-REVIEWER,S-REVIEWERS"),
        "escalated": (LADDER_ACTOR, "C-OPS"),
    }
    assert await zrange_all(redis, "ladder") == {}
    # The request still waits: a step is a nudge, never a decision.
    current = await env.store.get_request(rid)
    assert current is not None and current.status == "pending"


async def test_a_step_not_due_yet_is_left_for_later(redis: Redis) -> None:
    env = make_env(redis, router=StaticRouter(LADDER))
    rid = await _request_id(env)
    assert await Sweeper(env.store).ladder.climb() == 0
    assert set(await zrange_all(redis, "ladder")) == {f"remind|{rid}", f"escalate|{rid}"}
    assert await _steps(redis, rid) == ([], [])


async def test_a_restarted_sweeper_and_a_restarted_redis_repeat_no_step(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(appendfsync="always")
    keyring = KeyRing.parse(generate_key("k1"))
    before = Redis.from_url(server.url)
    env = make_env(before, router=StaticRouter(LADDER), keyring=keyring)
    rid = await _request_id(env)
    await _due_now(before)
    assert await Sweeper(env.store).ladder.climb() == 2
    await before.aclose()
    server.kill()
    server.start()  # the AOF is replayed: the claims with it

    after = Redis.from_url(server.url)
    try:
        restarted = make_env(after, router=StaticRouter(LADDER), keyring=keyring)
        sweeper = Sweeper(restarted.store)
        assert [await sweeper.ladder.climb() for _ in range(3)] == [0, 0, 0]
        events, outbox = await _steps(after, rid)
        assert sorted(events) == ["escalated", "reminded"]
        assert sorted(outbox) == [ESCALATED, REMINDED]
    finally:
        await after.aclose()


async def test_a_decided_request_gets_no_step_even_from_a_sweeper_that_saw_it_due(
    redis: Redis,
) -> None:
    env = make_env(redis, router=StaticRouter(LADDER))
    rid = await _request_id(env)
    await _due_now(redis)
    shard = K.Keys(rid).shard
    seen_due = [as_text(m) for m in await redis.zrange(shard.ladder, 0, -1)]
    assert (await env.store.decide(rid, Approve(decided_by="bob"))).outcome == "decided"
    # A sweeper that read the steps as due just before the decision claims nothing after it.
    sweeper = Sweeper(env.store)
    for member in seen_due:
        await redis.zadd(shard.ladder, {member: 0})  # as if DECIDE had not removed them
        assert await sweeper.ladder.claim(shard, member) == "decided"
    assert await _steps(redis, rid) == ([], [])
    assert await zrange_all(redis, "ladder") == {}


async def test_a_request_past_its_deadline_gets_no_step_before_the_sweeper_expires_it(
    redis: Redis,
) -> None:
    """After an outage, more requests are past their deadline than one sweep expires: their
    steps come due too, yet none is paged for (its buttons could only say it expired)."""
    env = make_env(redis, router=StaticRouter(LADDER))
    rid = await _request_id(env)
    await env.age(3700)  # its deadline passed; the sweeper has not expired it yet
    await _due_now(redis)

    assert await Sweeper(env.store).ladder.climb() == 0

    assert await _steps(redis, rid) == ([], [])
    assert await zrange_all(redis, "ladder") == {}  # dropped, not retried
    request = await env.store.get_request(rid)
    assert request is not None and request.status == "pending"  # the sweeper's to expire


async def test_a_malformed_ladder_entry_is_dropped_and_claims_nothing(redis: Redis) -> None:
    env = make_env(redis, router=StaticRouter(LADDER))
    shard = K.shards()[0]
    for member in ("bogus", "remind|not-a-request", "shout|req_00000000_0001"):
        await redis.zadd(shard.ladder, {member: 0})
    assert await Sweeper(env.store).ladder.climb() == 0
    assert await redis.zcard(shard.ladder) == 0
