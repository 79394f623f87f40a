"""Redis's eviction policy. With a memory limit (`maxmemory`) and an `allkeys-*` policy, a
Redis whose memory is full drops any key to make room: a waiting run's checkpoint, a
request, a decision, or the ledger entry that keeps a tool call to one run. countersign
needs Redis to refuse the write instead: a refused write is retried, and said. A
`volatile-*` policy drops only keys with an expiry, and countersign's are the replay
guard's, the entries' error counts and the App Home's notes: no run is lost, but a signed
Slack request whose guard was dropped could be taken again within its five minutes (a
replayed `/approvals route add` among them), and an entry that fails every time would not
be given up. So only `noeviction` keeps what countersign needs.

`countersign check` fails on any other policy under a limit; `serve` and `worker` say it at
start. (On a Redis Cluster, the node the client asks is the one read.) `check` also says
how much of the limit is in use, and fails when Redis is full: it then refuses every write
countersign makes (a decision, a new request, a resume) until an operator makes room.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from agent_host.durable.keys import PREFIX as KEY_PREFIX

__all__ = [
    "EVICTION_SETTINGS",
    "KEEPS_EVERY_KEY",
    "MAKE_ROOM",
    "Eviction",
    "eviction_problem",
    "memory_in_use",
]

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

    def drops_keys(self) -> bool:
        """Whether Redis, its memory full, drops keys (any, or those with an expiry)."""
        return self.limit > 0 and self.policy != KEEPS_EVERY_KEY


NEARLY_FULL = 0.9  # of maxmemory in use: said, so that room is made before writes are refused
# What an operator of a full Redis may do; countersign's keys are the waiting runs, the
# decisions and the ledger that keeps each tool call to one run, none of them to delete.
MAKE_ROOM = (
    f"raise Redis's maxmemory, or delete other applications' keys (never countersign's "
    f"{KEY_PREFIX}:* keys: waiting runs, decisions and the ledger)"
)


def memory_in_use(used: int, eviction: Eviction | None) -> tuple[str, bool]:
    """Redis's memory counted against its maxmemory, in words, and whether it is full: at
    its limit under a policy that refuses writes once nothing is left it may drop (not
    `allkeys-*`, which drops any key instead: a problem of its own, the eviction line's)."""
    if eviction is None or eviction.limit == 0:
        limit = "no maxmemory" if eviction is not None else "maxmemory not read"
        return f"{_size(used)} in use ({limit})", False
    share = used / eviction.limit
    percent = math.floor(share * 100)  # (never "100%" short of full)
    said = f"{_size(used)} in use of a {_size(eviction.limit)} maxmemory ({percent}%)"
    if eviction.drops_any_key():
        return said, False
    if used > eviction.limit:  # (Redis refuses a write only once over its limit)
        return (
            f"Redis is full: {said}, so it refuses every write countersign makes (decisions, "
            f"new requests, resumes); {MAKE_ROOM}"
        ), True
    if share >= NEARLY_FULL:
        return f"{said}: make room before it is full, when Redis refuses writes", False
    return said, False


def _size(size: int) -> str:
    """In Redis's own units (1kb = 1024 bytes)."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} byte{'' if size == 1 else 's'}"


def eviction_problem(eviction: Eviction | None) -> str | None:
    """What `eviction` can lose, and what to set instead; None when it drops nothing (or
    was not read)."""
    if eviction is None or not eviction.drops_keys():
        return None
    if eviction.drops_any_key():
        lost = (
            "any key, waiting runs, decisions and the ledger that keeps each tool call to one "
            "run among them"
        )
    else:
        lost = (
            "keys with an expiry, the replay guard's among them, so a signed Slack request "
            "(a decision, an /approvals route change) could be taken twice"
        )
    return (
        f"Redis's maxmemory-policy is {eviction.policy} under a maxmemory of "
        f"{eviction.limit} bytes: when its memory is full it drops {lost} to make room; set "
        f"maxmemory-policy {KEEPS_EVERY_KEY}, so that Redis refuses writes instead "
        "(countersign retries them, and says so)"
    )
