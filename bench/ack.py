"""The click figures: CPU per approval cycle, the ack's latency at 100 and 200 clicks/s, and
the highest rate one `serve` core sustains, each beside the bare handler in the same run.

Measured: Slack's view of a click. `bench.loadgen`, in its own process, POSTs the signed
`block_actions` body of an Approve click to `/slack/events` of `countersign serve --workers 1`
(its own process: Bolt app, HTTP API, one in-process resume worker, sweeper and outbox) at a
fixed rate, open loop, latency counted from when each click was due. Every click targets
its own pending request, so every one goes through the signature check, the reviewer rules
(a user group, cached) and the Lua compare-and-set before the ack, and then through the
rest of its approval cycle (see `bench.steps`).

The ladder: fixed rates (`RATES`) one after the other, each a fresh `bench.steps` step, for
`serve` and for the bare handler. Every rate up to 200/s is always measured (the 100/s and
200/s figures come from those steps); above it the ladder stops at the first rate that
fails. A rate passes when the ack p99 is at or under 10 ms, every click got a 200 and
decided its request, and (serve) every decided run completed its cycle.

Baseline: `bench.bare_server`: aiohttp, HMAC check, one DECIDE Lua call, 200, under the
same load on its own copies of the same kind of requests.

For context (no goal): the 200/s load against `serve --workers 0` with the resume worker in
a separate `countersign worker` process; and at 100/s the components' floor of a cycle
(`bench.floor_server`): a cycle's Redis round trips and Web API calls through Bolt,
redis-py and slack_sdk, with none of countersign's own work, beside `serve`'s cycle. And
the floor's own ladder, with one Redis round trip (the compare-and-set) and the two Web API
calls: the highest rate a server built on these libraries reaches when it does a whole
cycle in one process, which bounds what `max_clicks_per_s_ack_p99_under_10ms` can reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import Figure, ms, percentile, summary
from .report import before_value
from .steps import P99_LIMIT_MS, Step, run_step

__all__ = ["RATES", "click_to_resume", "gc_summary", "load_details", "run"]

RATES = (25, 50, 100, 150, 200, 300, 400, 600, 800, 1200)
ALWAYS_UP_TO = 200  # every rate up to this one is measured, pass or fail
CPU_RATE = 100  # the rate cpu_ms_per_approval_cycle is read at
LABEL = "bare aiohttp: HMAC + 1 DECIDE EVALSHA, same load"
FLOOR_ROUND_TRIPS = 14  # a cycle's Redis round trips in `serve`, counted per call
FLOOR_LADDER = "floor:1"  # the least a cycle can be: the compare-and-set and 2 Web API calls
FLOOR_LADDER_FROM = 100  # its ladder starts here (a rate every server here sustains)


def seconds_at(rate: float) -> float:
    """5 s per rate up to 200/s (1,000 clicks at 200/s, as before); 3 s above."""
    return 5.0 if rate <= 200 else 3.0


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


async def ladder(tmp: Path, kind: str, rates: tuple[int, ...] = RATES) -> list[Step]:
    steps: list[Step] = []
    for rate in rates:
        step = await run_step(tmp / f"{kind}-{rate}", kind, rate, seconds_at(rate))
        steps.append(step)
        if rate >= ALWAYS_UP_TO and not step.passed:
            break
    return steps


def max_rate(steps: list[Step]) -> float:
    """The highest rate that passed with every lower rate passed too (0: none did)."""
    best = 0.0
    for step in steps:
        if not step.passed:
            break
        best = step.rate
    return best


def _at(steps: list[Step], rate: float) -> Step:
    return next(s for s in steps if s.rate == rate)


def _step_details(step: Step) -> dict[str, Any]:
    details = step.summary()
    if step.cycles is not None:
        details["gc"] = gc_summary(step.probe)
        resumed = click_to_resume(step.result, step.run_ids, step.probe)
        details["click_to_resume_under_load"] = summary(resumed) if resumed else {"n": 0}
    return details


def _note(*steps: Step) -> str:
    """Why a figure should not be trusted, if so: clicks that did not decide or complete."""
    for step in steps:
        if step.decided != step.clicks:
            return f"{step.kind}: only {step.decided} of {step.clicks} clicks decided a request"
        if not step.resumed_all:
            return f"{step.kind}: {step.cycles} of {step.decided} decided runs completed"
    return ""


def _ratio(value: float, base: float) -> float:
    return round(value / base, 2) if base else float("nan")


async def run(tmp: Path, profile_to: Path | None = None) -> list[Figure]:
    if profile_to is not None:  # where the time goes in serve, at 200/s
        step = await run_step(tmp / "profiled", "serve", 200, seconds_at(200), profile_to)
        return [
            Figure("ack_p99_ms_at_200rps", step.p99_ms, "ms", note="under cProfile"),
            Figure("ack_p50_ms_at_200rps", step.p50_ms, "ms", note="under cProfile"),
            Figure("cpu_ms_per_approval_cycle_at_200rps", step.cpu_ms_per_cycle, "ms"),
        ]
    bare = await ladder(tmp, "bare")
    serve = await ladder(tmp, "serve")
    split = await run_step(tmp / "split", "serve-workers0", 200, seconds_at(200))
    kind = f"floor:{FLOOR_ROUND_TRIPS}"
    floor = await run_step(tmp / "floor", kind, CPU_RATE, seconds_at(CPU_RATE))
    floor_rates = tuple(r for r in RATES if r >= FLOOR_LADDER_FROM)
    floor_ladder = await ladder(tmp / "floor-ladder", FLOOR_LADDER, floor_rates)
    return figures(bare, serve, split, floor, floor_ladder)


def figures(
    bare: list[Step],
    serve: list[Step],
    split: Step | None,
    floor: Step | None = None,
    floor_ladder: list[Step] | None = None,
) -> list[Figure]:
    ladders = {
        "rates": list(RATES),
        "p99_limit_ms": P99_LIMIT_MS,
        "serve": [_step_details(s) for s in serve],
        "bare": [_step_details(s) for s in bare],
    }
    s100, b100 = _at(serve, 100), _at(bare, 100)
    s200, b200 = _at(serve, 200), _at(bare, 200)
    scpu, bcpu = _at(serve, CPU_RATE), _at(bare, CPU_RATE)
    today = before_value("cpu_ms_per_approval_cycle")
    cpu_goal = f"<= {round(today / 3, 3)}" if today else ""
    top_serve, top_bare = max_rate(serve), max_rate(bare)
    out = [
        Figure(
            "cpu_ms_per_approval_cycle",
            scpu.cpu_ms_per_cycle,
            "ms",
            bcpu.cpu_ms_per_cycle,
            f"bare handler's CPU per click at {CPU_RATE}/s (the ack alone)",
            cpu_goal,
            {
                "rate_per_s": CPU_RATE,
                "goal": "a third of the figure before the approval-cycle work" if today else "",
                "before_issue_13": today,
                "by_rate_ms": {s.rate: s.cpu_ms_per_cycle for s in serve},
                "bare_by_rate_ms": {s.rate: s.cpu_ms_per_cycle for s in bare},
            },
            _note(scpu),
        ),
        Figure("ack_p99_ms_at_100rps", s100.p99_ms, "ms", b100.p99_ms, LABEL, "", {}, _note(s100)),
        Figure(
            "ack_p50_ratio_vs_baseline_at_100rps",
            _ratio(s100.p50_ms, b100.p50_ms),
            "x",
            1.0,
            "bare handler = 1",
            "<= 1.5",
            {"serve_p50_ms": s100.p50_ms, "bare_p50_ms": b100.p50_ms},
            _note(s100),
        ),
        Figure(
            "ack_p99_ratio_vs_baseline_at_100rps",
            _ratio(s100.p99_ms, b100.p99_ms),
            "x",
            1.0,
            "bare handler = 1",
            "<= 2",
            {"serve_p99_ms": s100.p99_ms, "bare_p99_ms": b100.p99_ms},
            _note(s100),
        ),
        Figure(
            "ack_p99_ms_at_200rps",
            s200.p99_ms,
            "ms",
            b200.p99_ms,
            LABEL,
            "<= 10",
            ladders,
            _note(s200, b200),
        ),
        Figure("ack_p50_ms_at_200rps", s200.p50_ms, "ms", b200.p50_ms, LABEL, "", {}, _note(s200)),
        Figure(
            "ack_p50_ratio_vs_baseline",
            _ratio(s200.p50_ms, b200.p50_ms),
            "x",
            1.0,
            "bare handler = 1 (at 200/s)",
            "<= 2",
            {"serve_p50_ms": s200.p50_ms, "bare_p50_ms": b200.p50_ms},
            _note(s200),
        ),
        Figure(
            "max_clicks_per_s_ack_p99_under_10ms",
            top_serve,
            "/s",
            top_bare,
            "bare handler's highest rate, same ladder",
            "",
            {
                "rates_tried_serve": [s.rate for s in serve],
                "rates_tried_bare": [s.rate for s in bare],
                "passed_serve": [s.rate for s in serve if s.passed],
                "passed_bare": [s.rate for s in bare if s.passed],
            },
        ),
        Figure(
            "max_clicks_per_s_ratio_vs_baseline",
            _ratio(top_serve, top_bare),
            "x",
            1.0,
            "bare handler = 1",
            ">= 0.5",
        ),
    ]
    if split is not None:
        out.append(
            Figure(
                "ack_p99_ms_at_200rps_worker_in_own_process",
                split.p99_ms,
                "ms",
                b200.p99_ms,
                LABEL + " (context: serve --workers 0 + countersign worker)",
                "",
                {
                    **_step_details(split),
                    "worker_gc": gc_summary(split.probe, "worker_gc"),
                },
                _note(split),
            )
        )
    if floor is not None:
        out.append(
            Figure(
                "cpu_ms_per_cycle_components_floor",
                floor.cpu_ms_per_cycle,
                "ms",
                scpu.cpu_ms_per_cycle,
                f"countersign's approval cycle at {CPU_RATE}/s, same run (context: the floor"
                f" is {FLOOR_ROUND_TRIPS} Redis round trips and 2 Web API calls through Bolt,"
                " redis-py and slack_sdk, with none of countersign's own work)",
                "",
                floor.summary(),
                _note(floor),
            )
        )
    if floor_ladder:
        top_floor = max_rate(floor_ladder)
        out.append(
            Figure(
                "max_clicks_per_s_components_floor",
                top_floor,
                "/s",
                top_bare,
                "bare handler's highest rate, same ladder (context: the floor with 1 Redis"
                " round trip, the compare-and-set, and a cycle's 2 Web API calls through Bolt"
                " and slack_sdk, none of countersign's own work: what any server built on"
                " these libraries reaches doing a whole cycle in one process)",
                "",
                {
                    "ratio_vs_baseline": _ratio(top_floor, top_bare),
                    "rates_tried": [s.rate for s in floor_ladder],
                    "passed": [s.rate for s in floor_ladder if s.passed],
                    "steps": [s.summary() for s in floor_ladder],
                },
            )
        )
    return out
