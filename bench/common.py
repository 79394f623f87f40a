"""What every figure shares: a dedicated Redis server, a realistic paused run, percentiles,
and the `Figure` row each module returns."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from redis.asyncio import Redis

from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.keys import new_run_id
from agent_host.durable.redis_server import RedisServer
from agent_host.examples import build_registry
from agent_host.runtime.runner import Paused, Runner

__all__ = [
    "KEYRING",
    "KEY_TEXT",
    "REQUESTER",
    "Figure",
    "clone_paused",
    "dedicated_redis",
    "ms",
    "percentile",
    "refund_paused",
    "summary",
]

KEY_TEXT = generate_key("bench")  # one key for the whole run (COUNTERSIGN_ENCRYPTION_KEYS)
KEYRING = KeyRing.parse(KEY_TEXT)
REQUESTER = "U0REQUESTER"  # the sandbox seed's requester; reviewers are other users


@dataclass
class Figure:
    """One row of the results table."""

    name: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    goal: str = ""  # e.g. ">= 0.25", "<= 10"; empty: no goal, reported for context
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # shown beside the value: why it should not be trusted, if so

    @property
    def met(self) -> bool | None:
        if not self.goal or self.value is None:
            return None
        op, _, bound = self.goal.partition(" ")
        limit = float(bound)
        return self.value >= limit if op == ">=" else self.value <= limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "figure": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "goal": self.goal or None,
            "met": self.met,
            "note": self.note or None,
            "details": self.details,
        }


@contextlib.asynccontextmanager
async def dedicated_redis(tmp: Path, name: str) -> AsyncIterator[tuple[RedisServer, Redis]]:
    """A fresh redis-server in `tmp/name`, configured as the embedded default (AOF on,
    appendfsync everysec) but on loopback TCP, as a Redis of one's own on another host is
    reached (the embedded one listens on a unix socket), and a client on it; both gone on
    exit."""
    server = RedisServer(tmp / name, appendfsync="everysec").start()
    client = Redis.from_url(server.url, socket_timeout=10, socket_connect_timeout=5)
    try:
        yield server, client
    finally:
        await client.aclose()
        server.stop()


async def refund_paused(registry: Any = None) -> Paused:
    """The refund agent's real pause: 'refund order 123' looked the order up and now asks
    to run issue_refund (one gated call)."""
    runner = Runner(registry or build_registry())
    outcome = await runner.run(
        "refund-agent", "refund order 123", run_id=new_run_id(), requested_by=REQUESTER
    )
    if not isinstance(outcome, Paused):
        raise RuntimeError(f"the refund agent did not pause: {outcome.kind}")
    return outcome


def clone_paused(template: Paused, run_id: str | None = None) -> Paused:
    """The same pause for another run id (the checkpoint is encrypted per run at save)."""
    state = template.state.model_copy(deep=True, update={"run_id": run_id or new_run_id()})
    return Paused(state, state.pending)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def summary(samples_s: Sequence[float]) -> dict[str, Any]:
    """Count, p50/p90/p99/max in ms of latencies given in seconds."""
    return {
        "n": len(samples_s),
        "p50_ms": ms(percentile(samples_s, 50)),
        "p90_ms": ms(percentile(samples_s, 90)),
        "p99_ms": ms(percentile(samples_s, 99)),
        "max_ms": ms(max(samples_s)) if samples_s else None,
    }


def now() -> float:
    return time.perf_counter()


class CpuMeter:
    """How busy the machine was while a figure ran, and how much of that was not the bench.

    Machine: non-idle time from /proc/stat. Bench: this process plus its reaped children
    (Redis servers, server processes and load generators are all waited for before a figure
    returns). The rest ran for someone else (other jobs on the machine) and competed with
    the measurement.
    """

    def __init__(self) -> None:
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.start = self._read()

    def _read(self) -> tuple[float, float, float, float]:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
        busy = (user + nice + system + irq + softirq) / self.ticks
        own = os.times()
        bench = own.user + own.system + own.children_user + own.children_system
        return time.monotonic(), busy, steal / self.ticks, bench

    def report(self, live_children_s: float = 0.0) -> dict[str, Any]:
        """`live_children_s`: CPU seconds of the bench's children still running (a server
        process measured from outside), which are the bench's too."""
        end = self._read()
        wall = end[0] - self.start[0]
        busy, steal, bench = (end[i] - self.start[i] for i in (1, 2, 3))
        bench += live_children_s
        return {
            "wall_s": round(wall, 2),
            "cpus": os.cpu_count(),
            "bench_cores": round(bench / wall, 2) if wall else None,
            "other_processes_cores": round(max(0.0, busy - bench) / wall, 2) if wall else None,
            "steal_cores": round(steal / wall, 2) if wall else None,
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
        }


T = TypeVar("T")


def run_as_serve_runs(main: Coroutine[Any, Any, T]) -> T:
    """`main` on the event loop `serve` runs on: uvloop when the `fast` extra is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
