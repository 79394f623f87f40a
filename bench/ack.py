"""ack_p99_ms_at_200rps, ack_p50_ms_at_200rps and ack_p50_ratio_vs_baseline.

Measured: Slack's view of a click. `bench.loadgen`, in its own process, POSTs the signed
`block_actions` body of an Approve click to `/slack/events` of `countersign serve --workers 1`
(its own process: Bolt app, HTTP API, one in-process resume worker, sweeper and outbox) at a
fixed 200 clicks/s for 5 s, open loop, latency counted from when each click was due. Every
click targets its own pending request (1,100 created beforehand, each posted in the
stand-in), so every one goes through Bolt's signature check, the reviewer rules (a user
group, cached) and the Lua compare-and-set before the ack. The first 100 are warm-up.

Baseline: the same load, clicks of the same shape and size on their own copies of the same
kind of requests, against `bench.bare_server`: aiohttp, HMAC check, one DECIDE Lua call, 200.

For context (no goal): the same load against `serve --workers 0` with the resume worker in a
separate `countersign worker` process, which shows how much of the ack latency is the
in-process worker's resumes competing for the server's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_host.approvals import ApprovalRequest

from . import loadgen
from .common import (
    Figure,
    clone_paused,
    dedicated_redis,
    ms,
    percentile,
    refund_paused,
    summary,
)
from .stack import (
    SECRET,
    bare_server,
    decided_count,
    prepare_clicks,
    resume_streams,
    serve_process,
    standin,
    wait_streams_drained,
)

__all__ = ["click_to_resume", "gc_summary", "load_details", "run"]

RATE = 200.0
SECONDS = 5
WARMUP = 100
TIMEOUT = 3.0  # Slack gives up on an ack after three seconds
CATCH_UP = 30.0  # seconds the worker gets to resume every approved run afterwards


@dataclass
class Phase:
    result: dict[str, Any]
    requests: list[ApprovalRequest]
    decided: int
    probe: dict[str, Any]
    caught_up: bool | None = None

    @property
    def latencies(self) -> list[float]:
        return [s["latency"] for s in self.result["samples"]]


async def _phase(tmp: Path, server_kind: str, profile_to: Path | None = None) -> Phase:
    """One load against a fresh server on a fresh Redis with fresh pending requests."""
    clicks = int(RATE * SECONDS)
    template = await refund_paused()
    outcomes = [clone_paused(template) for _ in range(WARMUP + clicks)]
    async with dedicated_redis(tmp, "redis") as (redis_server, redis), standin() as slack:
        requests, bodies = await prepare_clicks(redis, slack, outcomes)
        spec = {
            "url": "",
            "secret": SECRET,
            "rate": RATE,
            "warmup": bodies[:WARMUP],
            "bodies": bodies[WARMUP:],
            "timeout": TIMEOUT,
        }
        budget = 3 * SECONDS + 30
        if server_kind == "bare":
            async with bare_server(tmp / "bare", redis_server.url) as bare:
                spec["url"] = bare.events_url
                result = await loadgen.run_in_subprocess(tmp / "load", spec, budget)
            return Phase(result, requests, await decided_count(redis, requests), {})
        workers = 0 if server_kind == "serve-workers0" else 1
        async with serve_process(
            tmp / "serve", redis_server.url, slack, workers=workers, profile_to=profile_to
        ) as serve:
            await wait_streams_drained(redis)  # start entries skipped, posted requests seen
            spec["url"] = serve.events_url
            result = await loadgen.run_in_subprocess(tmp / "load", spec, budget)
            decided = await decided_count(redis, requests)
            try:
                await wait_streams_drained(redis, CATCH_UP, streams=resume_streams())
                caught_up = True
            except RuntimeError:
                caught_up = False
        return Phase(result, requests, decided, serve.probe, caught_up)


def load_details(result: dict[str, Any]) -> dict[str, Any]:
    samples = result["samples"]
    lags = [s["lag"] for s in samples]
    return {
        **summary([s["latency"] for s in samples]),
        "non_200": sum(1 for s in samples if s["status"] != 200),
        "errors": sorted({s["error"] for s in samples if s["error"]})[:3],
        "generator_lag_p50_ms": ms(percentile(lags, 50)),
        "generator_lag_p99_ms": ms(percentile(lags, 99)),
        "connections": result["connections"],
    }


def gc_summary(probe: dict[str, Any], key: str = "gc") -> dict[str, Any]:
    """Garbage-collector passes in a server process over its whole life."""
    passes = probe.get(key, [])
    full = [seconds for generation, seconds in passes if generation == 2]
    return {
        "passes": len(passes),
        "gen2_passes": len(full),
        "gen2_max_ms": ms(max(full)) if full else 0.0,
        "max_ms": ms(max((s for _, s in passes), default=0.0)),
    }


def click_to_resume(
    result: dict[str, Any], run_ids: list[str], probe: dict[str, Any]
) -> list[float]:
    """Seconds from each click's ack (load generator's clock) to its tool starting (the
    server's clock; both time.time() on this machine)."""
    started = probe.get("started", {})
    return [
        started[run_ids[s["i"]]] - s["done_wall"]
        for s in result["samples"]
        if s["status"] == 200 and run_ids[s["i"]] in started
    ]


def _serve_details(phase: Phase) -> dict[str, Any]:
    run_ids = [r.run_id for r in phase.requests[WARMUP:]]
    resumed = click_to_resume(phase.result, run_ids, phase.probe)
    return {
        "ack": load_details(phase.result),
        "decided": phase.decided - WARMUP,
        "gc": gc_summary(phase.probe),
        "click_to_resume_under_load": summary(resumed) if resumed else {"n": 0},
        "worker_caught_up_within_s": CATCH_UP if phase.caught_up else None,
    }


def _decided_note(phase: Phase) -> str:
    """Empty when every click decided its request, as it must for the figure to count."""
    clicks = int(RATE * SECONDS)
    decided = phase.decided - WARMUP
    return "" if decided == clicks else f"only {decided} of {clicks} clicks decided a request"


async def run(tmp: Path, profile_to: Path | None = None) -> list[Figure]:
    bare = await _phase(tmp / "bare", "bare")
    serve = await _phase(tmp / "serve", "serve", profile_to)
    split = None if profile_to else await _phase(tmp / "split", "serve-workers0")

    p50, p99 = percentile(serve.latencies, 50), percentile(serve.latencies, 99)
    b50, b99 = percentile(bare.latencies, 50), percentile(bare.latencies, 99)
    details = {
        "rate_per_s": RATE,
        "seconds": SECONDS,
        "clicks": int(RATE * SECONDS),
        "serve_workers1": _serve_details(serve),
        "bare": {**load_details(bare.result), "decided": bare.decided - WARMUP},
        "profiled": profile_to is not None,
    }
    label = "bare aiohttp: HMAC + 1 DECIDE EVALSHA, same load"
    note = _decided_note(serve) or _decided_note(bare)
    figures = [
        Figure("ack_p99_ms_at_200rps", ms(p99), "ms", ms(b99), label, "<= 10", details, note),
        Figure("ack_p50_ms_at_200rps", ms(p50), "ms", ms(b50), label, "", {}, note),
        Figure(
            "ack_p50_ratio_vs_baseline",
            round(p50 / b50, 2),
            "x",
            1.0,
            "bare handler = 1",
            "<= 2",
            {"serve_p50_ms": ms(p50), "bare_p50_ms": ms(b50)},
            note,
        ),
    ]
    if split is not None:
        figures.append(
            Figure(
                "ack_p99_ms_at_200rps_worker_in_own_process",
                ms(percentile(split.latencies, 99)),
                "ms",
                ms(b99),
                label + " (context: serve --workers 0 + countersign worker)",
                "",
                {**_serve_details(split), "worker_gc": gc_summary(split.probe, "worker_gc")},
                _decided_note(split),
            )
        )
    return figures
