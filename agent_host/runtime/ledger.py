"""The execution ledger: each call marked started before it runs and finished after.

A claim on a call that already finished returns its result instead of running it again; a
claim on a call that started but never finished (its worker died mid-call) is in doubt and
is reported, not re-run, unless the tool is idempotent. The Redis ledger lives in
`agent_host.durable.store`; this in-memory one serves the pure core and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["Claim", "ExecutionLedger", "InMemoryLedger"]


@dataclass(frozen=True)
class Claim:
    status: Literal["claimed", "finished", "in_doubt"]
    result: str | None = None


class ExecutionLedger(Protocol):
    async def claim(self, run_id: str, call_id: str) -> Claim: ...

    async def finish(self, run_id: str, call_id: str, result: str) -> None: ...


class InMemoryLedger:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str | None] = {}

    async def claim(self, run_id: str, call_id: str) -> Claim:
        key = (run_id, call_id)
        if key not in self.entries:
            self.entries[key] = None
            return Claim("claimed")
        result = self.entries[key]
        return Claim("in_doubt") if result is None else Claim("finished", result)

    async def finish(self, run_id: str, call_id: str, result: str) -> None:
        self.entries[(run_id, call_id)] = result
