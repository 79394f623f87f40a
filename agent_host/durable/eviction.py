"""Redis's eviction policy. With a memory limit (`maxmemory`) and an `allkeys-*` policy, a
Redis whose memory is full drops any key to make room: a waiting run's checkpoint, a
request, a decision, or the ledger entry that keeps a tool call to one run. countersign
needs Redis to refuse the write instead: a refused write is retried, and said. A
`volatile-*` policy drops only keys with an expiry, and countersign's are only the replay
guard's, the entries' error counts and the App Home's notes, none of which loses a run.

`countersign check` fails on such a policy; `serve` and `worker` say it at start. (On a
Redis Cluster, the node the client asks is the one read.)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agent_host.durable.memory_advice import ASK_WITHIN

__all__ = ["KEEPS_EVERY_KEY", "Eviction", "eviction_policy", "eviction_problem"]

KEEPS_EVERY_KEY = "noeviction"


@dataclass(frozen=True)
class Eviction:
    policy: str  # maxmemory-policy
    limit: int  # maxmemory, in bytes; 0: none (Redis then never evicts)

    def drops_any_key(self) -> bool:
        return self.limit > 0 and self.policy.startswith("allkeys-")


async def eviction_policy(redis: Any) -> Eviction | None:
    """Redis's `maxmemory-policy` and `maxmemory`, or None when they could not be read
    (CONFIG refused, as managed services may; or no answer). Never raises."""
    try:
        async with asyncio.timeout(ASK_WITHIN):
            config = await redis.config_get("maxmemory*")
        values = {_text(k): _text(v) for k, v in config.items()}
        return Eviction(values["maxmemory-policy"], int(values["maxmemory"]))
    except Exception:
        return None


def eviction_problem(eviction: Eviction | None) -> str | None:
    """What `eviction` can lose, and what to set instead; None when it loses no run (or
    was not read)."""
    if eviction is None or not eviction.drops_any_key():
        return None
    return (
        f"Redis's maxmemory-policy is {eviction.policy} under a maxmemory of "
        f"{eviction.limit} bytes: when its memory is full it drops keys to make room, waiting "
        "runs, decisions and the ledger that keeps each tool call to one run among them; set "
        f"maxmemory-policy {KEEPS_EVERY_KEY}, so that Redis refuses writes instead "
        "(countersign retries them)"
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
