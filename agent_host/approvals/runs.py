"""A run as the store keeps it (its Redis hash), typed for everything that reads it."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RunRecord", "RunStatus"]


class RunStatus(enum.StrEnum):
    """A run's stored status. The API shows `resuming` as `running` (docs/openapi.yaml)."""

    RUNNING = "running"
    WAITING = "waiting"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED)

    @property
    def public(self) -> str:
        return RunStatus.RUNNING.value if self is RunStatus.RESUMING else self.value


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    agent: str
    input: str
    requested_by: str
    status: RunStatus
    pause_id: str
    created_at: float
    updated_at: float
    output: str = ""
    error: str = ""
    decided_at: float | None = None  # when the last decision of the current pause was made
    pause_requests: tuple[str, ...] = ()  # the request ids of the current pause
    origin: str = ""  # "external": one request of an agent that runs elsewhere, no checkpoint
    # Fields whose sealed value could not be decrypted, and why (set by the store); each
    # such field reads "[unreadable: <why>]".
    unreadable: Mapping[str, str] = field(default_factory=dict)
    # Of those, the ones sealed under a key this process's ring lacks (not damaged).
    keys_missing: frozenset[str] = frozenset()

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> RunRecord:
        return cls(
            run_id=raw["run_id"],
            agent=raw.get("agent", ""),
            input=raw.get("input", ""),
            requested_by=raw.get("requested_by", ""),
            status=RunStatus(raw.get("status") or RunStatus.RUNNING),
            pause_id=raw.get("pause_id", ""),
            created_at=float(raw.get("created_at") or 0),
            updated_at=float(raw.get("updated_at") or 0),
            output=raw.get("output", ""),
            error=raw.get("error", ""),
            decided_at=float(raw["decided_at"]) if raw.get("decided_at") else None,
            pause_requests=tuple(json.loads(raw.get("pause_requests") or "[]")),
            origin=raw.get("origin", ""),
        )
