"""The execution ledger: each call marked started before it runs and finished after.

A claim on a call that already finished returns its result (and whether the tool returned
it or raised) instead of running it again; a claim on a call that started but never
finished (its worker died mid-call) is in doubt and is reported, not re-run, unless the
tool is idempotent. The Redis ledger lives in `agent_host.durable.redis_ledger`; this
in-memory one serves the pure core and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from agent_host.runtime.checkpoint import CallRecord, RunState

__all__ = [
    "UNKNOWN_OUTCOME",
    "Claim",
    "ExecutionLedger",
    "Finished",
    "InMemoryLedger",
    "hosted_entry",
    "with_recorded",
]

UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: the worker running it stopped before recording a "
    "result. It was not run again; check its effect before retrying."
)


Finished = Literal["executed", "error"]  # the tool returned its result, or raised


@dataclass(frozen=True)
class Claim:
    status: Literal["claimed", "finished", "in_doubt"]
    result: str | None = None
    outcome: Finished = "executed"  # (of a finished call) how it ended


class ExecutionLedger(Protocol):
    async def claim(self, run_id: str, call_id: str) -> Claim: ...

    async def finish(
        self, run_id: str, call_id: str, result: str, outcome: Finished = "executed"
    ) -> None: ...


class InMemoryLedger:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str | None] = {}
        self.raised: set[tuple[str, str]] = set()  # finished calls whose tool raised

    async def claim(self, run_id: str, call_id: str) -> Claim:
        key = (run_id, call_id)
        if key not in self.entries:
            self.entries[key] = None
            return Claim("claimed")
        result = self.entries[key]
        if result is None:
            return Claim("in_doubt")
        return Claim("finished", result, "error" if key in self.raised else "executed")

    async def finish(
        self, run_id: str, call_id: str, result: str, outcome: Finished = "executed"
    ) -> None:
        self.entries[(run_id, call_id)] = result
        if outcome == "error":
            self.raised.add((run_id, call_id))


def with_recorded(state: RunState, recorded: Mapping[str, Claim]) -> RunState:
    """A copy of `state` with what the ledger recorded of its calls that have no outcome
    yet: one that finished was executed (with its result) or failed (with its error), one
    that started and never finished has an unknown outcome (a tool's question still
    waiting for its answer stays as it is). What a run that stops early did is then in its
    final state."""
    state = state.model_copy(deep=True)
    for record in state.calls:
        claim = recorded.get(record.call_id) or recorded.get(hosted_entry(record))
        if record.outcome is not None or claim is None:
            continue
        if claim.status == "finished":
            record.outcome, record.result = claim.outcome, claim.result
        elif record.gate != "question":  # (a tool that asked keeps its claim: not in doubt)
            record.outcome, record.result = "unknown_outcome", UNKNOWN_OUTCOME
    return state


def hosted_entry(record: CallRecord) -> str:
    """The ledger's key for a hosted agent's call: its id and the call it is, so that a
    call the framework plans anew under the same id after a crash is judged anew."""
    return f"{record.call_id}#{record.call_hash[:16]}"
