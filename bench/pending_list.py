"""pending_list_ms_at_100k: `RunStore.list_pending` with 100,000 pending requests.

Populating: one real pause is saved through the store and its request hash is the template;
then 100,000 request hashes in the store's key format (`Keys(rid).request(rid)`, each with
its own run token, spread evenly over the shards, request id, times and pause id, and its
content sealed to its own ids as the store seals it, so each page opens what it reads) and their
entries in their shard's pending index (`Keys(rid).shard.pending`, scored by creation ms)
are written directly with pipelined HSET + ZADD. That is all `list_pending` reads; 100,000
full pauses (checkpoints, audit streams, other indexes) would take minutes and change
nothing it touches.

Measured, p50 of 50 calls each: the first page (20 newest), and a later page read with a
cursor in the middle of the index (`<score>:<request id>` of the 50,000th newest request).
Baseline: the least a client must do with this layout, in raw redis-py: one pipeline of a
ZRANGE BYSCORE REV LIMIT 21 WITHSCORES per shard index, merged, then one pipeline of 20
HGETALL, results left undecoded (two round trips).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.durable import keys as K
from agent_host.durable.sealed_records import SealedRecords
from agent_host.durable.store import RunStore
from tests.support.routers import StaticRouter

from .common import KEYRING, Figure, clone_paused, dedicated_redis, ms, percentile, refund_paused

__all__ = ["run"]

PENDING = 100_000
PIPELINE = 2_000
REPEATS = 50
LIMIT = 20
CURSOR_RANK = 50_000
ROUTE = Route(destination="C0APPROVALS")


def _request_id(n: int) -> str:
    return f"req_{n:08x}{0:012x}_0001"


async def _populate(
    redis: Redis, records: SealedRecords, template: dict[Any, Any], base_ms: int
) -> None:
    sealed = {k.decode(): v.decode() for k, v in template.items()}
    fields, _, _ = records.open_request(sealed)
    for start in range(0, PENDING, PIPELINE):
        async with redis.pipeline(transaction=False) as pipe:
            for n in range(start, min(start + PIPELINE, PENDING)):
                token = f"{n:08x}{0:012x}"  # in shard n % SHARDS: evenly spread
                rid, created = _request_id(n), base_ms + n
                mapping: dict[Any, Any] = records.seal_request(
                    fields
                    | {
                        "request_id": rid,
                        "run_id": f"run_{token}",
                        "pause_id": rid,
                        "created_at": repr(created / 1000),
                        "expires_at": repr(created / 1000 + 72 * 3600),
                    }
                )
                keys = K.Keys(rid)
                pipe.hset(keys.request(rid), mapping=mapping)
                pipe.zadd(keys.shard.pending, {rid: created})
            await pipe.execute()


async def _quiet(redis: Redis, within: float = 60.0) -> None:
    """Until no AOF rewrite is running or scheduled (100k writes trigger one)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        info: Any = await redis.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        await asyncio.sleep(0.1)


async def _p50(call: Callable[[], Awaitable[Any]]) -> float:
    for _ in range(5):
        await call()
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50)


async def _raw_page(redis: Redis, top: str) -> list[Any]:
    async with redis.pipeline(transaction=False) as pipe:
        for shard in K.shards():
            pipe.zrange(
                shard.pending,
                top,
                "-inf",
                desc=True,
                byscore=True,
                offset=0,
                num=LIMIT + 1,
                withscores=True,
            )
        per_shard: list[Any] = await pipe.execute()
    rows = sorted(((score, member) for found in per_shard for member, score in found), reverse=True)
    async with redis.pipeline(transaction=False) as pipe:
        for _, member in rows[:LIMIT]:
            rid = member.decode()
            pipe.hgetall(K.Keys(rid).request(rid))
        result: list[Any] = await pipe.execute()
    return result


async def run(tmp: Path) -> list[Figure]:
    template_pause = clone_paused(await refund_paused())
    async with dedicated_redis(tmp, "pending-list") as (_, redis):
        store = RunStore(redis, KEYRING, StaticRouter(ROUTE))
        await store.save_outcome(template_pause, "", "worker")
        sample = (await store.run_requests(template_pause.state.run_id))[0]
        template = await redis.hgetall(K.Keys(sample.request_id).request(sample.request_id))
        await redis.delete(*(s.pending for s in K.shards()))  # only the 100,000 below
        base_ms = int(time.time() * 1000) - PENDING
        started = time.perf_counter()
        await _populate(redis, store.sealed, template, base_ms)
        populate_s = time.perf_counter() - started
        await _quiet(redis)

        n = PENDING - CURSOR_RANK  # newest first: the CURSOR_RANK-th newest is number n
        score = base_ms + n
        cursor = f"{score}:{_request_id(n)}"
        first = await store.list_pending()
        later = await store.list_pending(cursor=cursor)
        if len(first.requests) != LIMIT or len(later.requests) != LIMIT:
            raise RuntimeError("list_pending returned short pages at 100k")
        heads = (first.requests[0].request_id, later.requests[0].request_id)
        if heads != (_request_id(PENDING - 1), _request_id(n - 1)):
            raise RuntimeError(f"list_pending pages start at {heads}, not newest-first")
        if any(r.unreadable for r in first.requests + later.requests):
            raise RuntimeError("list_pending read requests whose sealed fields do not open")

        first_ms = await _p50(store.list_pending)
        later_ms = await _p50(lambda: store.list_pending(cursor=cursor))
        raw_first = await _p50(lambda: _raw_page(redis, "+inf"))
        raw_later = await _p50(lambda: _raw_page(redis, f"({score}"))
        total = await store.pending_count()

    label = "raw redis-py: 1 pipeline of a ZRANGE per shard + 1 of 20 HGETALL, p50"
    details = {
        "pending": total,
        "repeats": REPEATS,
        "page_size": LIMIT,
        "populate_seconds": round(populate_s, 2),
    }
    return [
        Figure(
            "pending_list_ms_at_100k_first_page",
            ms(first_ms),
            "ms",
            ms(raw_first),
            label,
            "<= 50",
            details,
        ),
        Figure(
            "pending_list_ms_at_100k_cursor_page",
            ms(later_ms),
            "ms",
            ms(raw_later),
            label,
            "<= 50",
            {"cursor_rank": CURSOR_RANK},
        ),
    ]
