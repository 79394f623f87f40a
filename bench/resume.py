"""decision_to_resume_p50_ms / decision_to_resume_p99_ms.

Measured: from `RunStore.decide` returning (an Approve of a paused refund run) to the
resumed run's new state saved by a resume worker running in-process (`Host.start_background`,
one worker, no sweeper, no outbox), one decision at a time. "Saved" is when the worker's
`save_outcome` returns, or `finish_answer` for a final answer (the journal saves it as the
run's outcome); the store is wrapped to note that moment and nothing else.

Baseline: the bare hand-off the worker relies on: XADD on one connection, a consumer
blocked in XREADGROUP on another, from sending the XADD to XREADGROUP returning (timed from
XADD's reply instead it is ~0: Redis answers the blocked reader in the same instant).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.durable.host import Host
from agent_host.durable.store import RunStore
from agent_host.examples import build_registry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import Approve
from agent_host.runtime.runner import RunOutcome
from agent_host.settings import load_settings
from tests.support.routers import StaticRouter

from .common import (
    KEYRING,
    Figure,
    clone_paused,
    dedicated_redis,
    percentile,
    refund_paused,
    summary,
)
from .stack import persist_pauses, resume_streams, wait_streams_drained

__all__ = ["handoff_latencies", "run"]

DECISIONS = 200
WARMUP = 20
REVIEWER = "U0REVIEWER"
ROUTE = Route(destination="C0APPROVALS")


class TimedStore(RunStore):
    """Notes when each run's new state was saved (the worker calls save_outcome, or
    finish_answer for a final answer)."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, KEYRING, StaticRouter(ROUTE))
        self.saved: dict[str, asyncio.Future[float]] = {}

    def expect(self, run_id: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.saved[run_id] = future
        return future

    async def save_outcome(self, outcome: RunOutcome, expected_pause_id: str, actor: str) -> bool:
        done = await super().save_outcome(outcome, expected_pause_id, actor)
        self._saved(outcome.state.run_id)
        return done

    async def finish_answer(self, state: RunState, pause_id: str, actor: str) -> tuple[str, Any]:
        done = await super().finish_answer(state, pause_id, actor)
        self._saved(state.run_id)
        return done

    def _saved(self, run_id: str) -> None:
        future = self.saved.get(run_id)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())


async def handoff_latencies(redis_url: str, count: int) -> list[float]:
    """XADD sent → XREADGROUP returned (blocked consumer on its own connection), seconds."""
    producer, consumer = Redis.from_url(redis_url), Redis.from_url(redis_url)
    stream, group = f"bench:handoff:{uuid.uuid4().hex}", "bench"
    await producer.xgroup_create(stream, group, id="$", mkstream=True)
    latencies: list[float] = []
    try:
        for _ in range(count):
            read = asyncio.create_task(_read_one(consumer, stream, group))
            await asyncio.sleep(0.002)  # the consumer is blocked before the XADD
            sent = time.perf_counter()
            await producer.xadd(stream, {"type": "resume"})
            reply = await read
            received = time.perf_counter()
            if not reply:
                raise RuntimeError("XREADGROUP timed out in the hand-off baseline")
            latencies.append(received - sent)
    finally:
        await producer.aclose()
        await consumer.aclose()
    return latencies


async def _read_one(consumer: Redis, stream: str, group: str) -> Any:
    return await consumer.xreadgroup(group, "c", {stream: ">"}, count=1, block=2000)


async def run(tmp: Path) -> list[Figure]:
    template = await refund_paused()
    async with dedicated_redis(tmp, "resume") as (server, redis):
        outcomes = [clone_paused(template) for _ in range(WARMUP + DECISIONS)]
        requests = await persist_pauses(redis, outcomes, ROUTE)
        worker_redis = Redis.from_url(server.url, socket_timeout=5)
        host = Host(
            settings=load_settings({"REDIS_URL": server.url}),
            redis=worker_redis,
            registry=build_registry(),
            keyring=KEYRING,
            router=StaticRouter(ROUTE),
        )
        store = TimedStore(worker_redis)
        host.store = store  # the worker saves through it
        host.start_background(1, sweeper=False, outbox=False)
        latencies: list[float] = []
        try:
            await wait_streams_drained(redis, streams=resume_streams())
            for n, request in enumerate(requests):
                saved = store.expect(request.run_id)
                decision = Approve(decided_by=REVIEWER, call_hash=request.call_hash)
                result = await store.decide(request.request_id, decision)
                returned = time.perf_counter()
                if not result.resume_queued:
                    raise RuntimeError(f"decide did not queue a resume: {result.outcome}")
                at = await asyncio.wait_for(saved, 5)
                if n >= WARMUP:
                    latencies.append(at - returned)
        finally:
            await host.stop()
        await handoff_latencies(server.url, WARMUP)
        baseline = await handoff_latencies(server.url, DECISIONS)

    measured, raw = summary(latencies), summary(baseline)
    label = "XADD → blocked XREADGROUP round trip"
    details = {"measured": measured, "baseline": raw, "negative": sum(x < 0 for x in latencies)}
    return [
        Figure(
            "decision_to_resume_p50_ms",
            round(percentile(latencies, 50) * 1000, 3),
            "ms",
            round(percentile(baseline, 50) * 1000, 3),
            label + " p50",
            "",
            details,
        ),
        Figure(
            "decision_to_resume_p99_ms",
            round(percentile(latencies, 99) * 1000, 3),
            "ms",
            round(percentile(baseline, 99) * 1000, 3),
            label + " p99",
            "",
            {},
        ),
    ]
