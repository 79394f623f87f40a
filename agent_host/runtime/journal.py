"""The turn journal: each model response is saved before any call in it runs.

A model asked the same question twice may answer differently (fresh call ids, other
calls), so a run handed to a second worker after a crash must not ask again: it continues
from the saved response, and the execution ledger keeps each of its calls at most once.
The runner calls `planned` after every model response is recorded in the run state and
before any call of it executes. The Redis journal lives in `agent_host.durable.progress`;
`NO_JOURNAL` serves the pure core and the tests that need no crash safety.
"""

from __future__ import annotations

from typing import Protocol

from agent_host.errors import RunMovedOn
from agent_host.runtime.checkpoint import RunState

__all__ = ["NO_JOURNAL", "NoJournal", "RunMovedOn", "TurnJournal"]


class TurnJournal(Protocol):
    async def planned(self, state: RunState) -> RunState:
        """Save the run right after a model response; return the state to continue from.

        That is `state` itself, or the state another worker saved first for this turn (its
        response wins, so one turn never has two sets of calls). Raise RunMovedOn when the
        run is no longer this worker's to advance.
        """
        ...


class NoJournal:
    async def planned(self, state: RunState) -> RunState:
        return state


NO_JOURNAL = NoJournal()
