"""Running a hosted agent: its framework's steps, countersign's calls, pauses and decisions.

Each time the framework stops on a model turn's tool calls, every call becomes a
`CallRecord` with countersign's own id (`call_<turn>_<n>`) and is judged by countersign's
policy: DENY is refused, ALLOW is let through, ASK waits for a person. The run pauses if
any call waits; otherwise the framework goes on at once with the policy's decisions. The
framework's serialized state is kept in the checkpoint, which the store encrypts and seals
to the pause.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from agent_host.errors import CheckpointError, CountersignError
from agent_host.runtime.checkpoint import CallRecord, Outcome, RunState, call_hash
from agent_host.runtime.decisions import Answer, Approve, Decision, Expired, Reject, RequestChanges
from agent_host.runtime.editing import with_reviewer_note
from agent_host.runtime.hosted import (
    CallGuard,
    Finished,
    GatedCall,
    HostedAgent,
    HostedDecision,
    Step,
)
from agent_host.runtime.journal import NO_JOURNAL, TurnJournal
from agent_host.runtime.ledger import ExecutionLedger
from agent_host.runtime.messages import Message
from agent_host.runtime.outcomes import Failed, Paused, RunOutcome, Succeeded
from agent_host.runtime.policy import Permission, Severity, judged
from agent_host.runtime.strict_json import (
    non_finite_path,
    not_text_path,
    too_deep_path,
    too_deep_text,
)

__all__ = ["HostedRunner"]

log = logging.getLogger(__name__)

NOT_RUN_BY_FRAMEWORK = "Approved, but the framework did not run this call."
ASKED_ITSELF = "The tool asked for a person's approval itself: asked about as {call_id}."
ASKED_A_QUESTION = "The tool asked a person a question itself: asked as {call_id}."
NON_FINITE = (
    "Tool {tool} was not run: {where} is NaN or Infinity, which is not a JSON number. "
    "Call it again with a finite number."
)
TOO_DEEP = "Tool {tool} was not run: its arguments are {problem}."
NOT_AN_OBJECT = (
    "Tool {tool} was not run: its arguments are not a JSON object. Call it again with its "
    "arguments as one JSON object."
)
POLICY = "policy"  # who decided a call the policy let through or refused
_NOT_RUN: dict[str, Outcome] = {"deny": "denied", "invalid": "invalid"}  # refused, by gate


class HostedRunner:
    def __init__(self, ledger: ExecutionLedger) -> None:
        self.ledger = ledger

    async def start(
        self, agent: HostedAgent, state: RunState, journal: TurnJournal = NO_JOURNAL
    ) -> RunOutcome:
        guard = CallGuard(state.run_id, state.agent_fingerprint, self.ledger)
        step = await _step(state, agent, agent.start(state.input, guard))
        if isinstance(step, Failed):
            _settle(state, guard)  # what ran before the framework failed is recorded
            return step
        outcome = await self._continue(agent, state, step, guard)
        if outcome is not None:
            return outcome
        return await self.resume(agent, await journal.planned(state), journal)

    async def resume(
        self, agent: HostedAgent, state: RunState, journal: TurnJournal = NO_JOURNAL
    ) -> RunOutcome:
        """Go on after every call of the last interruption was decided (`record.decision`).

        Every interruption is handed to the journal before any of its calls runs
        (invariant 13), so a worker that takes the run over after a crash continues from
        it instead of running the framework again from the checkpoint: asked again, the
        model could word an ALLOW call differently, and the ledger would take it for a new
        call and run it. One whose calls were all decided by the policy goes on at once;
        one with calls waiting for a person pauses the run once saved. Either may be the
        turn another worker saved first for this pause (it took the same resume over):
        that one is continued from, so a call it ran is never run again for want of it.
        """
        while True:
            if pending := state.pending:
                state.status = "paused"
                return Paused(state, pending)
            decided = [c for c in state.calls if c.turn == state.turns]
            guard = CallGuard(state.run_id, state.agent_fingerprint, self.ledger, decided)
            decisions = [
                HostedDecision(_gated(record), _effective(record), record.call_id)
                for record in decided
            ]
            if state.hosted_state is None:
                raise CheckpointError(
                    f"run {state.run_id}: the checkpoint holds no {agent.framework} state "
                    "to resume from"
                )
            step = await _step(state, agent, agent.resume(state.hosted_state, decisions, guard))
            if isinstance(step, Failed):
                _settle(state, guard)  # what ran before the framework failed is recorded
                return step
            outcome = await self._continue(agent, state, step, guard)
            if outcome is not None:
                return outcome
            state = await journal.planned(state)

    async def _continue(
        self, agent: HostedAgent, state: RunState, step: Step, guard: CallGuard
    ) -> RunOutcome | None:
        """Record what the step did: its outcome when it ended the run, else None (its new
        interruption, planned, to be saved before anything of it runs)."""
        _settle(state, guard)
        if isinstance(step, Finished):
            state.transcript.append(Message(role="assistant", content=step.output))
            state.status, state.output = "succeeded", step.output
            return Succeeded(state, step.output)
        if state.turns >= agent.max_turns:
            state.status = "failed"
            state.error = f"the agent took more than {agent.max_turns} turns; stopped"
            return Failed(state, state.error)
        state.turns += 1
        state.hosted_state = step.state
        if step.last_words:
            state.transcript.append(Message(role="assistant", content=step.last_words))
        context = {**state.context, "run_id": state.run_id, "requested_by": state.requested_by}
        asked_itself = _asked_itself(guard)
        for index, call in enumerate(step.calls):
            record = _plan(state, agent, call, index, context)
            let_through = asked_itself.get((call.framework_id, call.tool))
            if record.gate == "allow" and let_through is not None:
                record.gate, record.severity = "ask", max(record.severity, "medium", key=_rank)
                record.reason = "the tool itself asked for a person's approval"
                let_through.outcome = "deferred"
                let_through.result = ASKED_ITSELF.format(call_id=record.call_id)
            elif record.gate == "question" and let_through is not None:
                let_through.outcome = "deferred"  # (its answer is the call's result)
                let_through.result = ASKED_A_QUESTION.format(call_id=record.call_id)
            state.calls.append(record)
        state.status = "running"
        return None


def _asked_itself(guard: CallGuard) -> dict[tuple[str, str], CallRecord]:
    """Calls the policy let through that did not run, by (framework id, tool): stopping
    again on one of them means the tool asked for approval or a question itself (e.g.
    Pydantic AI's ApprovalRequired, CallDeferred), so a person must decide or answer. (A
    call started before and never finished did not ask anything.)"""
    return {
        (r.model_call_id, r.tool): r
        for r in guard.decided
        if r.gate == "allow" and r.call_id not in guard.results and r.call_id not in guard.in_doubt
    }


def _rank(severity: str) -> int:
    return Severity.rank_of(severity, unknown=0)


def _plan(
    state: RunState,
    agent: HostedAgent,
    call: GatedCall,
    index: int,
    context: Mapping[str, Any],
) -> CallRecord:
    record = CallRecord(
        call_id=f"call_{state.turns - 1}_{index + 1}",
        model_call_id=call.framework_id,
        tool=call.tool,
        arguments=call.arguments,
        call_hash=call_hash(state.agent_fingerprint, call.tool, call.arguments),
        turn=state.turns,
        gate="ask",
    )
    if call.kind == "question":
        record.gate, record.question = "question", call.question or "The tool asks a question."
        record.reason, record.allow_always = record.question, False
        return record
    if (where := non_finite_path(call.arguments)) is not None:
        # A NaN compares false with every limit, so it would slip past a numeric policy.
        record.gate, record.result = "invalid", NON_FINITE.format(tool=call.tool, where=where)
        return record
    if (deep := too_deep_path(call.arguments)) is not None:  # no reviewer could read it
        problem = too_deep_text(deep)
        record.gate, record.result = "invalid", TOO_DEEP.format(tool=call.tool, problem=problem)
        return record
    if not isinstance(call.arguments, dict):
        # A policy judges a call by its arguments' names: it must not judge these as none
        # (a tool that decodes its input leniently would run them as something else).
        record.gate, record.result = "invalid", NOT_AN_OBJECT.format(tool=call.tool)
        return record
    # the framework has not validated the arguments yet: a policy may fail on them
    verdict = judged(lambda: agent.judge(call, context), call.tool, state.run_id)
    record.reason, record.severity = verdict.reason, verdict.severity.value
    record.allow_always = verdict.allow_always
    if verdict.permission is Permission.DENY:
        record.gate = "deny"
        record.result = (
            f"Tool {call.tool} is not permitted: {verdict.reason or 'denied by policy'}."
        )
    elif verdict.permission is Permission.ALLOW:
        record.gate = "allow"
    elif state.sticky.get(call.tool) == "reject":
        record.decision = Reject(decided_by="reject-always", call_hash=record.call_hash)
    if record.gate == "ask" and isinstance(call.arguments, dict):
        # what a reviewer may edit (the adapter's `editable=`), as a native tool lists it
        record.editable = list(agent.editable().get(call.tool, ()))
    return record


def _effective(record: CallRecord) -> Decision:
    """What the framework is told for one call: a person's decision, or the policy's."""
    if record.decision is not None:
        return record.decision
    if record.gate == "allow":
        return Approve(decided_by=POLICY, via=POLICY, call_hash=record.call_hash)
    return Reject(decided_by=POLICY, via=POLICY, message=record.result or "")


def _gated(record: CallRecord) -> GatedCall:
    return GatedCall(
        framework_id=record.model_call_id,
        tool=record.tool,
        arguments=record.arguments,
        kind="question" if record.gate == "question" else "approval",
        question=record.question,
    )


def _settle(state: RunState, guard: CallGuard) -> None:
    """The outcomes of the calls the framework was just told about."""
    for record in guard.decided:
        if record.outcome is not None:
            continue
        decision = _effective(record)
        if record.call_id in guard.results:
            result = guard.results[record.call_id]
            if isinstance(decision, Approve):  # as the model read it: what was edited, the comment
                result = with_reviewer_note(result, decision)
            record.outcome, record.result = "executed", result
        elif isinstance(decision, Answer):
            record.outcome, record.result = "answered", decision.text
        elif isinstance(decision, Reject | RequestChanges):
            record.outcome = _NOT_RUN.get(record.gate, "rejected")
            record.result = record.result or decision.text()
        elif isinstance(decision, Expired):
            record.outcome, record.result = "expired", decision.text()
        else:  # approved, yet no result: it raised, was refused, or was never run
            why = guard.unfinished.get(record.call_id, NOT_RUN_BY_FRAMEWORK)
            record.outcome, record.result = "unknown_outcome", why


async def _step(
    state: RunState, agent: HostedAgent, running: Coroutine[Any, Any, Step]
) -> Step | Failed:
    """The framework's step; countersign's own errors go up, the framework's fail the run."""
    try:
        step = await running
    except CountersignError:
        raise
    except Exception as exc:
        return _failed(state, agent, exc)
    if (where := not_text_path(_as_saved(step))) is not None:
        # It could be neither saved nor shown: the run ends here, saying why, rather than
        # failing at each save as an error of countersign's own and asking the model again.
        log.info(
            "run %s: the %s agent's step is not text at %s", state.run_id, agent.framework, where
        )
        state.status = "failed"
        state.error = (
            f"the {agent.framework} agent's model answered with a lone UTF-16 surrogate in "
            f"{where}, which is not text; nothing of that answer ran"
        )
        return Failed(state, state.error)
    return step


def _as_saved(step: Step) -> dict[str, Any]:
    """What of a step the run's state keeps, as a path names it."""
    if isinstance(step, Finished):
        return {"output": step.output}
    calls = [{"id": c.framework_id, "tool": c.tool, "arguments": c.arguments} for c in step.calls]
    questions = [c.question for c in step.calls if c.question]
    return {
        "calls": calls,
        "questions": questions,
        "last_words": step.last_words,
        "state": step.state,
    }


def _failed(state: RunState, agent: HostedAgent, exc: Exception) -> Failed:
    log.info("run %s: the %s agent raised %s", state.run_id, agent.framework, type(exc).__name__)
    state.status = "failed"
    state.error = f"the {agent.framework} agent failed: {type(exc).__name__}: {exc}"
    return Failed(state, state.error)
