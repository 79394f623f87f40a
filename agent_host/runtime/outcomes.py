"""What one step of a run ends in: it succeeded, it paused on calls, or it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent_host.runtime.checkpoint import CallRecord, RunState

__all__ = ["Failed", "Paused", "RunOutcome", "Succeeded"]


@dataclass(frozen=True)
class Succeeded:
    state: RunState
    output: str
    kind: Literal["succeeded"] = "succeeded"


@dataclass(frozen=True)
class Paused:
    state: RunState
    pending: list[CallRecord]
    kind: Literal["paused"] = "paused"


@dataclass(frozen=True)
class Failed:
    state: RunState
    error: str
    kind: Literal["failed"] = "failed"


RunOutcome = Succeeded | Paused | Failed
