"""The sweeper after a crash: `serve` killed with resume entries still pending in the consumer
group, Redis restarted from its AOF, and the first trim of the restarted sweeper meeting the
restarted worker as it reclaims and acknowledges what the killed one left. Trimming works
there, and whatever goes wrong in trimming never stops expiry."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, FixedRouter
from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.sweeper import Sweeper
from agent_host.durable.worker import ResumeWorker
from agent_host.runtime.decisions import Approve
from tests.support.host_env import FakeClock, make_env
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.waiting import eventually


class RestartedWorker(Redis):
    """A real client whose first XPENDING lets `worker` (the restarted one) reclaim and
    acknowledge the killed worker's pending entries first: the interleaving a sweeper's
    first trim meets right after a restart, made to happen every time."""

    worker: ResumeWorker | None = None

    async def xpending(self, name: Any, groupname: Any) -> Any:
        if self.worker is not None:
            worker, self.worker = self.worker, None
            await worker.consumer.poll()
        return await super().xpending(name, groupname)


class ObservedSweeper(Sweeper):
    """Says when its first trim has finished, however it finished."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trimmed = asyncio.Event()

    async def trim(self) -> int:
        try:
            return await super().trim()
        finally:
            self.trimmed.set()


async def test_first_trim_after_a_restart_with_entries_pending_trims_and_logs_nothing(
    redis_server_factory: RedisServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory(appendfsync="always")
    keyring = KeyRing.parse(generate_key("k1"))
    before = Redis.from_url(server.url)
    env = make_env(before, keyring=keyring)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.pending_requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).accepted
    resume = K.Keys(run_id).shard.resume
    # the worker of the killed `serve` had read the resume entry and never acknowledged it
    taken: Any = await before.xreadgroup(K.RESUME_GROUP, "killed-w0", {resume: ">"})
    assert len(taken[0][1]) == 1
    await before.aclose()
    server.kill()
    server.start()  # the AOF is replayed; the entry is still pending in the group

    after = cast(RestartedWorker, RestartedWorker.from_url(server.url))
    try:
        restarted = make_env(after, keyring=keyring)
        after.worker = restarted.worker("restarted-w0", idle_ms=0)
        sweeper = ObservedSweeper(restarted.store, interval=0.05)
        stop = asyncio.Event()
        with caplog.at_level(logging.INFO, logger="agent_host"):
            task = asyncio.create_task(sweeper.run(stop))
            await asyncio.wait_for(sweeper.trimmed.wait(), 20)
            stop.set()
            await task

        assert not [r for r in caplog.records if r.name == "agent_host.durable.sweeper"], (
            caplog.text
        )
        assert await restarted.status(run_id) == "succeeded"
        assert env.effects.count("refund") + restarted.effects.count("refund") == 1
        assert await after.xlen(resume) == 0  # acknowledged, so trimmed
    finally:
        await after.aclose()


class BrokenTrim(Sweeper):
    async def trim(self) -> int:
        raise RuntimeError("XTRIM refused")


async def test_a_failing_trim_does_not_stop_expiry_and_is_logged_as_a_trim_failure(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    env = make_env(redis, clock=clock, router=FixedRouter())
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    await env.age(DEFAULT_EXPIRY_SECONDS + 1)

    sweeper = BrokenTrim(env.store, interval=0.05)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="agent_host.durable.sweeper"):
        task = asyncio.create_task(sweeper.run(stop))

        async def expired() -> bool:
            current = await env.store.get_request(request.request_id)
            return current is not None and current.status == "expired"

        try:
            await eventually(expired)
        finally:
            stop.set()
            await task

    messages = [r.getMessage() for r in caplog.records if r.name == "agent_host.durable.sweeper"]
    assert any("trim failed" in m and "XTRIM refused" in m for m in messages), messages
    assert not any("sweep failed" in m for m in messages), messages
