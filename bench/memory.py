"""redis_bytes_per_pending: Redis memory per pending approval request.

N = 5,000 runs are created (`create_run`) and paused (`save_outcome` of the refund agent's
real pause: one request each) as in production; the figure is the change in INFO memory
`used_memory` divided by N. It covers everything one pending request costs: the run hash,
the encrypted checkpoint, the request hash, the run's request list and audit stream, its
entries in the pending, by-destination and deadline indexes and in the run, resume and
outbox streams (countersign never trims its streams, so those entries stay).

Baseline: the bytes of information in it: checkpoint blob plus the field names and values of
the request and run hashes, the size a compact encoding could approach.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.durable import keys as K
from agent_host.durable.store import RunStore
from agent_host.runtime.runner import Paused
from tests.support.routers import StaticRouter

from .common import KEYRING, Figure, clone_paused, dedicated_redis, refund_paused

__all__ = ["run"]

PENDING = 5_000
WARMUP = 100  # created before the first reading, so the global keys already exist
BATCH = 50
SAMPLE = 50  # runs whose keys are sized one by one for the breakdown
ROUTE = Route(destination="C0APPROVALS")


async def _used_memory(redis: Redis) -> int:
    info: Any = await redis.info("memory")
    return int(info["used_memory"])


async def _create(store: RunStore, outcomes: list[Paused]) -> None:
    async def one(outcome: Paused) -> None:
        state = outcome.state
        await store.create_run(state.agent, state.input, state.requested_by, state.run_id)
        if not await store.save_outcome(outcome, "", "worker"):
            raise RuntimeError(f"pause of {state.run_id} was fenced off")

    for start in range(0, len(outcomes), BATCH):
        await asyncio.gather(*(one(o) for o in outcomes[start : start + BATCH]))


async def _per_run_keys(redis: Redis, run_ids: list[str]) -> dict[str, Any]:
    """Average MEMORY USAGE of each per-run key, and the request hash's encoding."""
    totals: dict[str, int] = {}
    encoding = ""
    for run_id in run_ids:
        k = K.Keys(run_id)
        request_id = K.request_id(run_id, 1)  # the refund is the run's first request
        names = {
            "run_hash": k.run,
            "checkpoint": k.checkpoint,
            "request_hash": k.request(request_id),
            "request_list": k.requests,
            "audit_stream": k.audit,
        }
        for label, key in names.items():
            totals[label] = totals.get(label, 0) + int(await redis.memory_usage(key) or 0)
        encoding = (await redis.object("encoding", k.request(request_id))).decode()
    sizes: dict[str, Any] = {label: round(total / len(run_ids)) for label, total in totals.items()}
    sizes["request_hash_encoding"] = encoding
    return sizes


async def _information(redis: Redis, run_id: str) -> int:
    k = K.Keys(run_id)
    request_id = K.request_id(run_id, 1)
    blob = await redis.get(k.checkpoint) or b""
    fields = {**await redis.hgetall(k.request(request_id)), **await redis.hgetall(k.run)}
    return len(blob) + sum(len(name) + len(value) for name, value in fields.items())


async def run(tmp: Path) -> list[Figure]:
    template = await refund_paused()
    async with dedicated_redis(tmp, "memory") as (_, redis):
        store = RunStore(redis, KEYRING, StaticRouter(ROUTE))
        outcomes = [clone_paused(template) for _ in range(WARMUP + PENDING)]
        await _create(store, outcomes[:WARMUP])
        before = await _used_memory(redis)
        await _create(store, outcomes[WARMUP:])
        after = await _used_memory(redis)
        pending = await store.pending_count()
        measured_ids = [o.state.run_id for o in outcomes[WARMUP:]]
        per_key = await _per_run_keys(redis, measured_ids[:SAMPLE])
        information = await _information(redis, measured_ids[0])

    per_pending = (after - before) / PENDING
    per_run_total = sum(v for v in per_key.values() if isinstance(v, int))
    details = {
        "pending": PENDING,
        "pending_in_index": pending,
        "used_memory_delta": after - before,
        "per_run_keys_memory_usage": per_key,
        "global_indexes_and_streams_per_pending": round(per_pending - per_run_total),
    }
    return [
        Figure(
            "redis_bytes_per_pending",
            round(per_pending),
            "B",
            information,
            "bytes of data stored (checkpoint + request and run hash fields)",
            "",
            details,
        ),
        Figure(
            "redis_bytes_per_pending_ratio_vs_information",
            round(per_pending / information, 2),
            "x",
            1.0,
            "bytes of data stored = 1",
            "<= 2",
            {"bytes_per_pending": round(per_pending), "information_bytes": information},
        ),
    ]
