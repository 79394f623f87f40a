"""Real Redis servers for the tests (a pytest plugin, loaded from tests/conftest.py).

- ``redis_server``: one ``redis-server`` for the whole session (AOF on, in a tmp dir).
- ``redis_url``: that server's database, emptied (FLUSHDB) before the test.
- ``redis``: a ``redis.asyncio.Redis`` client on that fresh database, closed after the test.
- ``redis_server_factory``: dedicated servers (kill/restart durability tests), all stopped
  at teardown. ``redis_server_factory(appendfsync="always")`` returns a started server.
- ``cluster``: a three-master `LocalRedisCluster` per test module (bounded start, stopped at
  teardown).
- ``flushed_cluster_url``: that cluster emptied (FLUSHALL on every master) before the test,
  for tests that expect a fresh database the way ``redis_url`` gives one.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis as redis_sync
import redis.asyncio as aioredis

from agent_host.durable.redis_server import RedisServer
from tests.support.redis_cluster import START_WITHIN, LocalRedisCluster

RedisServerFactory = Callable[..., RedisServer]
CLUSTER_MASTERS = 3

__all__ = ["RedisServerFactory"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-session"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's database 0, emptied before this test."""
    with redis_sync.Redis.from_url(redis_server.url) as client:
        client.flushdb()
    return redis_server.url


@pytest_asyncio.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[RedisServerFactory]:
    servers: list[RedisServer] = []
    numbers = itertools.count()

    def start(data_dir: Path | None = None, **options: Any) -> RedisServer:
        server = RedisServer(data_dir or tmp_path / f"redis-{next(numbers)}", **options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    started = LocalRedisCluster(tmp_path_factory.mktemp("cluster"), masters=CLUSTER_MASTERS)
    started.start(timeout=START_WITHIN)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def flushed_cluster_url(cluster: LocalRedisCluster) -> str:
    """A node URL of the module's cluster, every master emptied first."""
    for url in cluster.urls:
        with redis_sync.Redis.from_url(url, socket_timeout=2) as node:
            node.flushall()
    return cluster.url
