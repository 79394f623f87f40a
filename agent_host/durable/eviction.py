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

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["EVICTION_SETTINGS", "KEEPS_EVERY_KEY", "Eviction", "eviction_problem"]

KEEPS_EVERY_KEY = "noeviction"
EVICTION_SETTINGS = ("maxmemory", "maxmemory-policy")


@dataclass(frozen=True)
class Eviction:
    policy: str  # maxmemory-policy
    limit: int  # maxmemory, in bytes; 0: none (Redis then never evicts)

    @classmethod
    def of(cls, config: Mapping[str, str]) -> Eviction | None:
        """As a server's CONFIG GET answered (`config`); None when it did not say."""
        try:
            return cls(config["maxmemory-policy"], int(config["maxmemory"]))
        except (KeyError, ValueError):
            return None

    def drops_any_key(self) -> bool:
        return self.limit > 0 and self.policy.startswith("allkeys-")


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
