"""Two versions of countersign measured at once: a change of a few percent told apart from
the machine's changing speed.

    git worktree add /tmp/base main          # the version to compare against
    python -m bench.pairs /tmp/base 25 8 6   # 6 pairs of `bench.steps serve 25` for 8 s

Each pair runs one step of the click ladder (`bench.steps`) against this tree and one
against the other tree *at the same time*, each with its own Redis, stand-in and server.
This machine's speed varies by tens of percent from one minute to the next, which hides a
change of a few percent between steps run one after the other; run together, both steps
meet the same speed. The rate must leave the two cores room for both stacks (25/s does).
Prints each pair's CPU per approval cycle and ack p50, then the mean difference and in how
many pairs this tree was lower. Nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


async def _step(tree: Path, rate: float, seconds: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.steps",
        "serve",
        str(rate),
        str(seconds),
        cwd=tree,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.steps in {tree} exited {proc.returncode}")
    summary: dict[str, Any] = json.loads(out)
    if not summary.get("caught_up"):
        raise RuntimeError(f"the step in {tree} did not complete every cycle: {summary}")
    return summary


async def pairs(other: Path, rate: float, seconds: float, count: int) -> list[tuple[float, float]]:
    """(this tree's, the other's) CPU ms per cycle, for `count` concurrent pairs."""
    results = []
    for n in range(1, count + 1):
        mine, theirs = await asyncio.gather(_step(HERE, rate, seconds), _step(other, rate, seconds))
        results.append((mine["cpu_ms_per_cycle"], theirs["cpu_ms_per_cycle"]))
        print(
            f"pair {n}: this {mine['cpu_ms_per_cycle']} ms/cycle (ack p50 {mine['ack_p50_ms']}"
            f" ms), other {theirs['cpu_ms_per_cycle']} ms/cycle (ack p50"
            f" {theirs['ack_p50_ms']} ms)",
            flush=True,
        )
    return results


def verdict(results: list[tuple[float, float]]) -> str:
    """The mean difference, relative to the other tree, and how many pairs were lower."""
    mine = statistics.fmean(m for m, _ in results)
    theirs = statistics.fmean(t for _, t in results)
    lower = sum(1 for m, t in results if m < t)
    change = (mine - theirs) / theirs * 100
    return (
        f"this tree {mine:.2f} ms/cycle against {theirs:.2f} ms ({change:+.1f}%), "
        f"lower in {lower} of {len(results)} pairs"
    )


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: python -m bench.pairs OTHER_TREE RATE SECONDS PAIRS")
    tree = Path(sys.argv[1])
    rate, secs, count = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    if not (tree / "bench" / "steps.py").is_file():
        sys.exit(f"{tree} is not a countersign tree (no bench/steps.py): give a git worktree")
    print(verdict(asyncio.run(pairs(tree.resolve(), rate, secs, count))))
