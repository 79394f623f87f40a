"""Real Redis servers for the tests (a pytest plugin, loaded from tests/conftest.py).

- ``redis_server``: one ``redis-server`` for the whole session (AOF on, in a tmp dir).
- ``redis_url``: that server's database, emptied (FLUSHDB) before the test.
- ``redis``: a ``redis.asyncio.Redis`` client on that fresh database, closed after the test.
- ``redis_server_factory``: dedicated servers (kill/restart durability tests), all stopped
  at teardown. ``redis_server_factory(appendfsync="always")`` returns a started server.
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

RedisServerFactory = Callable[..., RedisServer]

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
