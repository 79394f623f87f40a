"""The Python-owned redis-server: AOF durability across SIGKILL, clean stop, a 3-master cluster."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.durable.redis_server import (
    RedisServer,
    running_in,
    share_url_of,
    socket_path_usable,
)
from agent_host.errors import ConfigurationError, StoreError
from tests.support.paths import PROJECT_ROOT
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_fixtures import RedisServerFactory

# The refusal of a data dir held by a process no pid file names, after the wait for it.
HELD_BY_NOBODY_NAMED = r"still held by another process.*no pid file names it.*fuser -v"


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
    assert not socket_path_usable(data_dir / "redis.sock")
    return data_dir


async def test_a_socket_too_long_for_its_data_dir_gets_a_new_private_dir_in_the_temp_dir(
    tmp_path: Path,
) -> None:
    """Made at once under a name nobody could take first; a restart keeps the URL, a stop
    leaves nothing behind."""
    server = RedisServer(_long_data_dir(tmp_path), unix_socket=True).start()
    try:
        assert server.socket_path is not None
        place = server.socket_path.parent
        assert place.parent == Path(tempfile.gettempdir()) and place.name.startswith("csredis-")
        assert stat.S_IMODE(place.stat().st_mode) == 0o700 and place.stat().st_uid == os.geteuid()
        with pytest.raises(StoreError, match="listens on a unix socket, not a port"):
            server.port  # noqa: B018
        url, kept = server.url, place.stat().st_ino
        server.restart()  # (its directory kept: remade, its name could be taken meanwhile)
        assert server.url == url and server.pid == share_pid(url)
        assert place.stat().st_ino == kept
    finally:
        server.stop()
    assert not place.exists()


def test_a_socket_s_length_is_counted_in_bytes() -> None:
    path = Path("/" + "é" * 60, "redis.sock")
    assert len(str(path)) <= 100 and not socket_path_usable(path)


def test_a_data_dir_whose_path_is_not_utf8_gets_its_socket_in_the_temp_dir() -> None:
    """A URL's path is read as UTF-8: a socket in such a data dir could not be reached."""
    place = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    data_dir = Path(os.fsdecode(os.fsencode(place) + b"/d\xff/redis"))
    try:
        with RedisServer(data_dir, unix_socket=True) as server:
            assert server.socket_path is not None and server.socket_path.parent != data_dir
            assert server.pid is not None and share_url_of(server.pid) == server.url
            assert share_pid(server.url) == server.pid
    finally:
        shutil.rmtree(place)


def test_a_socket_dir_is_not_left_behind_by_a_start_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left behind, the next start would take it for one someone else made."""
    before = set(Path(tempfile.gettempdir()).glob("csredis-*"))
    server = RedisServer(_long_data_dir(tmp_path), unix_socket=True, extra_args=("--bad", "1"))
    for _ in range(2):  # and again, the same way
        with pytest.raises(StoreError, match="did not start"):
            server.start()
        assert set(Path(tempfile.gettempdir()).glob("csredis-*")) == before
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server to be found
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="apt-get install redis-server"):
            server.start()
        assert set(Path(tempfile.gettempdir()).glob("csredis-*")) == before


async def test_a_server_is_ready_once_its_aof_is_loaded(tmp_path: Path) -> None:
    """INFO answers while Redis loads its AOF (PING and every command of the store refuse):
    a server answering only INFO is not ready yet."""
    server = RedisServer(tmp_path / "redis", unix_socket=True).start()
    try:
        client = redis.Redis.from_url(server.url)
        with client.pipeline(transaction=False) as pipe:
            for i in range(20_000):
                pipe.set(f"k{i}", "v")
            pipe.execute()
        client.close()
        server.stop()
        slow_load = ("--key-load-delay", "50", "--loading-process-events-interval-bytes", "1024")
        server.extra_args = slow_load
        server.start()
        client = redis.Redis.from_url(server.url)
        assert client.get("k19999") == b"v"  # not BusyLoadingError
        client.close()
    finally:
        server.stop()


def test_a_socket_dir_taken_while_the_server_was_stopped_is_refused(tmp_path: Path) -> None:
    """Its name was in the server's process title for anyone to see: whoever made it (here
    a symlink to a directory of their choosing) could swap the socket for their own."""
    server = RedisServer(_long_data_dir(tmp_path), unix_socket=True).start()
    assert server.socket_path is not None
    place = server.socket_path.parent
    server.stop()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    place.symlink_to(theirs)
    try:
        with pytest.raises(ConfigurationError, match="was made by something else"):
            server.start()
        assert not server.running and list(theirs.iterdir()) == []
    finally:
        server.stop()
        place.unlink()


@contextlib.contextmanager
def _short_data_dir() -> Iterator[Path]:
    """A data dir whose socket fits in it, whatever the length of pytest's temp paths."""
    place = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    try:
        yield place / "redis"
    finally:
        shutil.rmtree(place)


def test_a_second_server_on_a_data_dir_in_use_is_refused_and_the_first_keeps_it() -> None:
    """Redis removes whatever is at its socket's path before it listens: a second server
    on the same data dir would share the first's AOF and leave it, and its clients,
    unreachable."""
    with _short_data_dir() as data_dir, RedisServer(data_dir, unix_socket=True) as first:
        second = RedisServer(data_dir, unix_socket=True)
        with pytest.raises(ConfigurationError, match=r"in use by another process.*share it"):
            second.start()
        assert not second.running
        assert share_pid(first.url) == first.pid


def test_of_two_servers_started_at_the_same_moment_on_one_data_dir_one_runs() -> None:
    with _short_data_dir() as data_dir:
        servers = [RedisServer(data_dir, unix_socket=True) for _ in range(2)]
        ready = threading.Barrier(2)

        def start(server: RedisServer) -> Exception | None:
            ready.wait()
            try:
                server.start()
            except Exception as exc:
                return exc
            return None

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            errors = list(pool.map(start, servers))
        try:
            running = [server for server in servers if server.running]
            assert len(running) == 1, errors
            refused = [error for error in errors if error is not None]
            # (the lock's answer; the pid file's, had the first written it by then)
            assert len(refused) == 1
            assert re.search("held by another process|in use by another", str(refused[0]))
            assert share_pid(running[0].url) == running[0].pid
        finally:
            for server in servers:
                server.stop()


@pytest.mark.parametrize("long_path", [False, True], ids=["in-data-dir", "in-temp-dir"])
def test_a_server_whose_child_died_starts_again_on_its_data_dir(
    tmp_path: Path, long_path: bool
) -> None:
    """The data dir it holds is its own to start on again, not another server's."""
    with contextlib.ExitStack() as stack:
        data_dir = _long_data_dir(tmp_path) if long_path else stack.enter_context(_short_data_dir())
        server = stack.enter_context(RedisServer(data_dir, unix_socket=True))
        url, pid = server.url, server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # crashed, and nobody stopped it
        until_not(lambda: server.running)
        server.start()
        assert server.url == url and share_pid(url) == server.pid != pid


@pytest.mark.parametrize("long_path", [False, True], ids=["in-data-dir", "in-temp-dir"])
def test_a_restart_keeps_the_data_dir_held_and_its_socket_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, long_path: bool
) -> None:
    """Let go between the stop and the start, the data dir could be taken by another
    server, and the socket's directory, remade, by anyone who read its name."""
    seen: list[tuple[str, bool]] = []
    start = RedisServer.start

    def start_after_another_tried(server: RedisServer, timeout: float = 10.0) -> RedisServer:
        if server is ours and not seen:
            assert server.socket_path is not None
            other = RedisServer(server.data_dir, unix_socket=True)
            try:
                start(other, 0.5)
            except ConfigurationError as refused:
                seen.append((str(refused), server.socket_path.parent.is_dir()))
            finally:
                other.stop()
        return start(server, timeout)

    with contextlib.ExitStack() as stack:
        data_dir = _long_data_dir(tmp_path) if long_path else stack.enter_context(_short_data_dir())
        ours = stack.enter_context(RedisServer(data_dir, unix_socket=True))
        monkeypatch.setattr(RedisServer, "start", start_after_another_tried)
        ours.restart()
        assert len(seen) == 1, "another server started on the data dir during the restart"
        refusal, socket_dir_kept = seen[0]
        assert "still held by another process" in refusal and socket_dir_kept
        assert share_pid(ours.url) == ours.pid


def test_a_lock_file_removed_while_held_is_not_trusted(tmp_path: Path) -> None:
    """Removed (by hand, by a clean-up) and made again by another process that locked it:
    the lock on the old file no longer keeps that one out."""
    with _short_data_dir() as data_dir, RedisServer(data_dir, unix_socket=True) as server:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        until_not(lambda: server.running)
        (data_dir / "redis-server.lock").unlink()
        theirs = os.open(data_dir / "redis-server.lock", os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(theirs, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(ConfigurationError, match=HELD_BY_NOBODY_NAMED):
                server.start(timeout=0.5)
            assert not server.running
        finally:
            os.close(theirs)


def test_an_interrupted_start_leaves_no_server_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped while it waits for its child (Ctrl-C, a test's timeout): the child is ended
    before the data dir is let go, or two servers would run on one AOF."""
    children: list[int] = []

    def interrupted(server: RedisServer, timeout: float, log_offset: int) -> str | None:
        assert server._proc is not None
        children.append(server._proc.pid)
        raise KeyboardInterrupt

    with _short_data_dir() as data_dir:
        server = RedisServer(data_dir, unix_socket=True)
        with monkeypatch.context() as patch:
            patch.setattr(RedisServer, "_wait_ready", interrupted)
            with pytest.raises(KeyboardInterrupt):
                server.start()
        assert not server.running and not process_exists(children[0])
        with RedisServer(data_dir, unix_socket=True) as next_one:  # the data dir is free
            assert share_pid(next_one.url) == next_one.pid


def until_not(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while condition():
        assert time.monotonic() < deadline, "still true"
        time.sleep(0.01)


def test_a_server_left_running_by_a_process_that_died_is_not_taken_over() -> None:
    """Its process gone, the data dir is no longer held; the server it left still runs."""
    with _short_data_dir() as data_dir, RedisServer(data_dir, unix_socket=True) as left:
        left._data_dir_lock.let_go()  # its lock gone, as with its process's death
        second = RedisServer(data_dir, unix_socket=True)
        with pytest.raises(ConfigurationError, match=r"in use by another process.*share it"):
            second.start()
        assert not second.running and share_pid(left.url) == left.pid


def test_a_server_left_before_its_pid_file_was_written_still_holds_its_data_dir() -> None:
    """The pid file says "in use" only once Redis has written it; the data dir's lock, which
    the server's child holds too, says it from the start, whoever started it."""
    with _short_data_dir() as data_dir:
        with subprocess.Popen(
            [sys.executable, "-c", _START_AND_WAIT, str(data_dir)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        ) as starter:
            assert starter.stdout is not None
            left_pid = int(starter.stdout.readline())
            starter.kill()  # the process that started it, killed outright
        try:
            (data_dir / "redis-server.pid").unlink()  # as if killed before it was written
            second = RedisServer(data_dir, unix_socket=True)
            with pytest.raises(ConfigurationError, match=HELD_BY_NOBODY_NAMED):
                second.start(timeout=0.5)
            assert not second.running and process_exists(left_pid)
        finally:
            os.kill(left_pid, signal.SIGKILL)


def test_a_start_waits_for_a_killed_server_s_aof_rewrite_to_let_go_of_the_data_dir() -> None:
    """Redis forks its AOF rewrite, which inherits the data dir's lock and outlives a
    server killed outright (until it first reports to its parent: here, after its first
    key, 2 s after it began): a start after it waits for it to end, not refused."""
    with _short_data_dir() as data_dir:
        server = RedisServer(data_dir, unix_socket=True).start()
        try:
            client = redis.Redis.from_url(server.url, socket_timeout=5)
            client.mset({f"k{i}": i for i in range(20)})
            client.config_set("rdb-key-save-delay", 2_000_000)  # two seconds a key
            client.bgrewriteaof()
            until_not(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
            client.close()
            server.kill()
            theirs = os.open(data_dir / "redis-server.lock", os.O_RDONLY)
            try:  # (held by the rewrite, its server gone)
                with pytest.raises(BlockingIOError):
                    fcntl.flock(theirs, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(theirs)
            server.start()
            assert server.running and share_pid(server.url) == server.pid
        finally:
            server.stop()


# Starts a server on the data dir given and waits, holding it, until killed.
_START_AND_WAIT = """
import sys, time
from pathlib import Path
from agent_host.durable.redis_server import RedisServer
server = RedisServer(Path(sys.argv[1]), unix_socket=True).start()
print(server.pid, flush=True)
time.sleep(60)
"""


def test_a_pid_file_naming_a_redis_server_on_another_dir_is_not_taken_for_one(
    tmp_path: Path,
) -> None:
    """A stale pid file whose pid is now another redis-server's (on another data dir): the
    data dir is not in use."""
    with RedisServer(tmp_path / "elsewhere") as other:
        here = tmp_path / "here"
        here.mkdir()
        (here / "redis-server.pid").write_text(f"{other.pid}\n")
        assert running_in(here) is None and running_in(other.data_dir) == other.pid
        with RedisServer(here) as server:
            assert server.running


def test_a_server_is_ready_when_it_answers_itself_not_another_at_its_address(
    tmp_path: Path,
) -> None:
    """A server whose port another one holds fails to listen; the other's answers to its
    PINGs, meanwhile, are not its own."""
    with RedisServer(tmp_path / "first") as first:
        second = RedisServer(tmp_path / "second", port=first.port)
        with pytest.raises(StoreError, match="Address already in use"):
            second.start()
        assert not second.running


def test_a_data_dir_with_odd_characters_gets_a_socket_url_that_reaches_it() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cs #?%41 é-", dir="/tmp")) / "redis"
    try:
        with RedisServer(data_dir, unix_socket=True) as server:
            assert server.pid is not None and share_url_of(server.pid) == server.url
            assert share_pid(server.url) == server.pid
    finally:
        shutil.rmtree(data_dir.parent)


def share_pid(url: str) -> int:
    """The pid of the server that answers at `url`."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


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
