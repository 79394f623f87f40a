"""One fixed-rate click load against one server, with the CPU it cost: a step of the ladder
the ack figures are read from.

    python -m bench.steps serve 100      # one step by hand (prints its summary as JSON)
    python -m bench.steps bare 400 3     # ... for 3 s
    python -m bench.steps serve 100 5 /tmp/serve.prof   # serve under cProfile

Each step gets fresh everything: a Redis server, the Slack stand-in, the server process and
its own pending requests, so no step inherits another's backlog. The requests are spread
over enough channels that the outcome replies, paced by countersign at Slack's one post per
second per channel, never queue behind one another.

Serve: `countersign serve --workers 1` (or `--workers 0` + `countersign worker`). A warm-up
load (a quarter second of clicks at the step's rate) runs and is worked off first. Then the
clock and the CPU meter start, the measured clicks are sent open loop, and the meter stops
once every run a click decided has been through its whole approval cycle: click verified,
authorized, decided (compare-and-set), acked, message updated, run resumed, the tool run,
the next state saved (the run succeeded) and the outcome posted in the message's thread;
with the resume and outbox streams drained. `cpu_s` is the server processes' CPU time
(`bench.proc_cpu`) over that window, idle moments included.

Bare: `bench.bare_server`; the meter stops when the load generator is done (a bare click
has no work after its ack). Its CPU per click is the floor of the ack alone.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import ApprovalRequest
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from slack_sandbox import SlackStandIn

from . import loadgen
from .common import CpuMeter, clone_paused, dedicated_redis, ms, percentile, refund_paused
from .proc_cpu import ProcessCpu
from .stack import (
    SECRET,
    SpreadRouter,
    bare_server,
    bench_channels,
    decided_count,
    floor_server,
    group_backlog,
    outbox_streams,
    prepare_clicks,
    resume_streams,
    serve_process,
    standin,
    wait_streams_drained,
)

__all__ = ["Step", "run_step"]

TIMEOUT = 3.0  # Slack gives up on an ack after three seconds
CATCH_UP = 30.0  # seconds the server gets to finish every cycle after the load
P99_LIMIT_MS = 10.0  # a step passes with its ack p99 at or under this
POLL = 0.1


@dataclass
class Step:
    kind: str  # "bare", "serve" (one in-process worker) or "serve-workers0"
    rate: float
    seconds: float
    result: dict[str, Any]
    decided: int  # measured clicks that decided their request
    cycles: int | None  # serve: runs that succeeded with their outcome posted
    cpu_s: float
    window_s: float
    caught_up: bool
    conditions: dict[str, Any]
    probe: dict[str, Any] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)

    @property
    def clicks(self) -> int:
        return len(self.result["samples"])

    @property
    def latencies(self) -> list[float]:
        return [s["latency"] for s in self.result["samples"]]

    @property
    def p50_ms(self) -> float:
        return ms(percentile(self.latencies, 50))

    @property
    def p99_ms(self) -> float:
        return ms(percentile(self.latencies, 99))

    @property
    def non_200(self) -> int:
        return sum(1 for s in self.result["samples"] if s["status"] != 200)

    @property
    def completed(self) -> int:
        """Approval cycles completed (serve) or clicks decided (bare)."""
        return self.decided if self.cycles is None else self.cycles

    @property
    def cpu_ms_per_cycle(self) -> float | None:
        return round(self.cpu_s * 1000 / self.completed, 3) if self.completed else None

    @property
    def resumed_all(self) -> bool:
        """Every decided run went through its whole cycle (always true of the bare server,
        which resumes nothing)."""
        return self.cycles is None or (self.caught_up and self.cycles == self.decided)

    @property
    def passed(self) -> bool:
        return (
            self.p99_ms <= P99_LIMIT_MS
            and self.non_200 == 0
            and self.decided == self.clicks
            and self.resumed_all
        )

    def summary(self) -> dict[str, Any]:
        lags = [s["lag"] for s in self.result["samples"]]
        return {
            "rate_per_s": self.rate,
            "clicks": self.clicks,
            "ack_p50_ms": self.p50_ms,
            "ack_p90_ms": ms(percentile(self.latencies, 90)),
            "ack_p99_ms": self.p99_ms,
            "ack_max_ms": ms(max(self.latencies)) if self.latencies else None,
            "non_200": self.non_200,
            "errors": sorted({s["error"] for s in self.result["samples"] if s["error"]})[:3],
            "generator_lag_p99_ms": ms(percentile(lags, 99)),
            "decided": self.decided,
            "cycles_completed": self.cycles,
            "caught_up": self.caught_up,
            "cpu_s": round(self.cpu_s, 3),
            "window_s": round(self.window_s, 2),
            "cpu_ms_per_cycle": self.cpu_ms_per_cycle,
            "server_cores_busy": round(self.cpu_s / self.window_s, 2) if self.window_s else None,
            "passed": self.passed,
            "machine": self.conditions,
        }


def _warmup_count(rate: float) -> int:
    return max(20, int(rate / 4))


async def _load(workdir: Path, url: str, rate: float, bodies: list[str]) -> dict[str, Any]:
    spec = {"url": url, "secret": SECRET, "rate": rate, "bodies": bodies, "timeout": TIMEOUT}
    return await loadgen.run_in_subprocess(workdir, spec, len(bodies) / rate + 30)


async def run_step(
    tmp: Path,
    kind: str,
    rate: float,
    seconds: float,
    profile_to: Path | None = None,
) -> Step:
    """One step: `rate` clicks per second for `seconds` against a fresh `kind` server."""
    warm, clicks = _warmup_count(rate), int(rate * seconds)
    channels = bench_channels(max(10, math.ceil(rate * 1.25)))
    template = await refund_paused()
    outcomes = [clone_paused(template) for _ in range(warm + clicks)]
    async with (
        dedicated_redis(tmp, "redis") as (redis_server, redis),
        standin(extra_channels=channels) as slack,
    ):
        requests, bodies = await prepare_clicks(redis, slack, outcomes, SpreadRouter(channels))
        measured = requests[warm:]
        if kind == "bare":
            async with bare_server(tmp / "bare", redis_server.url) as bare:
                await _load(tmp / "warm", bare.events_url, rate, bodies[:warm])
                machine, cpu = CpuMeter(), ProcessCpu(bare.pids).start()
                started = time.monotonic()
                result = await _load(tmp / "load", bare.events_url, rate, bodies[warm:])
                cpu_s, window = cpu.elapsed(), time.monotonic() - started
                conditions = machine.report(cpu_s)
            decided = await decided_count(redis, measured)
            return Step(kind, rate, seconds, result, decided, None, cpu_s, window, True, conditions)
        if kind.startswith("floor:"):
            round_trips = int(kind.removeprefix("floor:"))
            async with floor_server(tmp / "floor", redis_server.url, slack, round_trips) as floor:
                await _load(tmp / "warm", floor.events_url, rate, bodies[:warm])
                await _replies_done(slack, requests[:warm], CATCH_UP)
                machine, cpu = CpuMeter(), ProcessCpu(floor.pids).start()
                started = time.monotonic()
                result = await _load(tmp / "load", floor.events_url, rate, bodies[warm:])
                decided = await decided_count(redis, measured)
                cycles, caught_up = await _replies_done(slack, measured, CATCH_UP, decided)
                cpu_s, window = cpu.elapsed(), time.monotonic() - started
                conditions = machine.report(cpu_s)
            return Step(
                kind, rate, seconds, result, decided, cycles, cpu_s, window, caught_up, conditions
            )
        workers = 0 if kind == "serve-workers0" else 1
        async with serve_process(
            tmp / "serve", redis_server.url, slack, workers=workers, profile_to=profile_to
        ) as serve:
            await wait_streams_drained(redis)  # start entries skipped, posted requests seen
            await _load(tmp / "warm", serve.events_url, rate, bodies[:warm])
            await _cycles_done(redis, slack, requests[:warm], CATCH_UP)
            machine, cpu = CpuMeter(), ProcessCpu(serve.pids).start()
            started = time.monotonic()
            result = await _load(tmp / "load", serve.events_url, rate, bodies[warm:])
            decided = await decided_count(redis, measured)
            cycles, caught_up = await _cycles_done(redis, slack, measured, CATCH_UP, decided)
            cpu_s, window = cpu.elapsed(), time.monotonic() - started
            conditions = machine.report(cpu_s)
        step = Step(
            kind, rate, seconds, result, decided, cycles, cpu_s, window, caught_up, conditions
        )
        step.probe, step.run_ids = serve.probe, [r.run_id for r in measured]
        return step


async def _cycles_done(
    redis: Redis,
    slack: SlackStandIn,
    requests: list[ApprovalRequest],
    within: float,
    decided: int | None = None,
) -> tuple[int, bool]:
    """Wait until every decided request's run succeeded and its outcome is in the thread,
    with the resume and outbox streams drained; (cycles completed, whether all did)."""
    wanted = decided if decided is not None else len(requests)
    deadline = time.monotonic() + within
    streams = resume_streams() + outbox_streams()
    cycles = 0
    while True:
        if await group_backlog(redis, streams) == 0:
            cycles = await completed_cycles(redis, slack, requests)
            if cycles >= wanted:
                return cycles, True
        if time.monotonic() > deadline:
            return await completed_cycles(redis, slack, requests), False
        await asyncio.sleep(POLL)


async def _replies_done(
    slack: SlackStandIn,
    requests: list[ApprovalRequest],
    within: float,
    decided: int | None = None,
) -> tuple[int, bool]:
    """The floor's cycles: wait until every decided request's thread has its reply."""
    wanted = decided if decided is not None else len(requests)
    deadline = time.monotonic() + within
    while True:
        replies = _replied(slack, requests)
        if replies >= wanted or time.monotonic() > deadline:
            return replies, replies >= wanted
        await asyncio.sleep(POLL)


def _replied(slack: SlackStandIn, requests: list[ApprovalRequest]) -> int:
    threads = _threads_replied_in(slack)
    return sum(1 for r in requests if (r.message_channel, r.message_ts) in threads)


def _threads_replied_in(slack: SlackStandIn) -> set[tuple[str, str | None]]:
    return {
        (m.channel, m.thread_ts)
        for m in slack.core.workspace.messages
        if m.thread_ts is not None and m.ts != m.thread_ts
    }


async def completed_cycles(
    redis: Redis, slack: SlackStandIn, requests: list[ApprovalRequest]
) -> int:
    """Requests whose run succeeded and whose outcome was posted in the message's thread."""
    async with redis.pipeline(transaction=False) as pipe:
        for request in requests:
            pipe.hget(K.Keys(request.run_id).run, "status")
        statuses = await pipe.execute()
    replied = _threads_replied_in(slack)
    return sum(
        1
        for request, status in zip(requests, statuses, strict=True)
        if status is not None
        and as_text(status) == "succeeded"
        and (request.message_channel, request.message_ts) in replied
    )


async def _main(kind: str, rate: float, seconds: float, profile_to: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="countersign-step-") as tmp:
        step = await run_step(Path(tmp), kind, rate, seconds, profile_to)
    return step.summary()


if __name__ == "__main__":
    # python -m bench.steps KIND RATE [SECONDS [PROFILE_FILE]]
    args = sys.argv[1:] + [""] * (4 - len(sys.argv[1:]))
    profile_arg = Path(args[3]).absolute() if args[3] else None
    summary = asyncio.run(_main(args[0], float(args[1]), float(args[2] or 5), profile_arg))
    print(json.dumps(summary, indent=2))
