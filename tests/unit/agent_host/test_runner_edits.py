"""The runner with an approval's comment and edited arguments: the tool runs once with the
edited arguments, the model reads what changed, by whom, and the comment; an edit that does
not hold up at resume fails closed and runs nothing."""

from __future__ import annotations

from typing import Any

import pytest

from agent_host.errors import DecisionMismatchError, InvalidDecisionError
from agent_host.examples import ExampleEffects
from agent_host.runtime.checkpoint import RunState, call_hash
from agent_host.runtime.decisions import Answer, Approve
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.pause import pause
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Paused, Runner, Succeeded
from agent_host.runtime.tools import tool
from tests.support.agents import registry_of, roundtrip, scripted, tc, tool_messages
from tests.support.edit_agents import PAYOUT_AGENT, SANCTIONED, with_payouts


async def paused(runner: Runner, text: str = "pay 250") -> RunState:
    outcome = await runner.run(PAYOUT_AGENT, text, run_id="run_edit", requested_by="U0REQ")
    assert isinstance(outcome, Paused)
    return roundtrip(outcome.state)


def edit(state: RunState, **changes: Any) -> Approve:
    """An approval with `changes` over the pending call's arguments, as the approval service
    records it."""
    [pending] = state.pending
    assert isinstance(pending.arguments, dict)
    edited = {**pending.arguments, **changes}
    return Approve(
        decided_by="U0REVIEWER",
        call_hash=pending.call_hash,
        comment="checked the invoice",
        edited_arguments=edited,
        original_arguments=dict(pending.arguments),
        edited_hash=call_hash(state.agent_fingerprint, pending.tool, edited),
        edited_by="U0REVIEWER",
    )


def setup() -> tuple[Runner, ExampleEffects]:
    effects = ExampleEffects()
    return Runner(with_payouts(effects)), effects


async def test_a_gated_call_lists_what_a_reviewer_may_edit() -> None:
    runner, _ = setup()
    state = await paused(runner)
    [pending] = state.pending
    assert pending.editable == [
        "vendor",
        "amount",
        "currency",
        "installments",
        "speed",
        "notify",
        "memo",
    ]


async def test_the_tool_runs_once_with_the_edited_arguments_and_the_model_is_told() -> None:
    runner, effects = setup()
    state = await paused(runner)
    decision = edit(state, amount=200.0, currency="USD")
    outcome = await runner.resume(state, {"call_0_1": decision})

    assert isinstance(outcome, Succeeded)
    [payout] = [e for e in effects.events if e["kind"] == "payout"]
    assert (payout["amount"], payout["currency"]) == (200.0, "USD")
    [result] = tool_messages(outcome.state).values()
    assert result.startswith("Paid 200.00 USD to acme")  # the tool's own output comes first
    assert "reviewer U0REVIEWER edited the arguments before approving" in result
    assert 'amount: 250.0 -> 200.0; currency: "EUR" -> "USD"' in result
    assert "Reviewer U0REVIEWER commented: checked the invoice" in result
    [record] = outcome.state.calls
    assert record.arguments["amount"] == 250.0  # what the model proposed stays on record
    assert record.run_arguments["amount"] == 200.0  # type: ignore[index]

    # resumed again from the same checkpoint (a redelivered entry): the ledger holds
    again = await runner.resume(state, {"call_0_1": decision})
    assert isinstance(again, Succeeded)
    assert [e["kind"] for e in effects.events].count("payout") == 1
    assert "edited the arguments" in next(iter(tool_messages(again.state).values()))


async def test_a_comment_alone_reaches_the_model_after_the_result() -> None:
    runner, effects = setup()
    state = await paused(runner)
    [pending] = state.pending
    decision = Approve(decided_by="webhook", call_hash=pending.call_hash, comment="Verified.")
    outcome = await runner.resume(state, {"call_0_1": decision})
    [result] = tool_messages(outcome.state).values()
    assert result == "Paid 250.00 EUR to acme\n\nReviewer webhook commented: Verified."
    assert effects.events[0]["amount"] == 250.0


@pytest.mark.parametrize(
    ("tamper", "error", "words"),
    [
        ({"edited_hash": "0" * 64}, DecisionMismatchError, "not the ones recorded"),
        ({"original_arguments": {"vendor": "x"}}, DecisionMismatchError, "other arguments"),
        ({"always": True}, InvalidDecisionError, "approved once"),
    ],
)
async def test_an_edit_that_does_not_match_fails_closed(
    tamper: dict[str, Any], error: type[Exception], words: str
) -> None:
    runner, effects = setup()
    state = await paused(runner)
    decision = edit(state, amount=200.0).model_copy(update=tamper)
    with pytest.raises(error, match=words):
        await runner.resume(state, {"call_0_1": decision})
    assert effects.events == []


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"amount": "lots"}, "do not fit the tool"),
        ({"amount": 5000.0}, "need critical severity, above the high"),
        ({"vendor": SANCTIONED}, "denied by the policy"),
    ],
)
async def test_an_edit_that_would_not_pass_now_fails_closed(
    changes: dict[str, Any], words: str
) -> None:
    """Recorded by something other than the approval service (or with another policy):
    the runner checks the edit again and runs nothing."""
    runner, effects = setup()
    state = await paused(runner)
    with pytest.raises(InvalidDecisionError, match=words):
        await runner.resume(state, {"call_0_1": edit(state, **changes)})
    assert effects.events == []


async def test_an_edit_of_an_argument_the_tool_keeps_fixed_fails_closed() -> None:
    runner, effects = setup()
    state = await paused(runner)
    [pending] = state.pending
    pending.editable = ["amount"]  # as at the pause; the tool's own list is what counts now
    agent, _ = runner.agent(PAYOUT_AGENT)
    [pay] = agent.tools
    object.__setattr__(pay, "editable", ("amount",))  # a redeploy narrowed what is editable
    with pytest.raises(InvalidDecisionError, match="change vendor, which pay_vendor does not"):
        await runner.resume(state, {"call_0_1": edit(state, vendor="other")})
    assert effects.events == []


async def test_an_edited_call_whose_tool_then_asks_keeps_what_it_ran_with() -> None:
    """The reviewer edits 900 to 100 and approves; the tool pays 100, then asks a question.
    The answer takes the approval's place as the call's decision: the record (and the API
    reading it) still says it ran with 100, not the model's 900."""
    paid: list[float] = []

    @tool(permission=Permission.ASK, editable=["amount"])
    def pay(vendor: str, amount: float) -> str:
        paid.append(amount)
        pause(f"Paid {amount}; mark the invoice settled?")

    model = scripted([tc("m1", "pay", vendor="acme", amount=900.0)], reply("done"))
    runner = Runner(registry_of("payer", [pay], model))
    first = await runner.run("payer", "pay acme")
    assert isinstance(first, Paused)
    state = roundtrip(first.state)
    asked = await runner.resume(state, {"call_0_1": edit(state, amount=100.0)})
    assert isinstance(asked, Paused)

    answer = Answer(decided_by="U0REVIEWER", text="yes")
    done = await runner.resume(roundtrip(asked.state), {"call_0_1": answer})

    assert isinstance(done, Succeeded) and paid == [100.0]
    record = done.state.call("call_0_1")
    assert record is not None and record.result == "yes"
    assert record.arguments == {"vendor": "acme", "amount": 900.0}  # the model's, as proposed
    assert record.run_arguments == {"vendor": "acme", "amount": 100.0}
