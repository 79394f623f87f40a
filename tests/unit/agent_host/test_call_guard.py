"""The call guard: a hosted framework's calls run only as decided, at most once each."""

from __future__ import annotations

from typing import Any

from agent_host.runtime.checkpoint import CallRecord, call_hash
from agent_host.runtime.decisions import Approve, Reject
from agent_host.runtime.hosted import NOT_SEEN, NOT_WHAT_WAS_APPROVED, UNKNOWN_OUTCOME, CallGuard
from agent_host.runtime.ledger import InMemoryLedger

FP = "f" * 64


def record(call_id: str, framework_id: str, arguments: dict[str, Any], **fields: Any) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        model_call_id=framework_id,
        tool="refund",
        arguments=arguments,
        call_hash=call_hash(FP, "refund", arguments),
        turn=1,
        **({"gate": "ask"} | fields),
    )


class Tool:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    async def invoke(self, arguments: dict[str, Any] | str) -> str:
        """What the guard runs: with the arguments it hands over (the decided ones)."""
        assert isinstance(arguments, dict)
        self.ran.append(arguments)
        return f"refunded {arguments['amount']}"


async def test_only_approved_calls_run_and_only_with_the_approved_arguments() -> None:
    tool, ledger = Tool(), InMemoryLedger()
    approved = record("call_0_1", "fc", {"amount": 5}, decision=Approve())
    rejected = record("call_0_2", "fr", {"amount": 6}, decision=Reject())
    guard = CallGuard("run_1", FP, ledger, [approved, rejected])

    altered = await guard.run("fc", "refund", {"amount": 500}, tool.invoke)
    refused = await guard.run("fr", "refund", {"amount": 6}, tool.invoke)
    unseen = await guard.run("fx", "refund", {"amount": 7}, tool.invoke)
    ran = await guard.run("fc", "refund", {"amount": 5}, tool.invoke)
    twice = await guard.run("fc", "refund", {"amount": 5}, tool.invoke)

    assert altered == NOT_WHAT_WAS_APPROVED.format(call_id="call_0_1")
    assert refused == NOT_WHAT_WAS_APPROVED.format(call_id="call_0_2")
    assert unseen == NOT_SEEN
    assert ran == "refunded 5"
    assert twice == NOT_WHAT_WAS_APPROVED.format(call_id="call_0_1")  # used up in this step
    assert tool.ran == [{"amount": 5}]


async def test_a_redone_step_gets_the_recorded_result_and_a_new_call_under_an_old_id_runs() -> None:
    tool, ledger = Tool(), InMemoryLedger()
    let_through = record("call_2_1", "fc", {"amount": 5}, gate="allow")
    await CallGuard("run_1", FP, ledger, [let_through]).run(
        "fc", "refund", {"amount": 5}, tool.invoke
    )

    # the worker died; the step is redone from the checkpoint
    again = CallGuard("run_1", FP, ledger, [let_through])
    replayed = await again.run("fc", "refund", {"amount": 5}, tool.invoke)
    # the model, asked again, planned another call that got the same countersign id
    other = record("call_2_1", "fc", {"amount": 9}, gate="allow")
    fresh = await CallGuard("run_1", FP, ledger, [other]).run(
        "fc", "refund", {"amount": 9}, tool.invoke
    )

    assert replayed == "refunded 5"
    assert fresh == "refunded 9"
    assert tool.ran == [{"amount": 5}, {"amount": 9}]


async def test_a_call_whose_worker_died_mid_call_is_not_run_again() -> None:
    tool, ledger = Tool(), InMemoryLedger()
    approved = record("call_0_1", "fc", {"amount": 5}, decision=Approve())
    await ledger.claim("run_1", f"call_0_1#{approved.call_hash[:16]}")  # started, never finished

    result = await CallGuard("run_1", FP, ledger, [approved]).run(
        "fc", "refund", {"amount": 5}, tool.invoke
    )

    assert result == UNKNOWN_OUTCOME
    assert tool.ran == []


async def test_an_edited_approval_matches_the_call_as_shown_and_runs_the_edited_arguments() -> None:
    tool, ledger = Tool(), InMemoryLedger()
    edited = Approve(
        decided_by="U_LEAD",
        edited_arguments={"amount": 3},
        original_arguments={"amount": 5},
        edited_by="U_LEAD",
    )
    approved = record("call_0_1", "fc", {"amount": 5}, decision=edited)

    # the framework holds the model's arguments, not the edited ones: those never match
    held_edited = await CallGuard("run_1", FP, ledger, [approved]).run(
        "fc", "refund", {"amount": 3}, tool.invoke
    )
    ran = await CallGuard("run_1", FP, ledger, [approved]).run(
        "fc", "refund", {"amount": 5}, tool.invoke
    )
    redelivered = await CallGuard("run_1", FP, ledger, [approved]).run(
        "fc", "refund", {"amount": 5}, tool.invoke
    )

    assert held_edited == NOT_WHAT_WAS_APPROVED.format(call_id="call_0_1")
    assert tool.ran == [{"amount": 3}]
    assert ran == redelivered
    assert ran.startswith("refunded 3\n\nNote: reviewer U_LEAD edited the arguments")
    assert "amount: 5 -> 3" in ran
