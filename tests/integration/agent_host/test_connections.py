"""Connecting to Redis: plain URLs, Sentinel URLs, and a clear refusal of Redis Cluster."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.durable.connections import open_redis
from agent_host.durable.redis_server import (
    RedisServer,
    find_executable,
    free_port,
    share_url_of,
)
from agent_host.errors import ConfigurationError
from agent_host.settings import load_settings
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_fixtures import RedisServerFactory


async def test_a_plain_url_connects(redis_url: str, tmp_path: Path) -> None:
    client, embedded = await open_redis(
        load_settings({"REDIS_URL": redis_url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
    )
    try:
        assert embedded is None
        assert await client.ping()
    finally:
        await client.aclose()


async def test_a_connection_notices_its_host_gone_through_tcp(redis_url: str) -> None:
    """There is no socket timeout (a timer around every read costs CPU on every command):
    a Redis host that goes away is noticed by TCP's keepalive and user timeout instead."""
    client, _ = await open_redis(load_settings({"REDIS_URL": redis_url}))
    try:
        connection = await client.connection_pool.get_connection()
        try:
            sock = connection._writer.get_extra_info("socket")  # type: ignore[union-attr]
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 10_000
        finally:
            await client.connection_pool.release(connection)
    finally:
        await client.aclose()


async def test_a_unix_socket_url_connects(redis_server_factory: RedisServerFactory) -> None:
    """TCP's keepalive options are for TCP: a unix socket's connection takes none."""
    server = redis_server_factory(unix_socket=True)
    assert server.url.startswith("unix://")
    client, _ = await open_redis(load_settings({"REDIS_URL": server.url}))
    try:
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


async def test_the_embedded_server_listens_on_a_private_unix_socket_and_no_tcp_port() -> None:
    """On loopback TCP, with no password, any local user could reach the embedded Redis and
    its checkpoints, requests and decisions; its socket is in the private data dir."""
    data_dir = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))  # short: the socket fits
    client, embedded = None, None
    try:
        client, embedded = await open_redis(load_settings({"COUNTERSIGN_DATA_DIR": str(data_dir)}))
        assert embedded is not None and embedded.socket_path is not None
        assert embedded.url == f"unix://{embedded.socket_path}?db=0"
        assert embedded.socket_path.parent == data_dir / "redis"
        assert stat.S_ISSOCK(embedded.socket_path.stat().st_mode)
        assert stat.S_IMODE(embedded.socket_path.stat().st_mode) & 0o077 == 0
        assert stat.S_IMODE((data_dir / "redis").stat().st_mode) & 0o077 == 0
        assert (await client.config_get("port"))["port"] == "0"
        assert embedded.pid is not None and share_url_of(embedded.pid) == embedded.url
    finally:
        if client is not None:
            await client.aclose()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(data_dir)


async def test_a_malformed_sentinel_url_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="REDIS_URL"):
        await open_redis(load_settings({"REDIS_URL": "redis+sentinel://"}))


@contextlib.contextmanager
def sentinel_for(master: RedisServer, password: str, tmp_path: Path) -> Iterator[int]:
    """A Sentinel watching `master` (as `mymaster`), on the port it yields."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {tmp_path}\n"
        f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n"
        f"sentinel auth-pass mymaster {password}\n"
    )
    child = subprocess.Popen(
        [find_executable(), str(conf), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield port
    finally:
        child.kill()
        child.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def test_a_sentinel_url_with_a_password_reaches_the_master_and_never_shows_it(
    tmp_path: Path,
) -> None:
    """The password is the master's (the Sentinel URL's user info); it appears in no
    error, however the URL is mistaken."""
    secret = "TOPSECRET-pw"
    with RedisServer(tmp_path / "master") as master, sentinel_for(master, secret, tmp_path) as port:
        plain = Redis.from_url(master.url)
        await plain.config_set("requirepass", secret)  # from now on, only with the password
        await plain.aclose()
        url = f"redis+sentinel://:{secret}@127.0.0.1:{port}/mymaster"
        client, _ = await open_redis(load_settings({"REDIS_URL": url}))
        try:
            assert await client.ping()
        finally:
            await client.aclose()
    for wrong in (
        f"redis+sentinel://:{secret}@127.0.0.1:notaport/mymaster",
        f"redis+sentinel://:{secret}@127.0.0.1:26379",
        f"http://user:{secret}@127.0.0.1:6379/0",
    ):
        with pytest.raises(ConfigurationError, match="REDIS_URL") as refused:
            await open_redis(load_settings({"REDIS_URL": wrong}))
        assert secret not in str(refused.value) and "***" in str(refused.value)


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


async def test_a_redis_that_answers_and_refuses_for_good_stops_the_start_saying_what_to_fix(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """A wrong password, a database Redis does not have, or something other than Redis on
    the port: no retry changes them, so the start ends saying so (it used to start and
    retry for ever, logging many lines a second and never "fix REDIS_URL")."""
    locked, plain = redis_server_factory(), redis_server_factory()
    async with Redis.from_url(locked.url) as redis:
        await redis.config_set("requirepass", "right-one")  # from now on, only with it

    async def not_redis(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    other = await asyncio.start_server(not_redis, "127.0.0.1", 0)
    other_port = other.sockets[0].getsockname()[1]
    cases = {
        f"redis://:wrong-one@127.0.0.1:{locked.port}/0": "refused the credentials",
        f"{plain.url.rsplit('/', 1)[0]}/99": "has no such database",
        f"redis://127.0.0.1:{other_port}/0": "does not speak Redis's protocol",
    }
    try:
        for url, said in cases.items():
            settings = load_settings({"REDIS_URL": url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
            with pytest.raises(ConfigurationError) as refused:
                await open_redis(settings)
            assert said in str(refused.value) and str(refused.value).endswith("fix REDIS_URL")
            assert "wrong-one" not in str(refused.value)
    finally:
        other.close()
        await other.wait_closed()

    right = f"redis://:right-one@127.0.0.1:{locked.port}/0"
    client, _ = await open_redis(load_settings({"REDIS_URL": right}))
    assert await client.ping()
    await client.config_set("requirepass", "")  # as it was, for the server's own stop
    await client.aclose()
