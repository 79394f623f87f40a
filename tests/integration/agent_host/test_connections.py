"""Connecting to Redis: plain URLs, Sentinel URLs, and a clear refusal of Redis Cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.durable.connections import open_redis
from agent_host.errors import ConfigurationError
from agent_host.settings import load_settings
from tests.support.redis_cluster import LocalRedisCluster


async def test_a_plain_url_connects(redis_url: str, tmp_path: Path) -> None:
    client, embedded = await open_redis(
        load_settings({"REDIS_URL": redis_url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
    )
    try:
        assert embedded is None
        assert await client.ping()
    finally:
        await client.aclose()


async def test_unset_url_starts_an_embedded_server_with_aof(tmp_path: Path) -> None:
    client, embedded = await open_redis(load_settings({"COUNTERSIGN_DATA_DIR": str(tmp_path)}))
    try:
        assert embedded is not None
        assert (await client.config_get("appendonly"))["appendonly"] == "yes"
        assert embedded.data_dir == tmp_path / "redis"
    finally:
        await client.aclose()
        if embedded is not None:
            embedded.stop()


async def test_a_malformed_sentinel_url_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="REDIS_URL"):
        await open_redis(load_settings({"REDIS_URL": "redis+sentinel://"}))


async def test_a_cluster_node_url_gives_a_cluster_client(tmp_path: Path) -> None:
    with LocalRedisCluster(tmp_path / "cluster", masters=3) as cluster:
        client, embedded = await open_redis(load_settings({"REDIS_URL": cluster.url}))
        try:
            assert embedded is None
            assert isinstance(client, AsyncRedisCluster)
            for n in range(20):  # keys all over the slots
                await client.set(f"k{n}", n)
            assert [int(await client.get(f"k{n}")) for n in range(20)] == list(range(20))
        finally:
            await client.aclose()
