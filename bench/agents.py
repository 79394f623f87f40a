"""The built-in example agents, unchanged, with the refund's start time recorded.

`issue_refund`'s first statement is ``effects.record("refund", ...)``, so the wall clock
noted there is the moment the resumed tool starts. A server started with
``COUNTERSIGN_AGENTS=bench.agents:registry`` imports this module; with ``BENCH_PROBE_FILE``
set it also notes the duration of every garbage-collector pass, and writes both to that
file (JSON) when the process exits, so the bench can read them from outside.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import time
from typing import Any

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import AgentRegistry

__all__ = ["STARTED", "TimedEffects", "registry"]

PROBE_ENV = "BENCH_PROBE_FILE"
STARTED: dict[str, float] = {}  # run id -> time.time() when issue_refund started
GC_PAUSES: list[tuple[int, float]] = []  # (generation, seconds) of each collection
_gc_started = [0.0]


class TimedEffects(ExampleEffects):
    def record(self, kind: str, **details: Any) -> None:
        if kind == "refund":
            STARTED.setdefault(str(details["key"]).split(":", 1)[0], time.time())
        super().record(kind, **details)


def registry() -> AgentRegistry:
    return build_registry(TimedEffects())


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        GC_PAUSES.append((int(info["generation"]), time.perf_counter() - _gc_started[0]))


def _write_probe(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"started": STARTED, "gc": GC_PAUSES}, f)


if os.environ.get(PROBE_ENV):
    gc.callbacks.append(_on_gc)
    atexit.register(_write_probe, os.environ[PROBE_ENV])
