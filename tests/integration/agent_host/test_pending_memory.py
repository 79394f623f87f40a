"""What one pending approval costs in Redis (`bench/memory.py`): the embedded
Redis's settings keep a pending request's hashes in listpacks and its run's audit stream in
a small node, and an operator's own Redis still on Redis's defaults is told so once at
start, while one that refuses CONFIG is left alone."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.connections import open_redis
from agent_host.durable.memory_advice import REDIS_DEFAULTS
from agent_host.settings import load_settings
from tests.support.host_env import make_env
from tests.support.redis_fixtures import RedisServerFactory

ON_REDIS_DEFAULTS = [arg for name, value in REDIS_DEFAULTS.items() for arg in (f"--{name}", value)]
NEW_STREAM_NODE_BYTES = 4096  # what Redis 7.0 allocates for a stream's first node by default


async def test_a_pending_request_is_stored_compactly_and_reads_back(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    k = K.Keys(run_id)

    # sealed values (a few hundred bytes) no longer turn the hashes into hashtables
    assert await redis.object("encoding", k.request(request.request_id)) == b"listpack"
    assert await redis.object("encoding", k.run) == b"listpack"
    # the run's own audit stream: a small node, not the 4 KB Redis allocates by default
    audit_bytes = await redis.memory_usage(k.audit)
    assert audit_bytes is not None and audit_bytes < NEW_STREAM_NODE_BYTES / 3
    assert [a["event"] for a in await env.store.audit(run_id)] == ["started", "paused"]
    assert request.tool == "issue_refund" and request.arguments["order_id"] == "123"


async def test_an_audit_spanning_many_stream_nodes_reads_whole_and_in_order(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    k = K.Keys(run_id)
    for n in range(60):  # far more than one 256-byte node holds
        await redis.xadd(k.audit, {"at": f"{n}", "actor": "U0TEST", "event": f"note-{n}"})
    events = [a["event"] for a in await env.store.audit(run_id)]
    assert events == ["started", "paused", *(f"note-{n}" for n in range(60))]


async def test_own_redis_on_redis_defaults_gets_one_line_of_advice(
    redis_server_factory: RedisServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory(extra_args=ON_REDIS_DEFAULTS)
    caplog.set_level(logging.INFO, logger="agent_host.durable.connections")
    settings = load_settings({"REDIS_URL": server.url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
    client, _ = await open_redis(settings)
    await client.aclose()
    (advice,) = [r.getMessage() for r in caplog.records if "redis.conf" in r.getMessage()]
    assert "hash-max-listpack-value 1024" in advice and "stream-node-max-bytes 256" in advice


async def test_no_advice_for_a_tuned_redis_nor_one_that_refuses_config(
    redis_url: str,
    redis_server_factory: RedisServerFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_config = redis_server_factory(
        extra_args=[*ON_REDIS_DEFAULTS, "--rename-command", "CONFIG", ""]
    )
    caplog.set_level(logging.INFO, logger="agent_host.durable.connections")
    for url in (redis_url, no_config.url):
        settings = load_settings({"REDIS_URL": url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
        client, _ = await open_redis(settings)
        assert await client.ping()
        await client.aclose()
    assert not [r for r in caplog.records if "redis.conf" in r.getMessage()]


async def test_own_redis_that_drops_keys_when_full_is_warned_of_at_start(
    redis_url: str,
    redis_server_factory: RedisServerFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    limit = ["--maxmemory", "1gb"]
    evicting = redis_server_factory(extra_args=[*limit, "--maxmemory-policy", "allkeys-lru"])
    no_limit = redis_server_factory(extra_args=["--maxmemory-policy", "allkeys-lru"])
    only_expiring = redis_server_factory(extra_args=[*limit, "--maxmemory-policy", "volatile-lru"])
    no_config = redis_server_factory(
        extra_args=[*limit, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""]
    )
    caplog.set_level(logging.WARNING, logger="agent_host.durable.connections")
    for url in (evicting.url, redis_url, no_limit.url, only_expiring.url, no_config.url):
        settings = load_settings({"REDIS_URL": url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
        client, _ = await open_redis(settings)
        assert await client.ping()  # a warning, not a refusal: the operator decides
        await client.aclose()

    # Said for those that drop keys when full (any key, or those with an expiry: the replay
    # guard's among them); not for Redis's default, one with no limit, nor where it cannot be
    # read.
    any_key, expiring = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert (any_key.levelname, expiring.levelname) == ("WARNING", "WARNING")
    assert any_key.getMessage().startswith(
        "Redis's maxmemory-policy is allkeys-lru under a maxmemory of 1073741824 bytes: when "
        "its memory is full it drops any key"
    )
    assert expiring.getMessage().startswith(
        "Redis's maxmemory-policy is volatile-lru under a maxmemory of 1073741824 bytes: when "
        "its memory is full it drops keys with an expiry, the replay guard's among them"
    )
