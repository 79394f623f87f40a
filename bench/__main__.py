"""`make bench`: every figure measured in one run beside its baseline.

    python -m bench                  # all figures -> bench/results.json, bench/results.md
    python -m bench --only ack       # some of them (repeatable); results files not written
    python -m bench --profile-ack    # the 200/s click load on `countersign serve` under cProfile
                                     # -> bench/ack_profile.txt (latencies not comparable)

Each module starts its own Redis server(s) in a temporary directory, uses 127.0.0.1 only,
and is bounded in time; everything it started is stopped when it returns or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent_host.durable.redis_server import find_executable

from . import ack, burst, click_resume, memory, pause, pending_list, report, resume
from .common import CpuMeter, Figure

HERE = Path(__file__).resolve().parent
Module = Callable[[Path], Awaitable[list[Figure]]]
# name -> (run, seconds it may take at most)
MODULES: dict[str, tuple[Module, float]] = {
    "pause": (pause.run, 60),
    "resume": (resume.run, 60),
    "memory": (memory.run, 60),
    "pending_list": (pending_list.run, 90),
    "ack": (ack.run, 600),
    "click_resume": (click_resume.run, 60),
    "burst": (burst.run, 90),
}


async def measure(
    names: list[str], tmp: Path
) -> tuple[list[Figure], dict[str, Any], dict[str, str]]:
    figures: list[Figure] = []
    errors: dict[str, str] = {}
    conditions: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "redis": _redis_version(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    for name in names:
        run, budget = MODULES[name]
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        meter = CpuMeter()
        try:
            figures += await asyncio.wait_for(run(tmp / name), budget)
        except Exception as exc:  # one broken figure must not hide the others
            logging.getLogger("bench").exception("%s failed", name)
            errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        conditions[name] = meter.report()
    return figures, conditions, errors


async def profile_ack(tmp: Path) -> str:
    stats_path = tmp / "serve.prof"
    figures = await ack.run(tmp / "ack", profile_to=stats_path)
    out = io.StringIO()
    for figure in figures:
        out.write(f"{figure.name}: {figure.value} {figure.unit} (under cProfile)\n")
    stats = pstats.Stats(str(stats_path), stream=out)
    stats.strip_dirs()
    for order in ("tottime", "cumulative"):
        out.write(f"\n== countersign serve during the 200/s ack load, by {order} ==\n")
        stats.sort_stats(order).print_stats(45)
    return out.getvalue()


def _redis_version() -> str:
    done = subprocess.run(
        [find_executable(), "--version"], capture_output=True, text=True, check=False, timeout=10
    )
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", action="append", choices=list(MODULES), default=None)
    parser.add_argument("--profile-ack", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")

    with tempfile.TemporaryDirectory(prefix="countersign-bench-") as tmp:
        if args.profile_ack:
            text = asyncio.run(profile_ack(Path(tmp)))
            (HERE / "ack_profile.txt").write_text(text)
            print(text)
            return 0
        names = args.only or list(MODULES)
        figures, conditions, errors = asyncio.run(measure(names, Path(tmp)))

    if args.only:
        text = report.markdown(figures, conditions, errors)
    else:
        text = report.write(HERE, figures, conditions, errors)
    print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
