"""Randomized runs: any model turns, any decisions, a JSON checkpoint at every pause.

A reference model predicts, from the policies and the decisions alone, which calls pause,
which run and how each one ends; the runner must agree exactly. Along the way:
a rejected / expired / denied call never runs, no call id runs twice, every executed call
was ALLOW or approved, and a paused turn has run none of its calls.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_host.runtime.checkpoint import CallRecord
from agent_host.runtime.decisions import (
    Approve,
    Decision,
    Expired,
    Reject,
    RequestChanges,
)
from agent_host.runtime.ledger import InMemoryLedger
from agent_host.runtime.messages import ToolCall
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.policy import Permission, load_rules
from agent_host.runtime.runner import Paused, Runner, Succeeded
from tests.support.agents import Recorder, counting_tool, registry_of, roundtrip, scripted, tc

TOOLS = {
    "read": Permission.ALLOW,
    "write": Permission.ASK,
    "send": Permission.ASK,
    "wipe": Permission.DENY,
}
# operator rules on top: one tightens an ASK tool to DENY, one relaxes an ASK tool to ALLOW
RULES = load_rules(
    """
rules:
  - {tool: send, when: {target: b}, permission: deny, reason: "never send to b"}
  - {tool: write, when: {target: a}, permission: allow}
"""
)


def expected_gate(tool: str, target: str) -> str:
    if tool == "send" and target == "b":
        return "deny"
    if tool == "write" and target == "a":
        return "allow"
    return TOOLS[tool].value


KINDS = {
    # kind: (outcome the call must end with, sticky decision it leaves behind). "Approve for
    # this run" is kept for the store to scope by route (RunState.standing): in the runner
    # alone, later calls of the tool still pause.
    "approve": ("executed", None),
    "approve_always": ("executed", None),
    "reject": ("rejected", None),
    "reject_message": ("rejected", None),
    "reject_always": ("rejected", "reject"),
    "request_changes": ("rejected", None),
    "expired": ("expired", None),
}


def make_decision(kind: str, record: CallRecord, with_hash: bool) -> Decision:
    common: dict[str, Any] = {"decided_by": "U_PROP"}
    if with_hash:
        common["call_hash"] = record.call_hash
    if kind.startswith("approve"):
        return Approve(always=kind == "approve_always", **common)
    if kind == "reject_message":
        return Reject(message=f"no to {record.call_id}", **common)
    if kind.startswith("reject"):
        return Reject(always=kind == "reject_always", **common)
    if kind == "request_changes":
        return RequestChanges(feedback=f"change {record.call_id}", **common)
    return Expired(**common)


calls_in_a_turn = st.lists(
    st.tuples(st.sampled_from(sorted(TOOLS)), st.sampled_from(["a", "b", "c"])),
    min_size=1,
    max_size=4,
)
model_turns = st.lists(calls_in_a_turn, min_size=1, max_size=5)


async def check_run(turns: list[list[tuple[str, str]]], data: st.DataObject) -> None:
    rec = Recorder()
    planned: list[list[ToolCall]] = [
        # the ids the runner assigns (turn from 0, call from 1), so the checks below can
        # key by either
        [tc(f"call_{i}_{j + 1}", tool, target=target) for j, (tool, target) in enumerate(turn)]
        for i, turn in enumerate(turns)
    ]
    tools = [counting_tool(rec, name, permission) for name, permission in TOOLS.items()]
    registry = registry_of("prop", tools, scripted(*planned, reply("finished")), RULES)
    ledger = InMemoryLedger()
    outcome = await Runner(registry, ledger).run("prop", "go", run_id="run_prop")

    sticky: dict[str, str] = {}
    expected: dict[str, str] = {}  # call id -> outcome
    rejected_texts: dict[str, str] = {}
    for number, calls in enumerate(planned, start=1):
        must_pause: list[str] = []
        for proposed in calls:
            gate = expected_gate(proposed.name, str(proposed.arguments["target"]))  # type: ignore[index]
            if gate == "allow":
                expected[proposed.id] = "executed"
            elif gate == "deny":
                expected[proposed.id] = "denied"
            elif proposed.name in sticky:
                expected[proposed.id] = "rejected"
            else:
                must_pause.append(proposed.id)
        if not must_pause:
            continue

        assert isinstance(outcome, Paused), f"turn {number} should pause for {must_pause}"
        assert outcome.state.turns == number
        assert [p.call_id for p in outcome.pending] == must_pause
        ran = rec.per_call_id()
        assert not any(ran[c.id] for c in calls), "a paused turn already ran some of its calls"

        decisions: dict[str, Decision] = {}
        for pending in outcome.pending:
            kind = data.draw(st.sampled_from(sorted(KINDS)), label=f"decision {pending.call_id}")
            decisions[pending.call_id] = make_decision(kind, pending, data.draw(st.booleans()))
            expected[pending.call_id], leaves = KINDS[kind]
            if leaves is not None:
                sticky[pending.tool] = leaves
            if kind == "reject_message":
                rejected_texts[pending.call_id] = f"no to {pending.call_id}"

        if data.draw(st.booleans(), label="fresh ledger (another worker)"):
            ledger = InMemoryLedger()
        outcome = await Runner(registry, ledger).resume(roundtrip(outcome.state), decisions)

    assert isinstance(outcome, Succeeded) and outcome.output == "finished"
    state = outcome.state
    assert {c.call_id: c.outcome for c in state.calls} == expected
    assert state.sticky == sticky

    ran = rec.per_call_id()
    assert max(ran.values(), default=1) == 1, f"a call ran twice: {ran}"
    assert set(ran) == {cid for cid, result in expected.items() if result == "executed"}
    for record in state.calls:
        if record.outcome == "executed":
            assert record.gate == "allow" or (
                record.gate == "ask" and isinstance(record.decision, Approve)
            )
        if record.call_id in rejected_texts:
            assert record.result == rejected_texts[record.call_id]

    replies = Counter(m.tool_call_id for m in state.transcript if m.role == "tool")
    assert max(replies.values(), default=1) == 1, "a call got two tool messages"
    for record in state.calls:
        if record.outcome != "denied":
            assert replies[record.call_id] == 1, f"{record.call_id} never reached the model"


@settings(max_examples=150, deadline=None)
@given(model_turns, st.data())
def test_any_turns_and_decisions_keep_the_execution_invariants(
    turns: list[list[tuple[str, str]]], data: st.DataObject
) -> None:
    asyncio.run(check_run(turns, data))
