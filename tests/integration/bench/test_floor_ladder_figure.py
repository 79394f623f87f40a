"""`max_clicks_per_s_components_floor` is the floor ladder's highest rate with every lower
rate passed too, beside the bare handler's: a floor step that failed is never counted, nor
any rate above it, so the bound it sets on `serve` is never looser than measured."""

from __future__ import annotations

from typing import Any

from bench.ack import figures
from bench.steps import Step


def _step(kind: str, rate: float, latency_ms: float, cycles: int | None = 2) -> Step:
    samples = [
        {"i": i, "latency": latency_ms / 1000, "status": 200, "error": None, "lag": 0.0}
        for i in range(2)
    ]
    result: dict[str, Any] = {"samples": samples}
    run_ids = ["run-0", "run-1"]
    return Step(kind, rate, 1.0, result, 2, cycles, 0.01, 1.0, True, {}, {}, run_ids)


def _ladder(kind: str, p99s: dict[float, float], cycles: int | None = 2) -> list[Step]:
    return [_step(kind, rate, ms, cycles) for rate, ms in p99s.items()]


def _figure(floor_p99s: dict[float, float]) -> dict[str, Any]:
    rates = {25: 2.0, 50: 2.0, 100: 2.0, 150: 2.0, 200: 2.0}
    bare = _ladder("bare", {**rates, 300: 2.0, 400: 2.0, 600: 2.0, 800: 30.0}, None)
    serve = _ladder("serve", {**rates, 300: 40.0})
    floor_ladder = _ladder("floor:1", floor_p99s)
    (figure,) = [
        f
        for f in figures(bare, serve, None, None, floor_ladder)
        if f.name == "max_clicks_per_s_components_floor"
    ]
    return {"value": figure.value, "baseline": figure.baseline, **figure.details}


def test_the_floor_s_highest_rate_is_read_beside_the_bare_handler_s() -> None:
    said = _figure({100: 2.0, 150: 3.0, 200: 4.0, 300: 9.9, 400: 25.0})
    assert (said["value"], said["baseline"]) == (300, 600)
    assert said["ratio_vs_baseline"] == 0.5
    assert said["passed"] == [100, 150, 200, 300]


def test_a_rate_above_a_failed_one_is_not_the_floor_s_highest() -> None:
    said = _figure({100: 2.0, 150: 12.0, 200: 4.0, 300: 5.0, 400: 25.0})
    assert said["value"] == 100
    assert said["ratio_vs_baseline"] == round(100 / 600, 2)
