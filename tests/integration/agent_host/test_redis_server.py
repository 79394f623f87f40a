"""The Python-owned redis-server: AOF durability across SIGKILL, clean stop, a 3-master cluster."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.durable.redis_server import RedisServer, socket_path_for
from agent_host.errors import ConfigurationError, StoreError
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_fixtures import RedisServerFactory


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_killed_server_replays_aof_on_restart(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(appendfsync="always")
    client = aioredis.Redis.from_url(server.url)
    await client.set("run:1", "paused")
    await client.aclose()
    pid, url = server.pid, server.url
    assert pid is not None

    server.kill()  # SIGKILL: no shutdown, only what the AOF already holds survives
    assert not process_exists(pid) and not server.running
    server.restart()
    assert server.url == url and server.pid != pid

    client = aioredis.Redis.from_url(server.url)
    assert await client.get("run:1") == b"paused"
    await client.aclose()


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        pid, port = server.pid, server.port
        assert pid is not None and process_exists(pid) and port_open(port)
    assert not process_exists(pid) and not port_open(port)
    assert server.pid is None
    server.stop()  # idempotent
    assert (tmp_path / "redis" / "appendonlydir").is_dir()


async def test_unix_socket_server(redis_server_factory: RedisServerFactory) -> None:
    server = redis_server_factory(unix_socket=True)
    assert server.url.startswith("unix://")
    client = aioredis.Redis.from_url(server.url)
    assert await client.ping()
    await client.aclose()


def _long_data_dir(tmp_path: Path) -> Path:
    """A data dir whose socket path would not fit a socket's 108 bytes."""
    data_dir = tmp_path / ("d" * 120) / "redis"
    assert len(str(data_dir / "redis.sock")) > 108
    return data_dir


async def test_a_socket_too_long_for_its_data_dir_is_in_a_private_dir_of_its_own(
    tmp_path: Path,
) -> None:
    data_dir = _long_data_dir(tmp_path)
    with RedisServer(data_dir, unix_socket=True) as server:
        assert server.socket_path is not None and server.socket_path.parent != data_dir
        assert server.socket_path == socket_path_for(data_dir)  # the same every start
        mode = server.socket_path.parent.stat().st_mode
        assert mode & 0o077 == 0, oct(mode)
        client = aioredis.Redis.from_url(server.url)
        assert await client.ping()
        await client.aclose()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_socket_dir_someone_else_made_first_is_refused(tmp_path: Path) -> None:
    """In the temp dir anyone may make the socket's directory before countersign does, and
    swap the socket for their own: a directory that is not this user's is refused."""
    data_dir = _long_data_dir(tmp_path)
    taken = socket_path_for(data_dir).parent
    taken.mkdir(mode=0o700)
    try:
        os.chown(taken, 65534, 65534)  # nobody's
        server = RedisServer(data_dir, unix_socket=True)
        with pytest.raises(StoreError, match=r"belongs to another user \(uid 65534\)"):
            server.start()
        assert not server.running
        assert list(taken.iterdir()) == []  # nothing was put in it
    finally:
        taken.rmdir()


def test_missing_redis_server_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"apt-get install redis-server.*REDIS_URL"):
        RedisServer(tmp_path / "redis").start()


def test_failed_start_quotes_the_log(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", extra_args=("--no-such-directive", "1"))
    with pytest.raises(StoreError, match=r"(?s)did not start.*Bad directive"):
        server.start()
    assert not server.running


async def test_session_fixtures_give_a_fresh_database(
    redis: aioredis.Redis, redis_url: str, redis_server: RedisServer
) -> None:
    assert redis_url == redis_server.url
    assert await redis.dbsize() == 0
    await redis.set("left-over", "1")  # the next test using `redis` must not see it


async def test_fresh_database_again(redis: aioredis.Redis) -> None:
    assert await redis.get("left-over") is None


@pytest.mark.timeout(15)
async def test_three_master_cluster(tmp_path: Path) -> None:
    with LocalRedisCluster(tmp_path / "cluster", masters=3) as cluster:
        client = AsyncRedisCluster.from_url(cluster.url)
        try:
            keys = [f"key-{i}" for i in range(30)]
            for key in keys:
                await client.set(key, key)
            assert [await client.get(key) for key in keys] == [k.encode() for k in keys]
            slots = {client.keyslot(key) for key in keys}
            owners = {node.name for key in keys if (node := client.get_node_from_key(key))}
            assert len(slots) > 1 and len(owners) == 3
        finally:
            await client.aclose()
        nodes = list(cluster.nodes)
    assert all(not node.running for node in nodes)
