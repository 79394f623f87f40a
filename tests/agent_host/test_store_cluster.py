"""Invariant 10: the same store code runs on a Redis Cluster (a real 3-master cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException

from agent_host import keys as K
from agent_host.decisions import Approve
from agent_host.redis_server import RedisCluster
from agent_host.runner import Paused

from .host_helpers import make_env

CROSS_SLOT = (
    "BUG: invariant 10 broken: store.py mixes the run's `{token}` keys with the global "
    "`cs:{global}:*` indexes/streams in one atomic unit: create_run's MULTI (run hash + RUNS "
    "+ RESUME), and the PAUSE/DECIDE/FINISH Lua scripts (run keys + PENDING, DEADLINES, "
    "OUTBOX, RESUME, METRICS), so on a cluster they fail with CROSSSLOT"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(Path(tmp_path_factory.mktemp("cluster"))) as started:
        yield started


@pytest_asyncio.fixture
async def client(cluster: RedisCluster) -> AsyncIterator[AsyncRedisCluster]:
    redis = AsyncRedisCluster.from_url(cluster.url)
    try:
        yield redis
    finally:
        await redis.aclose()


async def test_cluster_is_up_and_the_ledger_works_on_it(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    run_id = K.new_run_id()
    outcome = await env.runner.run("refund-agent", "refund order 123", run_id=run_id)
    assert isinstance(outcome, Paused)  # lookup_order ran through the Redis ledger
    assert await client.hget(K.Keys(run_id).ledger, "call_0_1") is not None


@pytest.mark.xfail(strict=True, raises=RedisClusterException, reason=CROSS_SLOT)
async def test_create_run_on_a_cluster(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    run_id = await env.store.create_run("refund-agent", "refund order 123", "alice")
    assert await env.status(run_id) == "running"


@pytest.mark.xfail(strict=True, raises=RedisClusterException, reason=CROSS_SLOT)
async def test_pause_decide_and_resume_scripts_on_a_cluster(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    run_id = K.new_run_id()
    await client.hset(  # what create_run would have written, without its cross-slot MULTI
        K.Keys(run_id).run,
        mapping={"run_id": run_id, "agent": "refund-agent", "status": "running", "pause_id": ""},
    )
    outcome = await env.runner.run("refund-agent", "refund order 123", run_id=run_id)
    assert await env.store.save_outcome(outcome, "", "worker")
    (request,) = await env.requests(run_id)
    result = await env.store.decide(request.request_id, Approve(decided_by="bob"))
    assert result.outcome == "decided" and result.resume_queued
    await env.drain()
    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 1
