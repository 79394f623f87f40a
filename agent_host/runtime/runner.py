"""The runner: model turns, the policy per call, pauses and resumes.

A turn's calls are all judged before any runs. If any is ASK the whole turn pauses, so
after resumption nothing of it runs twice (seed 001, docs/ORIGINS.md). Decisions arrive one
per pending call; a missing one is an error (fail closed). Tool calls go through the
execution ledger, so a call is executed at most once per call id, whatever crashes or
retries happen.

Call ids are the runner's, never the model's: a model may repeat an id within a turn or
reuse one from an earlier turn, and the ledger, the approval requests and the decisions are
all keyed by call id. Every model response is handed to a `TurnJournal` before any of its
calls runs, so a run resumed elsewhere after a crash replays it instead of asking again.

An approval may carry edited arguments: they are checked again here, at resume, against the
tool's schema, the hash the approval service recorded and the policy (fail closed), the tool
runs with them, and the model is told what was changed and by whom; a reviewer's comment
reaches the model the same way, after the tool's result.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agent_host.errors import (
    AgentChangedError,
    CheckpointError,
    DecisionMismatchError,
    InvalidDecisionError,
    MissingDecisionError,
    ModelError,
)
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.call_key import running
from agent_host.runtime.checkpoint import CallRecord, RunState, call_hash
from agent_host.runtime.decisions import Answer, Approve, Decision, Expired, Reject, RequestChanges
from agent_host.runtime.editing import with_reviewer_note
from agent_host.runtime.fingerprint import canonical_json, same_json
from agent_host.runtime.hosted import HostedAgent, as_text
from agent_host.runtime.hosted_runner import HostedRunner
from agent_host.runtime.journal import NO_JOURNAL, TurnJournal
from agent_host.runtime.ledger import UNKNOWN_OUTCOME, ExecutionLedger, Finished, InMemoryLedger
from agent_host.runtime.messages import Message, ToolCall
from agent_host.runtime.outcomes import Failed, Paused, RunOutcome, Succeeded
from agent_host.runtime.pause import PauseRequest
from agent_host.runtime.policy import Permission, Severity, Verdict, judged
from agent_host.runtime.tools import InvalidArguments, ToolContext

__all__ = ["Failed", "Paused", "RunOutcome", "Runner", "Succeeded"]

log = logging.getLogger(__name__)


class Runner:
    def __init__(self, registry: AgentRegistry, ledger: ExecutionLedger | None = None) -> None:
        self.registry = registry
        self.ledger: ExecutionLedger = ledger or InMemoryLedger()
        # Agents are definitions, rebuilt from the registry once per process: building one
        # derives every tool's schema, and doing that per resume costs milliseconds.
        self._agents: dict[str, tuple[Agent | HostedAgent, str]] = {}
        self.hosted = HostedRunner(self.ledger)

    def reload_agents(self) -> None:
        """Rebuild agents from the registry on next use (after it was changed in place)."""
        self._agents.clear()

    def agent(self, name: str) -> tuple[Agent | HostedAgent, str]:
        """The registry's agent of that name, built once, and its fingerprint."""
        if name not in self._agents:
            agent = self.registry.build(name)
            self._agents[name] = (agent, agent.fingerprint())
        return self._agents[name]

    async def run(
        self,
        agent_name: str,
        input: str,
        *,
        run_id: str | None = None,
        requested_by: str | None = None,
        context: Mapping[str, Any] | None = None,
        journal: TurnJournal = NO_JOURNAL,
    ) -> RunOutcome:
        agent, fingerprint = self.agent(agent_name)
        state = RunState(
            run_id=run_id or f"run_{uuid.uuid4().hex[:20]}",
            agent=agent.name,
            agent_fingerprint=fingerprint,
            fingerprint_parts=agent.fingerprint_parts(),
            input=input,
            requested_by=requested_by,
            context=dict(context or {}),
            transcript=[Message(role="user", content=input)],
        )
        if isinstance(agent, HostedAgent):
            return await self.hosted.start(agent, state, journal)
        state.transcript.insert(0, Message(role="system", content=agent.instructions))
        return await self._advance(state, agent, journal)

    def restore(self, state: RunState) -> Agent | HostedAgent:
        """Rebuild the run's agent; refuse if its tools or policy changed while it waited."""
        agent, fingerprint = self.agent(state.agent)
        if fingerprint != state.agent_fingerprint:
            raise AgentChangedError(
                f"agent {state.agent!r} changed since run {state.run_id} paused "
                f"({agent.describe_changes(state.fingerprint_parts)}); its pending calls must "
                "be asked again in a new run"
            )
        return agent

    async def resume(
        self,
        state: RunState,
        decisions: Mapping[str, Decision],
        *,
        journal: TurnJournal = NO_JOURNAL,
        copy: bool = True,
    ) -> RunOutcome:
        """Apply one decision per pending call (by call id) and continue the run. The run
        goes on in a copy of `state` unless `copy` is false (a caller that just loaded the
        state for this resume and holds it alone: a deep copy costs more than the rest)."""
        if copy:
            state = state.model_copy(deep=True)
        agent = self.restore(state)
        if state.status != "paused":
            raise InvalidDecisionError(f"run {state.run_id} is {state.status}, not paused")
        pending = {c.call_id: c for c in state.pending}
        if missing := sorted(set(pending) - set(decisions)):
            raise MissingDecisionError(
                f"run {state.run_id}: no decision for pending call(s) {', '.join(missing)}; "
                "every pending call needs one (nothing was run)"
            )
        if extra := sorted(set(decisions) - set(pending)):
            raise InvalidDecisionError(
                f"run {state.run_id}: call(s) {', '.join(extra)} are not pending; "
                "decide only the calls listed as pending"
            )
        for call_id, record in pending.items():
            _apply(state, agent, record, decisions[call_id])
        state.status = "running"
        if isinstance(agent, HostedAgent):
            return await self.hosted.resume(agent, state, journal)
        return await self._advance(state, agent, journal)

    async def replay(self, state: RunState, *, journal: TurnJournal = NO_JOURNAL) -> RunOutcome:
        """Continue from a state the journal saved right after a model response.

        The model is not asked again for that turn: its calls are settled through the
        ledger (a call that already ran gives its recorded result; one that started and never
        finished is reported, not re-run), then the run goes on as usual.
        """
        state = state.model_copy(deep=True)
        agent = self.restore(state)
        if state.status not in ("running", "succeeded"):
            raise CheckpointError(
                f"run {state.run_id}: a saved turn is {state.status}, not running; "
                "it cannot be replayed"
            )
        if isinstance(agent, HostedAgent):  # an interruption saved before anything of it ran
            if state.status != "running":
                raise CheckpointError(
                    f"run {state.run_id}: a hosted agent's saved turn is {state.status}, "
                    "not running; it cannot be replayed"
                )
            return await self.hosted.resume(agent, state, journal)
        return await self._advance(state, agent, journal)

    async def _advance(self, state: RunState, agent: Agent, journal: TurnJournal) -> RunOutcome:
        while True:
            if state.status == "succeeded":  # a final answer, saved by the journal
                return Succeeded(state, state.output or "")
            if state.open_calls:
                if pending := state.pending:
                    state.status = "paused"
                    return Paused(state, pending)
                if paused := await self._settle_turn(state, agent):
                    return paused
                continue
            if state.turns >= agent.max_turns:
                return _fail(state, f"the agent took more than {agent.max_turns} turns; stopped")
            try:
                response = await agent.model.respond(state.transcript, agent.tool_specs())
            except ModelError as exc:
                return _fail(state, f"model error: {exc}")
            state.turns += 1
            _record_response(state, agent, response.text, response.tool_calls)
            # Saved before any call of the response runs; the journal may hand back the
            # same turn as another worker saved it first, and that one is continued instead.
            state = await journal.planned(state)

    async def _settle_turn(self, state: RunState, agent: Agent) -> Paused | None:
        for record in state.open_calls:
            await self._settle(state, agent, record)
            if record.waiting:  # the tool asked a question: pause the run here
                state.status = "paused"
                return Paused(state, state.pending)
        _append_results(state)
        return None

    async def _settle(self, state: RunState, agent: Agent, record: CallRecord) -> None:
        decision = record.decision
        if isinstance(decision, Answer):
            record.outcome, record.result = "answered", decision.text
        elif isinstance(decision, Reject | RequestChanges):
            record.outcome, record.result = "rejected", decision.text()
        elif isinstance(decision, Expired):
            record.outcome, record.result = "expired", decision.text()
        elif record.gate in ("allow", "ask"):  # allowed, or approved
            await self._execute(state, agent, record)
            if isinstance(decision, Approve) and record.outcome is not None:
                record.result = with_reviewer_note(record.result or "", decision)

    async def _execute(self, state: RunState, agent: Agent, record: CallRecord) -> None:
        tool = agent.tool(record.tool)
        arguments = record.run_arguments  # a reviewer's edited arguments, checked in _apply
        assert tool is not None and isinstance(arguments, dict)  # planned as valid
        claim = await self.ledger.claim(state.run_id, record.call_id)
        if claim.status == "finished":  # as it ended: a tool that raised stays an error
            record.outcome, record.result = claim.outcome, claim.result
            return
        if claim.status == "in_doubt" and not tool.idempotent:
            log.warning("run %s call %s: outcome unknown, not re-run", state.run_id, record.call_id)
            record.outcome, record.result = "unknown_outcome", UNKNOWN_OUTCOME
            return
        ctx = ToolContext(state.run_id, record.call_id, agent.name, state.context)
        try:
            with running(state.run_id, record.call_id):  # its key, for `idempotency_key()` too
                value = await tool.invoke(arguments, ctx)
            record.outcome, record.result = "executed", as_text(value)
        except PauseRequest as request:
            if isinstance(record.decision, Approve):  # what it ran with stays on record
                record.edited_run = record.decision.edited_arguments
            record.gate, record.question = "question", request.question
            record.severity, record.reason = str(request.severity), request.question
            record.allow_always, record.decision = False, None
            return  # the ledger keeps the claim: the tool is never re-run, the answer is its result
        except Exception as exc:  # a tool's failure goes to the model, not up the stack
            log.info(
                "run %s call %s: tool %s raised %s",
                state.run_id,
                record.call_id,
                tool.name,
                type(exc).__name__,
            )
            record.outcome, record.result = "error", as_text(f"Tool {tool.name} failed: {exc}")
        outcome: Finished = "error" if record.outcome == "error" else "executed"
        await self.ledger.finish(state.run_id, record.call_id, record.result or "", outcome)


def _record_response(state: RunState, agent: Agent, text: str, tool_calls: list[ToolCall]) -> None:
    """The model's answer in the transcript, and its calls planned (with the runner's ids)."""
    if not tool_calls:
        state.transcript.append(Message(role="assistant", content=text))
        state.status, state.output = "succeeded", text
        return
    state.transcript.append(Message(role="assistant", content=text, tool_calls=tool_calls))
    taken = {c.call_id for c in state.calls}
    for index, proposed in enumerate(tool_calls):
        call_id = _new_call_id(state.turns, index, taken)
        taken.add(call_id)
        state.calls.append(_plan(state, agent, proposed, call_id))
    if not state.open_calls:  # every call was denied or invalid: answer the model now
        _append_results(state)


def _new_call_id(turns: int, index: int, taken: set[str]) -> str:
    """`call_<turn>_<n>` (turn from 0, call from 1) for call `index` of the `turns`-th model
    response: unique in the run for ever, as turns only grow and a saved turn is replayed,
    never asked again.

    A run checkpointed before v2 kept the model's ids, which could look like these, hence
    the suffix in that one case.
    """
    call_id = base = f"call_{turns - 1}_{index + 1}"
    suffix = 0
    while call_id in taken:
        suffix += 1
        call_id = f"{base}_{suffix}"
    return call_id


def _plan(state: RunState, agent: Agent, proposed: ToolCall, call_id: str) -> CallRecord:
    """Judge one proposed call: validate, then operator rules, tool policy, sticky decisions."""
    base: dict[str, Any] = {
        "call_id": call_id,
        "model_call_id": proposed.id,
        "tool": proposed.name,
        "turn": state.turns,
    }
    tool = agent.tool(proposed.name)
    if tool is None:
        known = ", ".join(t.name for t in agent.tools)
        return _invalid(
            state, base, proposed, f"Unknown tool {proposed.name!r}; available tools: {known}."
        )
    try:
        arguments = tool.validate(proposed.arguments)
    except InvalidArguments as exc:
        return _invalid(state, base, proposed, f"{exc}. Fix the arguments and call the tool again.")
    context = _policy_context(state)
    verdict = judged(lambda: agent.judge(tool, arguments, context), tool.name, state.run_id)
    if not tool.allow_always:
        verdict = replace(verdict, allow_always=False)
    record = CallRecord(
        **base,
        arguments=arguments,
        call_hash=call_hash(state.agent_fingerprint, tool.name, arguments),
        gate=verdict.permission.value,
        reason=verdict.reason,
        severity=verdict.severity.value,
        allow_always=verdict.allow_always,
        editable=list(tool.editable) if verdict.permission is Permission.ASK else [],
    )
    if verdict.permission is Permission.DENY:
        record.outcome = "denied"
        record.result = (
            f"Tool {tool.name} is not permitted: {verdict.reason or 'denied by policy'}."
        )
    elif verdict.permission is Permission.ASK:
        _apply_sticky(state, record, verdict)
    return record


def _policy_context(state: RunState) -> dict[str, Any]:
    return {**state.context, "run_id": state.run_id, "requested_by": state.requested_by}


def _invalid(
    state: RunState, base: dict[str, Any], proposed: ToolCall, explanation: str
) -> CallRecord:
    """A call that never runs: the explanation goes back to the model as its result."""
    return CallRecord(
        **base,
        arguments=proposed.arguments,
        call_hash=call_hash(state.agent_fingerprint, proposed.name, proposed.arguments),
        gate="invalid",
        outcome="invalid",
        result=explanation,
    )


def _apply_sticky(state: RunState, record: CallRecord, verdict: Verdict) -> None:
    """ "Reject for this run" applies here. "Approve for this run" does not: whether it covers
    a call depends on the call's route, which the store resolves when it records the pause
    (`RunState.standing`), so the call pauses like any other and is asked or approved there."""
    if state.sticky.get(record.tool) == "reject":
        record.decision = Reject(decided_by="reject-always", call_hash=record.call_hash)


def _apply(
    state: RunState, agent: Agent | HostedAgent, record: CallRecord, decision: Decision
) -> None:
    if decision.call_hash is not None and decision.call_hash != record.call_hash:
        raise DecisionMismatchError(
            f"call {record.call_id}: the decision was made on a different call "
            f"(hash {decision.call_hash[:12]}, pending {record.call_hash[:12]}); nothing was run"
        )
    if record.gate == "question" and isinstance(decision, Approve):
        raise InvalidDecisionError(f"call {record.call_id} asks a question: answer or reject it")
    if record.gate == "ask" and isinstance(decision, Answer):
        raise InvalidDecisionError(f"call {record.call_id} needs approve or reject, not an answer")
    if isinstance(decision, Approve) and decision.edited_arguments is not None:
        _check_edit(state, agent, record, decision)
    if isinstance(decision, Approve) and decision.always:
        if not record.allow_always:
            raise InvalidDecisionError(f"tool {record.tool} may not be approved for the whole run")
        state.standing[record.tool] = decision
    elif isinstance(decision, Reject) and decision.always:
        state.sticky[record.tool] = "reject"
    record.decision = decision


def _check_edit(
    state: RunState, agent: Agent | HostedAgent, record: CallRecord, decision: Approve
) -> None:
    """An approval with edited arguments, checked again before anything runs (the approval
    service checked it when it was recorded): on the arguments the reviewer was shown, only
    what the tool lets them edit, valid for the tool, hashed as recorded, and judged by the
    policy no lower than the call was asked at. Anything else fails the run, closed.
    The same for a hosted agent: its adapter names the editable arguments and validates
    them with its framework, and its call guard runs the call with them."""
    where = f"call {record.call_id}: the edited arguments"
    tool = agent.editable_tool(record.tool)
    if tool is None:
        raise InvalidDecisionError(
            f"{where} cannot be used: agent {agent.name} does not let a reviewer edit "
            f"{record.tool}'s arguments; nothing was run"
        )
    if record.gate != "ask" or decision.always or not record.editable:
        raise InvalidDecisionError(
            f"{where} cannot be used: only a call approved once, as it waited for approval, "
            "can be edited; nothing was run"
        )
    if not same_json(decision.original_arguments, record.arguments):
        raise DecisionMismatchError(f"{where} were made on other arguments; nothing was run")
    edited = decision.edited_arguments or {}
    changed = [name for name, _, _ in decision.changes()]
    if refused := sorted(set(changed) - (set(tool.editable) & set(record.editable))):
        raise InvalidDecisionError(
            f"{where} change {', '.join(refused)}, which {tool.name} does not let a reviewer "
            "edit; nothing was run"
        )
    try:
        valid = tool.validate(edited)
    except InvalidArguments as exc:
        raise InvalidDecisionError(f"{where} do not fit the tool ({exc}); nothing was run") from exc
    edited_hash = call_hash(state.agent_fingerprint, tool.name, valid)
    if canonical_json(valid) != canonical_json(edited) or edited_hash != decision.edited_hash:
        raise DecisionMismatchError(
            f"{where} are not the ones recorded (hash {decision.edited_hash[:12]}, these "
            f"{edited_hash[:12]}); nothing was run"
        )
    verdict = agent.judge_edit(tool.name, valid, _policy_context(state))
    _check_edited_verdict(where, record, verdict)


def _check_edited_verdict(where: str, record: CallRecord, verdict: Verdict) -> None:
    """An edit never lowers the bar: refused if the policy denies the edited call or asks at
    a higher severity than the call was approved at."""
    if verdict.permission is Permission.DENY:
        raise InvalidDecisionError(
            f"{where} are denied by the policy ({verdict.reason}); nothing was run"
        )
    if verdict.permission is Permission.ASK and verdict.severity.rank > _rank(record.severity):
        raise InvalidDecisionError(
            f"{where} need {verdict.severity.value} severity, above the {record.severity} "
            "they were approved at; nothing was run"
        )


def _rank(severity: str) -> int:
    # unknown: every known severity is above it, so an edit is refused
    return Severity.rank_of(severity, unknown=-1)


def _append_results(state: RunState) -> None:
    """The current turn's results, in call order, as the tool messages the model reads next."""
    for record in (c for c in state.calls if c.turn == state.turns):
        state.transcript.append(
            Message(
                role="tool",
                content=record.result or "",
                tool_call_id=record.model_call_id,  # pairs with the model's own call
                name=record.tool,
            )
        )


def _fail(state: RunState, error: str) -> Failed:
    state.status, state.error = "failed", error
    return Failed(state, error)
