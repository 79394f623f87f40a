"""Invariant 10: the same store code runs on a Redis Cluster (a real 3-master cluster),
key rotation (sealed fields, audit streams rewritten in one script) included."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.runtime.decisions import Approve, Reject
from agent_host.runtime.runner import Paused
from tests.support.host_env import make_env
from tests.support.redis_cluster import LocalRedisCluster


@pytest_asyncio.fixture
async def client(cluster: LocalRedisCluster) -> AsyncIterator[AsyncRedisCluster]:
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


async def test_create_run_on_a_cluster(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    run_id = await env.store.create_run("refund-agent", "refund order 123", "alice")
    assert await env.status(run_id) == "running"


async def test_pause_decide_and_resume_scripts_on_a_cluster(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    run_id = await env.store.create_run("refund-agent", "refund order 123", "alice")
    outcome = await env.runner.run("refund-agent", "refund order 123", run_id=run_id)
    assert await env.store.save_outcome(outcome, "", "worker")
    (request,) = await env.requests(run_id)
    result = await env.store.decide(request.request_id, Approve(decided_by="bob"))
    assert result.outcome == "decided" and result.resume_queued
    await env.drain()
    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 1


async def test_runs_spread_over_shards_and_list_as_one(client: AsyncRedisCluster) -> None:
    env = make_env(client)  # type: ignore[arg-type]
    runs = [await env.start("refund-agent", "refund order 123") for _ in range(12)]
    assert len({K.Keys(r).shard for r in runs}) > 1
    page = await env.store.list_pending(limit=5)
    listed = [r.request_id for r in page.requests]
    while page.next_cursor:
        page = await env.store.list_pending(cursor=page.next_cursor, limit=5)
        listed += [r.request_id for r in page.requests]
    # earlier tests on this cluster may have left requests pending: all are listed once
    assert len(listed) == len(set(listed)) == await env.store.pending_count()
    assert {K.request_id(r, 1) for r in runs} <= set(listed)


async def test_keys_rotate_re_seals_fields_and_rewrites_audit_streams_on_a_cluster(
    flushed_cluster_url: str,
) -> None:
    async with AsyncRedisCluster.from_url(flushed_cluster_url) as client:
        await _rotate_on(client)


async def _rotate_on(client: AsyncRedisCluster) -> None:
    old = generate_key("kOld")
    env = make_env(client, keyring=KeyRing.parse(old))  # type: ignore[arg-type]
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx")
    [request] = await env.pending_requests(run_id)
    assert (
        await env.store.decide(request.request_id, Reject(decided_by="bob", message="no"))
    ).accepted
    await env.drain()
    new = generate_key("kNew")
    ring = KeyRing.parse(f"{new},{old}")

    report = await rotate_checkpoints(client, ring)  # type: ignore[arg-type]

    assert report.damaged == {} and report.rotated == 1  # its checkpoint
    assert report.fields >= 4  # input, output, arguments, reason, ...
    assert "run BGREWRITEAOF on every primary" in report.aof
    fresh = make_env(client, keyring=KeyRing.parse(new))  # type: ignore[arg-type]
    details = [e.get("detail", "") for e in await fresh.store.audit(run_id)]
    assert any('"message":"no"' in d for d in details), details
    assert not any("unreadable" in d for d in details)
    assert (await fresh.info(run_id)).input == "remove /srv/a.docx"
