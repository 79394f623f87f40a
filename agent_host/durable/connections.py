"""Connecting to Redis: a URL, a Sentinel-managed master, or an embedded server.

redis://host:6379/0, rediss://…, unix:///path/redis.sock   a server
redis+sentinel://s1:26379,s2:26379/mymaster/0               the master Sentinel names
(unset)                                                     an embedded redis-server,
                                                            AOF on, data in the data dir
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    InvalidResponse,
    OutOfMemoryError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from agent_host.durable.connection_pool import WaitingConnectionPool, WaitingSentinelConnectionPool
from agent_host.durable.data_dir import private_dir
from agent_host.durable.every import Every
from agent_host.durable.eviction import EVICTION_SETTINGS, MAKE_ROOM, Eviction, eviction_problem
from agent_host.durable.memory_advice import REDIS_DEFAULTS, memory_advice
from agent_host.durable.redis_server import RedisServer
from agent_host.errors import ConfigurationError, StoreFull, StoreUnavailable
from agent_host.settings import Settings

__all__ = [
    "FULL_ERRORS",
    "REDIS_FULL",
    "STORE_ERRORS",
    "as_text",
    "close_redis",
    "embedded_dir",
    "is_full",
    "open_redis",
    "redacted",
    "say_full",
]

log = logging.getLogger(__name__)

_CLIENT_OPTIONS: dict[str, Any] = {
    # Each worker and the outbox hold one blocked read per shard, and clicks must not wait
    # for a free connection: a pool well above that. A burst beyond it waits in line
    # (`connection_pool`), except on a Redis Cluster, whose client has pools of its own.
    "max_connections": 1024,
    # No socket timeout for `serve` and `worker`: redis-py puts a timer around every read
    # for one (6% of serve's CPU per approval cycle, measured). TCP notices a Redis host
    # gone (KEEPALIVE below), and what must answer in time has its own deadline: a Slack
    # request's budget, the HTTP API's STORE_BUDGET_SECONDS, /readyz. A Redis that is up
    # but answers nothing is waited for. A command-line run is given ONE_SHOT_TIMEOUT.
    "socket_timeout": None,
    "socket_connect_timeout": 5,
    "health_check_interval": 30,
}
ONE_SHOT_TIMEOUT = 5.0  # seconds: `check`, `keys rotate` give up rather than wait for ever
PROBE_SECONDS = 5.0  # what kind of Redis it is, asked once at the start
CONFIG_WITHIN = 2.0  # its memory settings, read once at the start for advice
# A TCP connection whose host went away (powered off, partitioned) is dropped within about
# ten seconds: probes after 5 s idle, 1 s apart, 5 unanswered; data unacknowledged for 10 s.
KEEPALIVE = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 5, "TCP_USER_TIMEOUT": 10_000}
_TCP_OPTIONS: dict[str, Any] = {
    "socket_keepalive": True,
    "socket_keepalive_options": {
        getattr(socket, name): value for name, value in KEEPALIVE.items() if hasattr(socket, name)
    },
}
try:  # redis-py >= 7: the client library's name and version, for CLIENT SETINFO
    from redis.driver_info import DriverInfo
except ImportError:  # pragma: no cover - older redis-py reads them once per client anyway
    pass
else:
    # Resolved once: left to each connection, every new one reads the package's metadata
    # from disk (a millisecond each, and a burst of clicks opens hundreds of connections).
    _CLIENT_OPTIONS["driver_info"] = DriverInfo()


def embedded_dir(settings: Settings) -> Path:
    """Where the embedded Redis (REDIS_URL unset) keeps its AOF."""
    return Path(settings.data_dir) / "redis"


async def close_redis(redis: Redis, server: RedisServer | None) -> None:
    """What `open_redis` opened, closed: the client, then the embedded server (stopped
    whatever the client's close raised)."""
    try:
        await redis.aclose()
    finally:
        if server is not None:
            server.stop()


def as_text(value: Any) -> str:
    """A Redis reply as text (clients here return bytes, so checkpoints stay binary)."""
    return value.decode() if isinstance(value, bytes) else str(value)


async def open_redis(
    settings: Settings, *, one_shot: bool = False
) -> tuple[Redis, RedisServer | None]:
    """A client for REDIS_URL (checked reachable and supported), and the embedded server.
    A `one_shot` client (a command-line run) gives up on a command after ONE_SHOT_TIMEOUT."""
    server = None
    url = settings.redis_url
    if not url:
        # On a unix socket in the private data dir: no TCP port any local user could reach
        # it on, and a round trip costs less CPU than over loopback TCP.
        server = RedisServer(embedded_dir(settings), appendfsync="everysec", unix_socket=True)
        server.refuse_a_second()  # (refused, nothing changes: not even the dir's mode)
        private_dir(Path(settings.data_dir))
        server.start()
        url = server.url
        log.info("embedded Redis at %s (data in %s)", url, server.data_dir)
    options = _client_options(url, one_shot=one_shot)
    client = _sentinel_master(url, options) if url.startswith("redis+sentinel://") else None
    try:
        client = client or Redis.from_pool(WaitingConnectionPool.from_url(url, **options))
    except ValueError as exc:  # not a scheme redis-py knows
        raise ConfigurationError(
            f"REDIS_URL={redacted(url)!r} is not a Redis URL ({exc}): use redis://host:6379/0, "
            "rediss://…, unix:///path/redis.sock or redis+sentinel://host:26379/<master>"
        ) from None
    if await _is_cluster(client, url):
        await client.aclose()
        cluster = RedisCluster.from_url(url, **options)
        # Learn the slot map now, before the workers' many first commands race to build it.
        await cluster.initialize()
        client = _as_client(cluster)
        log.info("REDIS_URL is a Redis Cluster node: using cluster mode")
    if server is None:  # the embedded one is configured by countersign itself
        config = await server_config(client, (*REDIS_DEFAULTS, *EVICTION_SETTINGS))
        if (advice := memory_advice(config)) is not None:
            log.info(advice)
        if (problem := eviction_problem(Eviction.of(config))) is not None:
            log.warning(problem)
    return client, server


async def server_config(redis: Any, names: Iterable[str]) -> dict[str, str]:
    """The server's CONFIG GET of `names`, as text; empty when it would not say (CONFIG
    refused, as managed services may, or no answer within CONFIG_WITHIN). Never raises:
    what it is read for is advice, which must not stop a start."""
    try:
        async with asyncio.timeout(CONFIG_WITHIN):
            reply = await redis.config_get(*names)
    except Exception:
        return {}
    return {as_text(name): as_text(value) for name, value in reply.items()}


def _client_options(url: str, *, one_shot: bool) -> dict[str, Any]:
    """The client's options: TCP's keepalive where the URL is TCP (a unix socket takes
    none), a socket timeout for a command-line run."""
    options = dict(_CLIENT_OPTIONS)
    if not url.startswith("unix:"):
        options |= _TCP_OPTIONS
    if one_shot:
        options["socket_timeout"] = ONE_SHOT_TIMEOUT
    return options


def redacted(url: str) -> str:
    """`url` without its password, fit for a report or a log."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}" if user else f"***@{hosts}"))


def _sentinel_master(url: str, options: dict[str, Any]) -> Redis:
    """The master a Sentinel URL names: redis+sentinel://[[user]:password@]host:port[,…]/
    <master name>[/db]; the credentials are the master's (the Sentinels are asked without)."""
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    usage = (
        f"REDIS_URL={redacted(url)!r}: a Sentinel URL is "
        "redis+sentinel://[[user]:password@]host:port[,host:port]/<master name>[/db]"
    )
    if not hosts or not path:
        raise ConfigurationError(usage)
    nodes = []
    try:
        for node in hosts.split(","):
            host, _, port = node.rpartition(":")
            nodes.append((host or node, int(port or 26379)))
        db = int(path[1]) if len(path) > 1 else 0
    except ValueError:
        raise ConfigurationError(usage) from None
    user, _, password = (unquote(part) for part in userinfo.partition(":"))
    sentinel = Sentinel(nodes, socket_timeout=5)  # type: ignore[no-untyped-call]
    master: Redis = sentinel.master_for(
        path[0],
        db=db,
        redis_class=_SentinelMaster,
        connection_pool_class=WaitingSentinelConnectionPool,
        username=user or None,
        password=password or None,
        **options,
    )
    return master


class _SentinelMaster(Redis):
    """The master a Sentinel names: closing it closes the connections to the Sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager: Any = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()


async def _is_cluster(client: Redis, url: str) -> bool:
    try:
        async with asyncio.timeout(PROBE_SECONDS):
            info = await client.info("cluster")
    except Exception as exc:
        if (refused := _refused_for_good(exc)) is not None:
            await client.aclose()
            raise ConfigurationError(
                f"Redis at {redacted(url)} answered, and {refused}: fix REDIS_URL"
            ) from exc
        return False  # unreachable now: /readyz reports it; the workers retry
    return info.get("cluster_enabled") in (1, "1")


def _refused_for_good(exc: Exception) -> str | None:
    """What a Redis that answered said that no retry changes (a wrong password or user, a
    database it does not have, not Redis at all), or None: it may answer later."""
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return f"refused the credentials ({exc}): check its password or user"
    if isinstance(exc, ResponseError) and "DB index" in str(exc):
        return f"has no such database ({exc}): check the database number after the port"
    if isinstance(exc, InvalidResponse):
        return f"what answered does not speak Redis's protocol ({exc}): check the host and port"
    return None


def _as_client(cluster: RedisCluster) -> Redis:
    # Every state change is one script over keys that share a hash tag (see `keys`), so
    # the cluster client serves where a single server's client does; it speaks the same
    # commands, hence the cast.
    return cast(Redis, cluster)


_C = TypeVar("_C", bound=type)
# What Redis (or the network to it) raises: to callers above this layer, StoreUnavailable.
STORE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException, OSError)


def unavailable_on_redis_errors(cls: _C) -> _C:
    """Wrap every public coroutine method of `cls` so that a Redis or socket error leaves it
    as `StoreUnavailable`: callers above the durable layer (the Slack listeners, the API)
    handle one error of ours and never import Redis's."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(member):
            continue
        setattr(cls, name, _translated(member))
    return cls


REDIS_FULL = (
    "Redis is full: it refuses writes once its memory reaches its maxmemory, so nothing may "
    f"have changed; try again once an operator has made room ({MAKE_ROOM})"
)
FULL_SAID_EVERY = 60.0  # seconds: a full Redis is logged as an error once a minute
_full_said = Every(FULL_SAID_EVERY)
# Redis refusing a write for want of memory: raw, or as this layer translates it.
FULL_ERRORS: tuple[type[Exception], ...] = (OutOfMemoryError, StoreFull)


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, FULL_ERRORS)


def say_full(exc: BaseException) -> None:
    """A write Redis refused for want of memory, logged as the error an operator must act
    on (once a minute for the process: every click, request, resume and retry meets it
    meanwhile)."""
    if _full_said.due():
        log.error(
            "Redis refuses writes: its memory is full (%s). No decision, request or resume "
            "can be saved until there is room: %s (`countersign check` says how much is in "
            "use)",
            exc,
            MAKE_ROOM,
        )


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except OutOfMemoryError as exc:
            say_full(exc)
            raise StoreFull(REDIS_FULL) from exc
        except STORE_ERRORS as exc:
            # Only the error's type: its text names Redis's address, which is the log's
            # (the cause goes with the error), not the callers'.
            raise StoreUnavailable(
                f"Redis could not be used ({type(exc).__name__}); nothing may have changed, "
                "try again shortly"
            ) from exc

    return call
