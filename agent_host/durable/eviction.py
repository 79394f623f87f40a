"""Redis's eviction policy. With a memory limit (`maxmemory`) and any policy but
`noeviction`, a Redis whose memory is full drops keys to make room: a waiting run's
checkpoint, a request, a decision, or the ledger entry that keeps a tool call to one run.
countersign needs Redis to refuse the write instead: a refused write is retried, and said.

`countersign check` fails on such a policy; `serve` and `worker` say it at start.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["KEEPS_EVERY_KEY", "eviction_policy", "eviction_problem"]

KEEPS_EVERY_KEY = "noeviction"
ASK_WITHIN = 2.0  # seconds


async def eviction_policy(redis: Any) -> str | None:
    """Redis's `maxmemory-policy`, or None when it could not be read (CONFIG refused, as
    managed services may; or no answer). Never raises."""
    try:
        async with asyncio.timeout(ASK_WITHIN):
            config = await redis.config_get("maxmemory-policy")
    except Exception:
        return None
    policy = config.get("maxmemory-policy") if isinstance(config, dict) else None
    return policy.decode() if isinstance(policy, bytes) else policy or None


def eviction_problem(policy: str | None) -> str | None:
    """What `policy` can lose, and what to set instead; None when it keeps every key (or
    was not read)."""
    if policy is None or policy == KEEPS_EVERY_KEY:
        return None
    return (
        f"Redis's maxmemory-policy is {policy}: when its memory is full it drops keys to make "
        "room, waiting runs, decisions and the ledger that keeps each tool call to one run "
        f"among them; set maxmemory-policy {KEEPS_EVERY_KEY}, so that Redis refuses writes "
        "instead (countersign retries them)"
    )
