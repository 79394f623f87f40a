"""Agents of other frameworks, hosted with countersign's guarantees.

An agent written with the OpenAI Agents SDK or Pydantic AI runs its own loop: it calls its
model, and stops on the tool calls it was told to have approved. A `HostedAgent` adapts one
(see `agent_host.adapters`): every tool call of a model turn stops the framework's run, so
the whole turn is judged before any of it runs; countersign's policy decides which of those
calls a person must approve; the framework's own serialized state is the checkpoint; and
each call the framework then executes goes through a `CallGuard`, which runs it only if it
was decided, with exactly the arguments that were decided (a reviewer's edited ones, if
the adapter let the tool be edited), at most once per call id.

This module is pure: the adapters bring the frameworks, the runner brings the ledger.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agent_host.errors import InvalidArguments
from agent_host.runtime.call_key import running
from agent_host.runtime.checkpoint import CallRecord, call_hash
from agent_host.runtime.decisions import Approve, Decision
from agent_host.runtime.editing import with_reviewer_note
from agent_host.runtime.fingerprint import describe_changes, fingerprint_of
from agent_host.runtime.ledger import UNKNOWN_OUTCOME, ExecutionLedger, hosted_entry
from agent_host.runtime.policy import (
    Permission,
    PermissionFunction,
    RuleSet,
    Severity,
    Verdict,
    describe_permission,
    to_verdict,
)
from agent_host.runtime.strict_json import non_finite_path, too_deep_path, too_deep_text

__all__ = [
    "NOT_SEEN",
    "CallGuard",
    "Finished",
    "GatedCall",
    "HostedAgent",
    "HostedDecision",
    "HostedTool",
    "Interrupted",
    "ToolGate",
]

NOT_SEEN = (
    "Not run: countersign did not see this call before it was to run (the framework ran a "
    "tool call that was never judged), so it was refused."
)
NOT_WHAT_WAS_APPROVED = (
    "Not run: the arguments differ from those that were approved (call {call_id}); "
    "nothing was run. Call the tool again to have the new arguments reviewed."
)


@dataclass(frozen=True)
class GatedCall:
    """One tool call the framework stopped on, in the framework's own terms."""

    framework_id: str  # the framework's id for the call; the model chose it, it may repeat
    tool: str
    arguments: dict[str, Any] | str  # a string when the model's arguments were not JSON
    kind: Literal["approval", "question"] = "approval"
    question: str | None = None  # for a question: what the tool asks a person


@dataclass(frozen=True)
class Interrupted:
    """The framework stopped on these calls; `state` is its own serialized state (JSON)."""

    state: str
    calls: list[GatedCall]
    last_words: str = ""  # what the model said before calling, for the reviewer


@dataclass(frozen=True)
class Finished:
    output: str


Step = Interrupted | Finished


@dataclass(frozen=True)
class HostedDecision:
    """A call of the last interruption and what was decided for it (a person or the policy)."""

    call: GatedCall
    decision: Decision
    call_id: str  # countersign's id for it


@dataclass(frozen=True)
class ToolGate:
    """What countersign's policy says of one tool of a hosted agent."""

    permission: Permission | PermissionFunction
    severity: Severity = Severity.MEDIUM
    reason: str = ""
    allow_always: bool = True

    def judge(self, arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Verdict:
        reason = self.reason or "this tool needs a person's approval"
        if isinstance(self.permission, Permission):
            verdict = Verdict(self.permission, reason, self.severity)
        else:
            verdict = to_verdict(self.permission(arguments, context), reason, self.severity)
        if verdict.allow_always and not self.allow_always:
            verdict = Verdict(verdict.permission, verdict.reason, verdict.severity, False)
        return verdict


@dataclass(frozen=True)
class HostedTool:
    """A hosted agent's tool as an edit of its calls sees it (`runtime.editing.EditableTool`):
    its editable arguments, its JSON schema, and the framework's validation of arguments."""

    name: str
    editable: tuple[str, ...]
    json_schema: dict[str, Any]
    validator: Callable[[dict[str, Any]], dict[str, Any]]

    def schema(self) -> dict[str, Any]:
        return self.json_schema

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(raw, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        if (where := non_finite_path(dict(raw))) is not None:
            raise InvalidArguments(f"{where} is NaN or Infinity, which is not a JSON number")
        if (deep := too_deep_path(dict(raw))) is not None:
            raise InvalidArguments(f"arguments {too_deep_text(deep)}")
        valid = self.validator(dict(raw))
        if (where := non_finite_path(valid)) is not None:
            raise InvalidArguments(f"{where} is NaN or Infinity, which is not a JSON number")
        return valid


class HostedAgent(ABC):
    """An agent of another framework, registered in the `AgentRegistry` like any other."""

    framework: ClassVar[str]
    name: str
    rules: RuleSet
    max_turns: int = 20  # interruptions (model turns with tool calls) before the run stops

    @abstractmethod
    def tool_schemas(self) -> dict[str, dict[str, Any]]:
        """Each tool's JSON schema, by name (part of what a reviewer's approval relies on)."""

    @abstractmethod
    def gates(self) -> dict[str, ToolGate]:
        """Each tool's gate: the operator's policy, else the framework's own approval flag."""

    @abstractmethod
    async def start(self, input: str, guard: CallGuard) -> Step:
        """Run the framework's agent on `input` until it finishes or stops on tool calls."""

    @abstractmethod
    async def resume(
        self, state: str, decisions: Sequence[HostedDecision], guard: CallGuard
    ) -> Step:
        """Restore the framework's state, apply one decision per call it stopped on, go on."""

    def editable(self) -> dict[str, tuple[str, ...]]:
        """The arguments a reviewer may edit, by tool (the adapter's `editable=`)."""
        return {}

    def validate_arguments(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`arguments` as the framework would run `tool` with them, in their JSON form;
        raises InvalidArguments. An adapter that lets tools be edited validates here."""
        raise InvalidArguments(f"{self.framework} cannot validate edited arguments of {tool}")

    def editable_tool(self, name: str) -> HostedTool | None:
        """The tool an edit of one of its calls is checked with, if the adapter lets a
        reviewer edit any of its arguments."""
        names = self.editable().get(name, ())
        schema = self.tool_schemas().get(name)
        if not names or schema is None:
            return None
        return HostedTool(
            name, names, schema, lambda arguments: self.validate_arguments(name, arguments)
        )

    def judge_edit(
        self, tool: str, arguments: Mapping[str, Any], context: Mapping[str, Any]
    ) -> Verdict:
        """The policy on a call's edited arguments, as on any call the framework stops on;
        a policy that cannot judge them denies the edit (fail closed)."""
        try:
            return self.judge(GatedCall("", tool, dict(arguments)), context)
        except Exception as exc:  # an operator's permission function on arguments it never saw
            return Verdict(
                Permission.DENY,
                f"countersign's policy could not judge these arguments ({type(exc).__name__})",
            )

    def judge(self, call: GatedCall, context: Mapping[str, Any]) -> Verdict:
        """The operator's rules first, then the tool's gate; unknown tools are asked about."""
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        if (verdict := self.rules.first_match(self.name, call.tool, arguments)) is not None:
            return verdict
        gate = self.gates().get(call.tool)
        if gate is None:
            return Verdict.ask(f"{call.tool} is not a tool this agent declared", Severity.HIGH)
        return gate.judge(arguments, context)

    def fingerprint_parts(self) -> dict[str, Any]:
        gates = self.gates()
        editable = self.editable()
        parts: dict[str, Any] = {
            "agent": self.name,
            "framework": self.framework,
            "tools": {
                name: {
                    "schema": schema,
                    "policy": describe_permission(gates[name].permission)
                    if name in gates
                    else "ask",
                    "severity": gates[name].severity.value if name in gates else "high",
                }
                # what a reviewer may edit, only when any: an agent without edits keeps the
                # fingerprint its paused runs were recorded with
                | ({"editable": list(editable[name])} if editable.get(name) else {})
                for name, schema in sorted(self.tool_schemas().items())
            },
            "rules": [repr(rule) for rule in self.rules.rules],
        }
        return parts

    def fingerprint(self) -> str:
        return fingerprint_of(self.fingerprint_parts())

    def describe_changes(self, parts: Mapping[str, Any]) -> str:
        return describe_changes(parts, self.fingerprint_parts())


@dataclass
class CallGuard:
    """Runs the framework's tool calls: only decided ones, as decided, at most once each.

    `decided` are the calls of the interruption being resumed. A call the framework
    executes is matched to one of them by the framework's id and the hash of the arguments
    the framework holds (the model's, as the call was shown): the model may repeat an id, so
    two calls can share one, but never an id and a hash with a call still unused. It then
    runs with the arguments that were decided: a reviewer's edited ones (checked by the
    approval service and again at resume), else the framework's. The ledger is keyed by
    countersign's call id and hash, so a resume redelivered after a crash gets the recorded
    result instead of running the call again.
    """

    run_id: str
    fingerprint: str
    ledger: ExecutionLedger
    decided: list[CallRecord] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)  # call id -> what the tool returned
    # call id -> why a decided call did not give a result: it raised, or was not run
    unfinished: dict[str, str] = field(default_factory=dict)
    # calls started before and never finished (a worker died in them, or another runs them)
    in_doubt: set[str] = field(default_factory=set)
    _used: set[str] = field(default_factory=set)

    def approved_by_policy(self, framework_id: str) -> bool:
        """True if the call was let through by the policy, not by a person."""
        return any(r.model_call_id == framework_id and r.gate == "allow" for r in self.decided)

    async def run(
        self,
        framework_id: str,
        tool: str,
        arguments: Any,
        invoke: Callable[[dict[str, Any] | str], Awaitable[Any]],
    ) -> Any:
        """`invoke(arguments to run with)` if this call was approved as the framework holds
        it (`arguments`); else a refusal text. The model reads the result with a note of
        what a reviewer edited and their comment."""
        record = self._match(framework_id, tool, arguments)
        if record is None:
            same_id = [r for r in self.decided if r.model_call_id == framework_id]
            if same_id:
                refusal = NOT_WHAT_WAS_APPROVED.format(call_id=same_id[0].call_id)
                self.unfinished.setdefault(same_id[0].call_id, refusal)
                return refusal
            return NOT_SEEN
        self._used.add(record.call_id)
        # Keyed by the call's hash too: after a crash the framework asks its model again for
        # the turns since the checkpoint, and a call it plans anew under the same id is
        # another call, judged anew; only the very same call gets the recorded result.
        entry = hosted_entry(record)
        claim = await self.ledger.claim(self.run_id, entry)
        if claim.status == "finished":
            self.results[record.call_id] = claim.result or ""
            return _with_note(claim.result, record)
        if claim.status == "in_doubt":  # not run again; no result, so recorded as unknown
            self.in_doubt.add(record.call_id)
            self.unfinished[record.call_id] = UNKNOWN_OUTCOME
            return UNKNOWN_OUTCOME
        try:
            with running(self.run_id, record.call_id):  # its key, for `idempotency_key()`
                value = await invoke(record.run_arguments)
        except BaseException as exc:  # the framework's to report (a timeout cancels it)
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.unfinished[record.call_id] = RAISED.format(error=error)
            raise
        text = as_text(value)
        await self.ledger.finish(self.run_id, entry, text)
        self.results[record.call_id] = text
        return _with_note(value, record)

    def _match(self, framework_id: str, tool: str, arguments: Any) -> CallRecord | None:
        digest = call_hash(self.fingerprint, tool, arguments)
        for record in self.decided:
            if (
                record.model_call_id == framework_id
                and record.call_id not in self._used
                and record.tool == tool
                and record.call_hash == digest
                and record.outcome is None
                and _may_run(record)
            ):
                return record
        return None


RAISED = (
    "The call failed once it was let through ({error}): whether the tool acted before that "
    "is unknown. It was not run again; check its effect before retrying."
)


def _with_note(value: Any, record: CallRecord) -> Any:
    """The tool's result, then what a reviewer edited and their comment, as the model is
    told it (the result as it is when there is nothing to add)."""
    decision = record.decision
    if not isinstance(decision, Approve) or not (decision.edited or decision.comment.strip()):
        return value
    return with_reviewer_note(as_text(value), decision)


def _may_run(record: CallRecord) -> bool:
    """Let through by the policy, or approved by a person (never rejected, never a question)."""
    if record.gate == "allow":
        return record.decision is None
    return record.gate == "ask" and isinstance(record.decision, Approve)


def parse_arguments(raw: str | Mapping[str, Any] | None) -> dict[str, Any] | str:
    """A framework's call arguments as a JSON object, or the raw text if they are not one."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:  # (NaN and Infinity parse: the planning refuses them, saying where they are)
        value = json.loads(raw or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested past reading: as text
        return raw
    return value if isinstance(value, dict) else raw


def as_text(value: Any) -> str:
    """A tool's result as text that can be stored and shown: a lone surrogate (no
    character at all) is written as its escape, rather than failing the record."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode()
    try:
        return json.dumps(value, default=str)  # ASCII, non-ASCII escaped
    except (TypeError, ValueError):
        return as_text(str(value))
