"""Building blocks for the Redis-backed agent-host tests: a fake clock, a wired store + runner
+ workers over the example agents, and bounded helpers to drive runs to their next state."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from agent_host.approvals import ApprovalRequest, FixedRouter, Router, RunRecord
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.host import Host
from agent_host.durable.redis_ledger import RedisLedger
from agent_host.durable.store import RunStore
from agent_host.durable.worker import ResumeWorker
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.runner import Runner
from agent_host.settings import load_settings
from tests.support.keyspace import xrange_all
from tests.support.waiting import eventually, stack_of

__all__ = [
    "Env",
    "FakeClock",
    "make_env",
    "make_host",
    "resume_entries",
    "scan_keys",
]

# Near the real time: deadlines are checked against Redis's clock (TIME), so requests
# created by a fake clock must be due when Redis says so; `Env.age` moves them closer.
START = float(int(time.time()))


class FakeClock:
    """A clock the test moves by hand; each reading is strictly later than the last by 1 ms,
    so scores in the indexes stay distinct unless `tick` is 0."""

    def __init__(self, start: float | None = None, tick: float = 0.001) -> None:
        self.now, self.tick = float(int(time.time())) if start is None else start, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Env:
    redis: Redis
    keyring: KeyRing
    store: RunStore
    runner: Runner
    effects: ExampleEffects
    workers: list[ResumeWorker] = field(default_factory=list)

    def worker(self, name: str = "w1", *, idle_ms: int = 30_000) -> ResumeWorker:
        worker = ResumeWorker(self.store, self.runner, name, idle_ms=idle_ms)
        self.workers.append(worker)
        return worker

    async def drain(self, worker: ResumeWorker | None = None, rounds: int = 50) -> int:
        """Poll until the resume stream has nothing new and nothing pending; returns handled."""
        worker = worker or (self.workers[0] if self.workers else self.worker())
        await worker.consumer.ensure_groups()
        handled = 0
        for _ in range(rounds):
            n = await worker.consumer.poll(block_ms=1)
            handled += n
            if n == 0 and not await pending_entries(self.redis):
                return handled
        raise AssertionError(f"resume stream not drained after {rounds} polls")

    async def start(self, agent: str, text_input: str, requested_by: str = "alice") -> str:
        """Create a run and let a worker take it to its first pause (or its end)."""
        run_id = await self.store.create_run(agent, text_input, requested_by)
        await self.drain()
        return run_id

    async def requests(self, run_id: str) -> list[ApprovalRequest]:
        return await self.store.run_requests(run_id)

    async def pending_requests(self, run_id: str) -> list[ApprovalRequest]:
        return [r for r in await self.store.run_requests(run_id) if r.status == "pending"]

    async def status(self, run_id: str) -> str:
        info = await self.store.run_info(run_id)
        assert info is not None, f"run {run_id} does not exist"
        return info.status

    async def info(self, run_id: str) -> RunRecord:
        info = await self.store.run_info(run_id)
        assert info is not None, f"run {run_id} does not exist"
        return info

    async def age(self, seconds: float) -> None:
        """Let `seconds` pass for every pending deadline: Redis's clock, which decides what
        is due, cannot be moved, so the deadlines move back instead."""
        for shard in K.shards():
            due: Any = await self.store.redis.zrange(shard.deadlines, 0, -1, withscores=True)
            for member, score in due:
                rid = as_text(member)
                await self.store.redis.zadd(shard.deadlines, {rid: score - seconds * 1000})
                await self.store.redis.hincrbyfloat(
                    K.Keys(rid).request(rid), "expires_at", -seconds
                )

    async def final_state(self, run_id: str) -> RunState:
        info = await self.info(run_id)
        return await self.store.load_checkpoint(run_id, info.pause_id)


def make_env(
    redis: Redis,
    *,
    router: Router | None = None,
    clock: Callable[[], float] = time.time,
    keyring: KeyRing | None = None,
    journal: Path | None = None,
    registry: AgentRegistry | None = None,
) -> Env:
    effects = ExampleEffects(journal=journal)
    keyring = keyring or KeyRing.parse(generate_key("k1"))
    store = RunStore(redis, keyring, router or FixedRouter("C-ops"), clock=clock)
    runner = Runner(registry or build_registry(effects), RedisLedger(redis, keyring))
    return Env(redis, keyring, store, runner, effects)


_GROUPS = {"resume": K.RESUME_GROUP, "outbox": K.OUTBOX_GROUP, "callbacks": K.CALLBACK_GROUP}


async def pending_entries(redis: Redis, stream: str = "resume") -> int:
    """Entries of every shard's `stream` (resume, outbox or callbacks) read by its consumer
    group and not acknowledged yet (a stream or group not made yet holds none)."""
    total = 0
    for shard in K.shards():
        try:
            info: Any = await redis.xpending(getattr(shard, stream), _GROUPS[stream])
        except ResponseError:  # NOGROUP: nothing read from it yet
            continue
        total += int(info["pending"])
    return total


async def resume_entries(redis: Redis, run_id: str | None = None) -> list[dict[str, str]]:
    """Every `resume` (not `start`) entry of the resume stream, optionally of one run."""
    entries: Any = await xrange_all(redis, "resume")
    out = []
    for _, fields in entries:
        decoded = {as_text(k): as_text(v) for k, v in fields.items()}
        if decoded.get("type") == "resume" and run_id in (None, decoded.get("run_id")):
            out.append(decoded)
    return out


async def scan_keys(redis: Redis, match: str = "*") -> set[str]:
    return {as_text(k) async for k in redis.scan_iter(match=match, count=1000)}


def make_host(
    redis: Redis, tmp_path: Path, *, registry: AgentRegistry | None = None, **env: str
) -> tuple[Host, ExampleEffects]:
    """A `Host` (store, runner, API's dependencies) over `registry` or the example agents,
    nothing in the background; `env` are its settings' variables."""
    settings = load_settings({"COUNTERSIGN_DATA_DIR": str(tmp_path), **env})
    effects = ExampleEffects()
    host = Host(
        settings=settings,
        redis=redis,
        registry=registry or build_registry(effects),
        keyring=KeyRing.parse(generate_key("k1")),
        router=FixedRouter("C-ops"),
    )
    return host, effects


async def polled_until(worker: Any, done: Any) -> None:
    """The worker's consumer polled (reclaiming after its idle_ms) until `done()` holds."""

    async def polled() -> bool:
        await worker.consumer.poll(block_ms=1)
        return bool(await done())

    await eventually(polled, within=10)


async def killed_while_polling(consumer: Any, taken: asyncio.Event) -> None:
    """`consumer` (a stream consumer, or every shard's) polls until `taken` is set, then
    its process is killed: its polls end where they are, and none of `run()`'s clean-up
    happens (a process stopped on purpose would start its entries' counts afresh)."""

    async def polling() -> None:
        # Until killed, even by a cancel swallowed on the way (Python 3.11's wait_for can
        # swallow one that comes as what it waits for ends): the poll would go on for ever.
        this = asyncio.current_task()
        while this is not None and not this.cancelling():
            await consumer.poll(block_ms=1)

    process = asyncio.create_task(polling())
    try:
        await asyncio.wait_for(taken.wait(), 5)
    finally:
        process.cancel()
        ended, _ = await asyncio.wait({process}, timeout=10)
        assert ended, f"the killed consumer's poll did not end:\n{stack_of(process)}"
        with contextlib.suppress(asyncio.CancelledError):
            await process
