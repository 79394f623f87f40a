"""Long polls (`GET /api/v1/approvals/{id}?wait=S`) against a real Redis: however many wait,
they hold no Redis connection each, so the rest of the process keeps its connections; each
wakes on its own request's decision, made by any client, and on nothing else."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from agent_host.approvals.external import ExternalRequestSpec
from agent_host.durable.decision_watch import TICK, DecisionWatch
from agent_host.durable.external_store import LONG_POLL_READS, ExternalRequests
from agent_host.runtime.decisions import Approve, Reject
from tests.support.host_env import Env, make_env
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.waiting import eventually

# Far fewer connections than waiters: one connection per waiter could not serve them.
CONNECTIONS = LONG_POLL_READS + 8
WAITERS = 400


@pytest.fixture
async def small_pool(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, max_connections=CONNECTIONS)
    try:
        yield client
    finally:
        await client.aclose()


async def _request(env: Env, external: ExternalRequests, order: int) -> str:
    spec = ExternalRequestSpec(agent="billing", tool="refund", arguments={"order": order})
    return (await external.create(spec)).request_id


async def _watched(redis: Redis) -> tuple[Env, str, DecisionWatch]:
    """A fresh request, and a watch of its own."""
    env = make_env(redis)
    return env, await _request(env, ExternalRequests(env.store), 1), DecisionWatch(redis)


async def _waiting(watch: DecisionWatch, request_id: str, count: int) -> None:
    await eventually(lambda: watch.waiting(request_id) >= count or None)


async def test_hundreds_of_long_polls_leave_the_pool_free_and_all_wake_on_the_decision(
    small_pool: Redis,
) -> None:
    env = make_env(small_pool)
    external = ExternalRequests(env.store)
    request_id = await _request(env, external, 1)
    # All at once: their first reads, and their reads once woken, take turns.
    polls = [asyncio.create_task(external.wait(request_id, 30)) for _ in range(WAITERS)]
    await _waiting(external.watch, request_id, WAITERS)
    # Everyone else still gets connections while they wait: a read, and the decision.
    other = await _request(env, external, 2)
    assert (await env.store.get_request(other)) is not None
    result = await env.store.decide(request_id, Approve(decided_by="U-REVIEWER"))
    assert result.outcome == "decided"
    woke = await asyncio.wait_for(asyncio.gather(*polls), 5)
    assert all(r is not None and r.status == "approved" for r in woke)
    assert {r.decided_by for r in woke if r is not None} == {"U-REVIEWER"}
    assert external.watch.waiting(request_id) == 0


async def test_a_long_poll_wakes_for_its_own_request_only(redis: Redis) -> None:
    env = make_env(redis)
    external = ExternalRequests(env.store)
    decided, undecided = await _request(env, external, 1), await _request(env, external, 2)
    first = asyncio.create_task(external.wait(decided, 10))
    started = time.monotonic()
    second = asyncio.create_task(external.wait(undecided, 1.0))
    await _waiting(external.watch, decided, 1)
    await _waiting(external.watch, undecided, 1)
    await env.store.decide(decided, Reject(decided_by="U-REVIEWER", message="no"))
    got = await asyncio.wait_for(first, 5)
    assert got is not None and got.status == "rejected"
    still = await second
    assert still is not None and still.status == "pending"
    assert time.monotonic() - started >= 1.0  # it waited its whole time: nothing woke it


async def test_a_decision_made_as_the_poll_begins_is_not_missed(redis: Redis) -> None:
    """Decided between the poll's first read and its first look: the look still sees it."""
    env, request_id, watch = await _watched(redis)
    waiting = asyncio.create_task(watch.until_decided(request_id, 10))
    await env.store.decide(request_id, Approve(decided_by="U-REVIEWER"))
    started = time.monotonic()
    assert await asyncio.wait_for(waiting, 5) is True
    assert time.monotonic() - started < 10 * TICK


async def test_a_poll_of_a_request_that_is_gone_ends_at_once(redis: Redis) -> None:
    _, request_id, watch = await _watched(redis)
    waiting = asyncio.create_task(watch.until_decided(request_id, 10))
    await redis.flushdb()
    assert await asyncio.wait_for(waiting, 5) is True


async def test_the_watch_stops_when_nobody_waits(redis: Redis) -> None:
    _, request_id, watch = await _watched(redis)
    assert await watch.until_decided(request_id, 2 * TICK) is False
    assert watch.waiting(request_id) == 0
    task = watch._loop_task
    assert task is not None
    await asyncio.wait_for(task, 2 * TICK + 1)  # ends by itself within a tick


async def test_redis_going_away_is_logged_once_and_the_poll_still_ends_on_time(
    redis_server_factory: RedisServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    client = Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    try:
        env = make_env(client)
        external = ExternalRequests(env.store)
        request_id = await _request(env, external, 1)
        server.stop()
        caplog.set_level(logging.WARNING, logger="agent_host.durable.decision_watch")
        started = time.monotonic()
        assert await external.watch.until_decided(request_id, 8 * TICK) is False
        assert time.monotonic() - started < 8 * TICK + 2
        failures = [r for r in caplog.records if "watching long polls failed" in r.getMessage()]
        assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    finally:
        await client.aclose()


async def test_a_look_that_fails_for_any_reason_does_not_end_the_watch(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter already waiting when a look fails is still woken by a later look."""
    env, request_id, watch = await _watched(redis)
    looks = 0
    real_statuses = watch._statuses

    async def flaky(ids: list[str]) -> list[object]:
        nonlocal looks
        looks += 1
        if looks <= 2:
            return []  # a reply of the wrong length: zip(strict=True) raises
        return await real_statuses(ids)

    monkeypatch.setattr(watch, "_statuses", flaky)
    waiting = asyncio.create_task(watch.until_decided(request_id, 10))
    await eventually(lambda: looks > 2 or None)
    await env.store.decide(request_id, Approve(decided_by="U-REVIEWER"))
    assert await asyncio.wait_for(waiting, 5) is True
