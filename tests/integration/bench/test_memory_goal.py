"""Redis memory per pending approval, measured as `make bench` measures it: at most twice
the bytes of information it holds."""

from __future__ import annotations

from pathlib import Path

from bench import memory


async def test_redis_bytes_per_pending_is_at_most_twice_the_information(tmp_path: Path) -> None:
    per_pending, ratio = await memory.run(tmp_path)
    assert ratio.value is not None and ratio.value <= 2, per_pending.details
