"""Whether the configured Redis answers, for `countersign check`: PING, the routes kept
there (their channels are checked too), the keys the waiting runs' checkpoints were
encrypted under (each must still be in the key ring), and how it keeps its writes on disk.
Nothing is written."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import RedisError, ResponseError

from agent_host.approvals.external import EXTERNAL
from agent_host.approvals.routes import RouteRule
from agent_host.approvals.runs import RunStatus
from agent_host.durable import keys as K
from agent_host.durable.connections import (
    as_text,
    embedded_dir,
    open_redis,
    redacted,
    server_config,
)
from agent_host.durable.crypto import ENV_VAR, HEADER_BYTES, kid_in_header
from agent_host.durable.eviction import EVICTION_SETTINGS, Eviction
from agent_host.durable.redis_server import find_executable
from agent_host.durable.route_book import RouteBook
from agent_host.errors import ConfigurationError, StoreUnavailable
from agent_host.settings import Settings

__all__ = ["RedisReach", "keys_gone", "reach_redis", "redacted", "waiting_runs_keys"]

PING_SECONDS = 5.0


@dataclass(frozen=True)
class RedisReach:
    where: str  # what answered (or would be used), in words
    routes: list[RouteRule] = field(default_factory=list)
    # key id -> how many waiting runs' checkpoints are encrypted under it (None: not read)
    waiting_under: Counter[str] | None = None
    # (appendonly, appendfsync) as Redis reports them; None: not read (CONFIG refused, or
    # the embedded server, which runs with ("yes", "everysec"))
    aof: tuple[str, str] | None = None
    # Redis's maxmemory policy and limit; None: not read (CONFIG refused, or the embedded
    # server, which keeps Redis's default, noeviction)
    eviction: Eviction | None = None
    # whether Redis holds a list of routes, an empty one included (admins removed every
    # route): then a routes file is not seeded, whatever it says
    routes_kept: bool = False
    # bytes of memory Redis counts against its maxmemory (INFO memory); None: not read
    used_memory: int | None = None


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
        redis, _ = await open_redis(settings, one_shot=True)
    except ValueError as exc:
        raise ConfigurationError(
            f"REDIS_URL={redacted(url)!r} is not a Redis URL ({exc}): use redis://host:6379/0, "
            "rediss://… or unix:///path/redis.sock"
        ) from exc
    try:
        async with asyncio.timeout(PING_SECONDS):
            await redis.ping()
        async with asyncio.timeout(PING_SECONDS):
            routes = await RouteBook(redis, settings.default_channel).rules()
            routes_kept = bool(await redis.exists(K.ROUTES))
        waiting_under = await waiting_runs_keys(redis)
        async with asyncio.timeout(PING_SECONDS):
            aof = await _aof(redis)
        eviction = Eviction.of(await server_config(redis, EVICTION_SETTINGS))
        async with asyncio.timeout(PING_SECONDS):
            used_memory, eviction_said = await _memory(redis)
        eviction = eviction or eviction_said  # (INFO says it where CONFIG is refused)
    except (RedisError, OSError, TimeoutError) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise StoreUnavailable(
            f"Redis at {redacted(url)} did not answer ({why}): start it, or fix REDIS_URL"
        ) from exc
    finally:
        await redis.aclose()
    answered = f"Redis at {redacted(url)} answered PING"
    return RedisReach(answered, routes, waiting_under, aof, eviction, routes_kept, used_memory)


async def _memory(redis: Any) -> tuple[int | None, Eviction | None]:
    """The bytes Redis counts against its maxmemory (what it has in use, less replicas' and
    the AOF's buffers, as Redis reckons), and its limit and policy, from INFO memory, which
    managed services allow where they refuse CONFIG; (None, None) where INFO is refused.
    (On a Redis Cluster, the node the client asks.)"""
    try:
        info = await redis.info("memory")
    except ResponseError:
        return None, None
    used, spare = info.get("used_memory"), info.get("mem_not_counted_for_evict", 0)
    counted = used - spare if isinstance(used, int) and isinstance(spare, int) else None
    said = {"maxmemory": info.get("maxmemory"), "maxmemory-policy": info.get("maxmemory_policy")}
    limits = {name: str(value) for name, value in said.items() if value is not None}
    return counted, Eviction.of(limits)


async def _aof(redis: Any) -> tuple[str, str] | None:
    """How Redis keeps its writes on disk, or None where CONFIG is not allowed (managed
    services rename or refuse it). On a Redis Cluster, the node the client asks."""
    try:
        config = await redis.config_get("append*")
    except ResponseError:
        return None
    return as_text(config.get("appendonly", "")), as_text(config.get("appendfsync", ""))


async def waiting_runs_keys(redis: Any) -> Counter[str]:
    """The key ids of the waiting runs' checkpoints, counted: from each shard's pending
    index, the first bytes of each run's checkpoint (never SCAN, never a whole blob). A
    request from an agent that runs elsewhere (origin "external") has no checkpoint here;
    a checkpoint that is missing or not an envelope counts under "".

    Runs decided and not resumed yet count too: those of each shard's resume entries not
    done (read and pending, or not read yet), such as a run a worker without its key left
    waiting. Their runs may have moved on since (a stale entry): a checkpoint missing
    there is not counted."""
    kids: dict[str, str] = {}  # checkpoint key -> its key id
    for shard in K.shards():
        await _count_resuming(redis, shard, kids)
        await _count_pending(redis, shard, kids)
    return Counter(kids.values())


async def _count_pending(redis: Any, shard: K.Shard, kids: dict[str, str]) -> None:
    request_ids = [as_text(r) for r in await redis.zrange(shard.pending, 0, -1)]
    for page in _pages(request_ids):
        batch = [(r, checkpoint) for r in page if (checkpoint := _checkpoint_of(r))]
        async with redis.pipeline(transaction=False) as pipe:
            for request_id, checkpoint in batch:
                pipe.hget(K.Keys(request_id).request(request_id), "origin")
                pipe.getrange(checkpoint, 0, HEADER_BYTES - 1)
            replies = await pipe.execute()
        for (_, checkpoint), origin, head in zip(batch, replies[::2], replies[1::2], strict=True):
            if as_text(origin or "") != EXTERNAL:
                kids[checkpoint] = kid_in_header(head) or ""


async def _count_resuming(redis: Any, shard: K.Shard, kids: dict[str, str]) -> None:
    """The checkpoints of the runs `shard`'s resume entries not done still wait to resume:
    an entry whose run ended or moved to another pause since (a worker that finished it
    died before acknowledging it) is stale, and a run not paused yet has no checkpoint."""
    for page in _pages(await _resuming(redis, shard)):
        batch = [
            (pause_id, checkpoint, K.Keys(run_id).run)
            for run_id, pause_id in page
            if (checkpoint := _checkpoint_of(run_id))
        ]
        async with redis.pipeline(transaction=False) as pipe:
            for _, checkpoint, run in batch:
                pipe.hmget(run, "status", "pause_id")
                pipe.getrange(checkpoint, 0, HEADER_BYTES - 1)
            replies = await pipe.execute()
        for (pause_id, checkpoint, _), (status, paused_at), head in zip(
            batch, replies[::2], replies[1::2], strict=True
        ):
            waits = _text(status) == RunStatus.RESUMING and _text(paused_at) == pause_id
            if waits and head:
                kids[checkpoint] = kid_in_header(head) or ""


PAGE = 1000  # entries, or runs, read in one round trip
T = TypeVar("T")


async def _resuming(redis: Any, shard: K.Shard) -> list[tuple[str, str]]:
    """(run id, pause id) of `shard`'s resume entries not done: read and still pending (a
    worker took it and has not acknowledged it), or not read yet by any worker (every
    entry, while the workers' group is not made yet: it is made to read from the start)."""
    try:
        groups = await redis.xinfo_groups(shard.resume)
    except ResponseError:  # no such stream yet: nothing was decided in this shard
        return []
    group = next((g for g in groups if as_text(g["name"]) == K.RESUME_GROUP), None)
    after = as_text(group["last-delivered-id"]) if group is not None else "0-0"
    entries = []
    if group is not None:
        for pending in _pages(await _pending_ids(redis, shard.resume)):
            async with redis.pipeline(transaction=False) as pipe:
                for entry_id in pending:
                    pipe.xrange(shard.resume, entry_id, entry_id)
                entries += [entry for found in await pipe.execute() for entry in found]
    while page := await redis.xrange(shard.resume, f"({after}", "+", count=PAGE):
        entries += page
        after = as_text(page[-1][0])
    found = {}
    for _, fields in entries:
        if run_id := _text(fields.get(b"run_id")):
            found[run_id] = _text(fields.get(b"pause_id"))  # the latest entry's
    return list(found.items())


def _text(value: Any) -> str:
    """A value read from Redis as text; damaged bytes do not stop `check` or a start (a
    run whose status or pause is damaged does not wait, and is told of elsewhere)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


async def _pending_ids(redis: Any, stream: str) -> list[str]:
    found: list[str] = []
    start = "-"
    while page := await redis.xpending_range(stream, K.RESUME_GROUP, start, "+", PAGE):
        found += [as_text(p["message_id"]) for p in page]
        start = f"({found[-1]}"
    return found


def _pages(items: Sequence[T]) -> list[Sequence[T]]:
    """`items` in pages of PAGE, one round trip each."""
    return [items[n : n + PAGE] for n in range(0, len(items), PAGE)]


def keys_gone(waiting_under: Counter[str], kids: Collection[str]) -> str | None:
    """What a ring (of `kids`) without the key of some waiting runs' checkpoints means, and
    what to do; None when it holds them all."""
    waiting = sum(waiting_under.values())
    gone = {kid: n for kid, n in sorted(waiting_under.items()) if kid and kid not in kids}
    if not gone:
        return None
    which = ", ".join(f"{n} under {kid!r}" for kid, n in gone.items())
    return (
        f"{which} of {waiting} waiting run(s): {ENV_VAR} no longer holds that key, so once "
        "decided they wait unresumed for a worker that has it (those decided already wait "
        "now). Put it back after the active key, run `countersign keys rotate`, then remove it"
    )


def _checkpoint_of(run_or_request_id: str) -> str:
    """The checkpoint key of a run, or of a request's run ("" for an id not of ours)."""
    try:
        return K.Keys(run_or_request_id).checkpoint
    except ValueError:
        return ""
