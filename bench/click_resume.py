"""click_to_resume_p50_ms: from Slack's ack of an Approve click to the resumed tool starting.

`countersign serve --workers 1` (its own process; the worker runs in it) gets signed Approve
clicks from `bench.loadgen` at an unhurried 25/s, so each is resumed before the next arrives.
The ack time is the load generator's wall clock when the response arrived; the start time
is the wall clock `issue_refund` notes as its first statement (`bench.agents`). The tool may
start before the ack is read: the worker wakes on the XADD inside the DECIDE script while
the HTTP response is still on its way.

Baseline: the bare XADD → blocked XREADGROUP hand-off (see `bench.resume`) on the same Redis.
"""

from __future__ import annotations

from pathlib import Path

from . import loadgen
from .ack import click_to_resume, gc_summary, load_details
from .common import Figure, clone_paused, dedicated_redis, ms, percentile, refund_paused, summary
from .resume import handoff_latencies
from .stack import (
    SECRET,
    prepare_clicks,
    resume_streams,
    serve_process,
    standin,
    wait_streams_drained,
)

__all__ = ["run"]

CLICKS = 100
WARMUP = 10
RATE = 25.0


async def run(tmp: Path) -> list[Figure]:
    template = await refund_paused()
    outcomes = [clone_paused(template) for _ in range(WARMUP + CLICKS)]
    async with dedicated_redis(tmp, "click-resume") as (server, redis), standin() as slack:
        requests, bodies = await prepare_clicks(redis, slack, outcomes)
        spec = {
            "url": "",
            "secret": SECRET,
            "rate": RATE,
            "warmup": bodies[:WARMUP],
            "bodies": bodies[WARMUP:],
            "timeout": 3.0,
        }
        async with serve_process(tmp / "serve", server.url, slack) as serve:
            await wait_streams_drained(redis)
            spec["url"] = serve.events_url
            result = await loadgen.run_in_subprocess(tmp / "load", spec, CLICKS / RATE + 30)
            await wait_streams_drained(redis, 10, streams=resume_streams())
        baseline = await handoff_latencies(server.url, CLICKS)

    run_ids = [r.run_id for r in requests[WARMUP:]]
    delays = click_to_resume(result, run_ids, serve.probe)
    details = {
        "clicks": CLICKS,
        "rate_per_s": RATE,
        "resumed": len(delays),
        "click_to_resume": summary(delays),
        "started_before_ack_was_read": sum(1 for d in delays if d < 0),
        "ack": load_details(result),
        "serve_gc": gc_summary(serve.probe),
        "baseline_handoff": summary(baseline),
    }
    return [
        Figure(
            "click_to_resume_p50_ms",
            ms(percentile(delays, 50)),
            "ms",
            ms(percentile(baseline, 50)),
            "XADD → blocked XREADGROUP hand-off p50",
            "<= 5",
            details,
            "" if len(delays) == CLICKS else f"only {len(delays)} of {CLICKS} clicks resumed",
        ),
    ]
