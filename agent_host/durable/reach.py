"""Whether the configured Redis answers, for `countersign check`: PING, and the routes
kept there (their channels are checked too). Nothing is written."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from agent_host.approvals.routes import RouteRule
from agent_host.durable.connections import embedded_dir, open_redis, redacted
from agent_host.durable.redis_server import find_executable
from agent_host.durable.route_book import RouteBook
from agent_host.errors import ConfigurationError, StoreUnavailable
from agent_host.settings import Settings

__all__ = ["RedisReach", "reach_redis", "redacted"]

PING_SECONDS = 5.0


@dataclass(frozen=True)
class RedisReach:
    where: str  # what answered (or would be used), in words
    routes: list[RouteRule] = field(default_factory=list)


async def reach_redis(settings: Settings) -> RedisReach:
    """PING REDIS_URL and read the routes stored there; with REDIS_URL unset, only check that
    redis-server is installed (the embedded server is not started: a running `serve` may
    own it). Raises StoreUnavailable or ConfigurationError saying what to fix."""
    url = settings.redis_url
    if not url:
        server = find_executable()
        return RedisReach(
            f"REDIS_URL is unset: the embedded redis-server ({server}) would be used, data in "
            f"{embedded_dir(settings)}; routes kept there were not read"
        )
    try:
        redis, _ = await open_redis(settings)
    except ValueError as exc:
        raise ConfigurationError(
            f"REDIS_URL={redacted(url)!r} is not a Redis URL ({exc}): use redis://host:6379/0, "
            "rediss://… or unix:///path/redis.sock"
        ) from exc
    try:
        await asyncio.wait_for(redis.ping(), PING_SECONDS)
        routes = await asyncio.wait_for(
            RouteBook(redis, settings.default_channel).rules(), PING_SECONDS
        )
    except (RedisError, OSError, TimeoutError) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise StoreUnavailable(
            f"Redis at {redacted(url)} did not answer ({why}): start it, or fix REDIS_URL"
        ) from exc
    finally:
        await redis.aclose()
    return RedisReach(f"Redis at {redacted(url)} answered PING", routes)
