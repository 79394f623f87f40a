"""The run checkpoint (`RunState`): everything needed to resume a run, as JSON.

No callables live in it; the agent is rebuilt from the registry by name and checked against
the fingerprint recorded here. Versions, one line each:

    1  transcript, the run's tool calls (plan, gate, decision, outcome), sticky decisions.
    2  each call also keeps the model's own id for it (`model_call_id`); `call_id` is the
       runner's. Read from v1: the model's id is the old call id.
    3  a hosted agent's run (OpenAI Agents SDK, Pydantic AI) keeps its framework's own
       serialized state (`hosted_state`) and what the model said last. Read from v2: none.
    4  a gated call lists the arguments a reviewer may edit (`editable`), and an approval
       may carry a comment and edited arguments, which the tool then runs with. Read from
       v3 as is (nothing editable, no comments). A countersign that knows only v3 refuses
       a v4 checkpoint instead of running the model's arguments in place of edited ones.

A checkpoint of an unknown or newer version is refused rather than guessed at; an older one
is migrated to the current version as it is read.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agent_host.errors import CheckpointError, UnsupportedCheckpointVersion
from agent_host.runtime.decisions import Approve, Decision
from agent_host.runtime.fingerprint import canonical_json
from agent_host.runtime.messages import Message

__all__ = [
    "CHECKPOINT_VERSIONS",
    "SCHEMA_VERSION",
    "CallRecord",
    "Outcome",
    "RunState",
    "call_hash",
]

SCHEMA_VERSION = 5
CHECKPOINT_VERSIONS = {
    1: "transcript, the run's tool calls (plan, gate, decision, outcome), sticky decisions",
    2: "each call keeps the model's id for it (model_call_id); call_id is the runner's; "
    "approvals for the run are scoped (standing), sticky keeps rejections only",
    3: "a hosted agent's run keeps its framework's serialized state (hosted_state)",
    4: "a gated call lists its editable arguments; an approval may carry a comment and "
    "edited arguments (with the edited call's hash), which the tool runs with",
    5: "an approval that completed a quorum carries the comments of the approvals before it",
}

RunStatus = Literal["running", "paused", "succeeded", "failed"]
Gate = Literal["allow", "deny", "ask", "question", "invalid"]
Outcome = Literal[
    "executed",  # the tool ran; `result` is its output
    "rejected",  # a reviewer rejected it (or asked for changes); it never ran
    "denied",  # the policy denied it; it never ran
    "expired",  # nobody decided before the deadline; it never ran
    "answered",  # a human answered the tool's question; the answer is the result
    "error",  # the tool ran and raised
    "invalid",  # the model's arguments were invalid or the tool unknown; it never ran
    "unknown_outcome",  # a worker died mid-call; not run again (the tool is not idempotent)
    "deferred",  # let through, the tool asked for a person itself: asked as a later call
]


def call_hash(agent_fingerprint: str, tool: str, arguments: Any) -> str:
    """What a reviewer approves: this tool, these arguments, this agent definition."""
    text = canonical_json({"agent": agent_fingerprint, "tool": tool, "arguments": arguments})
    return hashlib.sha256(text.encode()).hexdigest()


class CallRecord(BaseModel):
    # The runner's id: unique within the run for ever, so with the run id it keys the
    # execution ledger and the idempotency key. A model's ids can repeat; they are kept
    # only to pair results with calls in the transcript the model reads.
    call_id: str
    model_call_id: str
    tool: str
    arguments: dict[str, Any] | str
    call_hash: str
    turn: int
    gate: Gate
    reason: str = ""
    severity: str = "medium"
    allow_always: bool = True
    question: str | None = None  # set when gate == "question" (a tool-initiated pause)
    editable: list[str] = Field(default_factory=list)  # what a reviewer may edit (gate "ask")
    decision: Decision | None = None
    outcome: Outcome | None = None
    result: str | None = None
    # The reviewer's edited arguments an approved call ran with, kept when its tool then
    # asked a question (the answer takes the approval's place as its decision). Written
    # only when set: a checkpoint without it reads as before.
    edited_run: dict[str, Any] | None = Field(None, exclude_if=lambda value: value is None)

    @property
    def run_arguments(self) -> dict[str, Any] | str:
        """The arguments the tool runs with: a reviewer's edited ones, else the model's."""
        if isinstance(self.decision, Approve) and self.decision.edited_arguments is not None:
            return self.decision.edited_arguments
        return self.edited_run if self.edited_run is not None else self.arguments

    @property
    def waiting(self) -> bool:
        """Gated and not yet decided: the turn cannot proceed."""
        return self.gate in ("ask", "question") and self.decision is None and self.outcome is None


class RunState(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    agent: str
    agent_fingerprint: str
    fingerprint_parts: dict[str, Any]
    input: str
    requested_by: str | None = None
    context: dict[str, Any] = Field(default_factory=dict)
    transcript: list[Message] = Field(default_factory=list)
    calls: list[CallRecord] = Field(default_factory=list)
    # "Reject for this run", by tool. ("approve" entries of older checkpoints are ignored:
    # approvals for the run are scoped, see `standing`.)
    sticky: dict[str, Literal["approve", "reject"]] = Field(default_factory=dict)
    # "Approve for this run", by tool: the decision, stamped with the route and severity it
    # was given for; the store applies it only to later calls within that scope.
    standing: dict[str, Approve] = Field(default_factory=dict)
    # A hosted agent's run: its framework's own state (JSON), restored to resume the run.
    hosted_state: str | None = None
    turns: int = 0
    status: RunStatus = "running"
    output: str | None = None
    error: str | None = None

    @property
    def pending(self) -> list[CallRecord]:
        return [c for c in self.calls if c.waiting]

    @property
    def open_calls(self) -> list[CallRecord]:
        """Calls of the current turn not yet settled."""
        return [c for c in self.calls if c.turn == self.turns and c.outcome is None]

    def call(self, call_id: str) -> CallRecord | None:
        return next((c for c in self.calls if c.call_id == call_id), None)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> RunState:
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"checkpoint is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise CheckpointError("checkpoint must be a JSON object")
        version = raw.get("schema_version")
        if type(version) is not int or version not in CHECKPOINT_VERSIONS:
            known = ", ".join(str(v) for v in CHECKPOINT_VERSIONS)
            raise UnsupportedCheckpointVersion(
                f"checkpoint schema_version {version!r} is not one this countersign reads "
                f"(known: {known}); upgrade countersign to resume it"
            )
        for older in range(version, SCHEMA_VERSION):
            raw = _MIGRATIONS[older](raw)
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise CheckpointError(f"checkpoint does not match schema v{version}: {exc}") from exc


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v1 had one id per call, the model's: it stays the call id and the model's id."""
    calls = raw.get("calls")
    if isinstance(calls, list):
        for record in calls:
            if isinstance(record, dict) and "call_id" in record:
                record.setdefault("model_call_id", record["call_id"])
    return raw | {"schema_version": 2}


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """v3 only added a field a v2 run never had."""
    return raw | {"schema_version": 3}


def _v3_to_v4(raw: dict[str, Any]) -> dict[str, Any]:
    """v4 only added fields whose defaults say what v3 meant: nothing editable, no comment."""
    return raw | {"schema_version": 4}


def _v4_to_v5(raw: dict[str, Any]) -> dict[str, Any]:
    """v5 only added a field whose default says what v4 meant: no earlier comments."""
    return raw | {"schema_version": 5}


# version -> how a document of that version becomes one of the next
_MIGRATIONS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}
