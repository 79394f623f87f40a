"""pause_per_s and pause_ratio_vs_raw_redis.

Measured: `RunStore.save_outcome` of the refund agent's real Paused outcome (one gated call,
checkpoint encrypted with AES-GCM, routed, the PAUSE Lua script), one after another from
one client, each for a run nobody paused before.

Baseline (the figure's): raw redis-py doing the same number of round trips (one per pause)
with the same payload: one EVALSHA of a no-op script (`return #ARGV`) given exactly the keys
and arguments the PAUSE script got (same count, same sizes). The ratio therefore charges to
countersign everything beyond moving those bytes: building and routing the request, JSON,
encryption, and the script's writes inside Redis.

A second baseline in the details does the writes too: a MULTI/EXEC of HGET pause_id, SET
checkpoint, HSET request, RPUSH, three ZADDs, XADD outbox, HSET run, XADD audit with the
values the store wrote. In redis-py a 12-command transaction costs more client-side than
one EVALSHA, so it would flatter the ratio; it is shown for context only.

Measured and baseline run in alternating blocks and the ratio is the median of the blocks'
ratios, so a change in machine load during the run hits both sides alike.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.durable.store import RunStore
from tests.support.routers import StaticRouter

from .common import KEYRING, Figure, clone_paused, dedicated_redis, refund_paused

__all__ = ["run"]

NOOP = "return #ARGV"
BLOCKS = 10
PER_BLOCK = 200  # pauses per block: 2,000 measured in all
WARMUP = 200
ROUTE = Route(destination="C0APPROVALS")

Call = tuple[list[str], list[Any]]  # (keys, args) of one PAUSE script call


class RecordingStore(RunStore):
    """A RunStore that also keeps the (keys, args) its PAUSE script calls were given."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, KEYRING, StaticRouter(ROUTE))
        self.calls: list[Call] = []
        script = self._pause

        async def recorded(keys: list[str], args: list[Any]) -> Any:
            self.calls.append((list(keys), list(args)))
            return await script(keys=keys, args=args)

        self._pause = recorded  # type: ignore[assignment]


async def _timed(count: int, one: Callable[[int], Awaitable[None]]) -> float:
    started = time.perf_counter()
    for n in range(count):
        await one(n)
    return time.perf_counter() - started


def _multi_writer(redis: Redis, sample: Call) -> Callable[[int], Awaitable[None]]:
    """The same writes as one pause as one MULTI/EXEC round trip, for a fresh run each."""
    _, args = sample
    blob, fields = args[2], args[9]
    mapping = {k: str(v) for k, v in json.loads(fields).items()}
    counter = iter(range(10**9))

    async def one(_: int) -> None:
        n = next(counter)
        token = f"{n:016x}"
        base, rid, now = f"raw:{{{token}}}", f"req_{token}_0001", repr(time.time())
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hget(f"{base}:run", "pause_id")
            pipe.set(f"{base}:checkpoint", blob)
            pipe.hset(f"{base}:req:{rid}", mapping=mapping)
            pipe.rpush(f"{base}:requests", rid)
            for zset in ("pending", "pending:C0APPROVALS", "deadlines"):
                pipe.zadd(f"raw:{{global}}:{zset}", {rid: n})
            pipe.xadd("raw:{global}:outbox", {"type": "request_posted", "request_id": rid})
            pipe.hset(
                f"{base}:run",
                mapping={
                    "status": "waiting",
                    "pause_id": rid,
                    "undecided": 1,
                    "pause_requests": f'["{rid}"]',
                    "updated_at": now,
                },
            )
            pipe.xadd(
                f"{base}:audit",
                {"at": now, "actor": "worker", "event": "paused", "detail": f'["{rid}"]'},
            )
            await pipe.execute()

    return one


async def run(tmp: Path) -> list[Figure]:
    template = await refund_paused()
    async with dedicated_redis(tmp, "pause") as (_, redis):
        store = RecordingStore(redis)
        outcomes = [clone_paused(template) for _ in range(WARMUP + BLOCKS * PER_BLOCK)]
        queue = iter(outcomes)

        async def pause(_: int) -> None:
            outcome = next(queue)
            if not await store.save_outcome(outcome, "", "worker"):
                raise RuntimeError(f"pause of {outcome.state.run_id} was fenced off")

        noop = redis.register_script(NOOP)

        async def raw_eval(n: int) -> None:
            keys, args = store.calls[n % len(store.calls)]  # the very bytes PAUSE was given
            await noop(keys=keys, args=args)

        await _timed(WARMUP, pause)
        multi = _multi_writer(redis, store.calls[0])
        await _timed(WARMUP, raw_eval)
        await _timed(WARMUP, multi)

        store_s = eval_s = multi_s = 0.0
        ratios, multi_ratios = [], []
        for _ in range(BLOCKS):
            s = await _timed(PER_BLOCK, pause)
            e = await _timed(PER_BLOCK, raw_eval)
            m = await _timed(PER_BLOCK, multi)
            store_s, eval_s, multi_s = store_s + s, eval_s + e, multi_s + m
            ratios.append(e / s)  # (pauses/s) / (raw/s)
            multi_ratios.append(m / s)

    count = BLOCKS * PER_BLOCK
    pause_rate, eval_rate, multi_rate = count / store_s, count / eval_s, count / multi_s
    ratio = statistics.median(ratios)
    keys, args = store.calls[0]
    details = {
        "pauses": count,
        "blocks": BLOCKS,
        "concurrency": 1,
        "raw_eval_per_s": round(eval_rate, 1),
        "raw_multi_same_writes_per_s": round(multi_rate, 1),
        "ratio_vs_raw_multi_median": round(statistics.median(multi_ratios), 3),
        "block_ratios": [round(r, 3) for r in ratios],
        "script_keys": len(keys),
        "script_arg_bytes": sum(len(a if isinstance(a, bytes | str) else str(a)) for a in args),
        "checkpoint_bytes": len(args[2]),
    }
    label = "raw redis-py: 1 EVALSHA of a no-op script with the same keys/args"
    return [
        Figure("pause_per_s", round(pause_rate, 1), "/s", round(eval_rate, 1), label, "", details),
        Figure(
            "pause_ratio_vs_raw_redis",
            round(ratio, 3),
            "x",
            1.0,
            "raw EVALSHA = 1 (median of block ratios)",
            ">= 0.25",
            {"pause_per_s": round(pause_rate, 1), "raw_eval_per_s": round(eval_rate, 1)},
        ),
    ]
