"""Edit, then approve, for a hosted Pydantic AI agent: `editable=` on the adapter, the edit
validated by the tool's own Pydantic validator and judged again by the policy, and the call
guard running the tool with the edited arguments, once (invariant 19)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart

from agent_host.adapters.pydantic_ai import PydanticAIAgent
from agent_host.errors import ConfigurationError, InvalidDecisionError
from agent_host.runtime.decisions import Approve
from agent_host.runtime.hosted import ToolGate
from agent_host.runtime.policy import Severity, Verdict
from agent_host.runtime.runner import Paused, Succeeded
from tests.support.edit_decisions import edit
from tests.unit.adapters.test_pydantic_ai_adapter import (
    LOOKUP,
    REFUND,
    Shop,
    paused_run,
    runner_for,
    scripted,
)


def big_refunds_are_high(arguments: Any, context: Any) -> Verdict:
    if float(arguments.get("amount", 0)) > 100:
        return Verdict.ask("a big refund", Severity.HIGH)
    return Verdict.ask("a refund", Severity.MEDIUM)


def hosted(shop: Shop, **options: Any) -> PydanticAIAgent:
    options.setdefault("editable", {"issue_refund": ["amount"]})
    return PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND])), **options)


async def test_an_edited_approval_runs_the_edited_arguments_once_and_the_model_is_told() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    assert pending.editable == ["amount"]  # the request lists it: Edit & approve appears

    check, approve = await edit(runner, outcome.state, pending, {"amount": 6}, "U_LEAD")
    assert check.ok and check.changed and approve is not None
    assert check.arguments == {"order_id": "124", "amount": 6.0}  # as Pydantic validated it
    done = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(done, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 6.0))]
    assert "refunded 6.0" in done.output
    assert "Note: reviewer U_LEAD edited the arguments before approving (amount: 12.5 -> 6.0)" in (
        done.output
    )


async def test_a_redelivered_resume_of_an_edited_approval_does_not_run_it_again() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    _, approve = await edit(runner, outcome.state, pending, {"amount": 6}, "U_LEAD")
    assert approve is not None

    first = await runner.resume(outcome.state, {pending.call_id: approve})
    again = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(first, Succeeded) and isinstance(again, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 6.0))]
    assert again.output == first.output


async def test_an_edit_of_an_argument_the_adapter_did_not_name_is_refused() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"order_id": "999"}, "U_LEAD")

    assert approve is None
    assert check.errors == {"order_id": "issue_refund does not let a reviewer edit order_id"}
    # and at resume, an approval carrying it anyway (a forged one) fails closed
    forged = Approve(
        decided_by="U_LEAD",
        call_hash=pending.call_hash,
        edited_arguments={"order_id": "999", "amount": 12.5},
        original_arguments=dict(pending.arguments),  # type: ignore[arg-type]
        edited_by="U_LEAD",
    )
    with pytest.raises(InvalidDecisionError, match="does not let a reviewer edit"):
        await runner.resume(outcome.state, {pending.call_id: forged})
    assert shop.effects == []


async def test_an_edit_that_needs_a_higher_severity_is_refused() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop, policy={"issue_refund": ToolGate(big_refunds_are_high)}))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    assert pending.severity == "medium"

    check, approve = await edit(runner, outcome.state, pending, {"amount": 500}, "U_LEAD")

    assert approve is None
    assert "needs high severity" in check.refusal and "cannot lower the bar" in check.refusal


async def test_an_edit_the_tools_validator_refuses_is_refused_on_its_field() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"amount": "lots"}, "U_LEAD")

    assert approve is None and set(check.errors) == {"amount"}
    assert "number" in check.errors["amount"]


async def test_an_edit_not_as_recorded_fails_closed_at_resume() -> None:
    """Re-checked at resume: edited arguments that are not the ones the service hashed run
    nothing."""
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    _, approve = await edit(runner, outcome.state, pending, {"amount": 6}, "U_LEAD")
    assert approve is not None
    tampered = approve.model_copy(update={"edited_hash": "0" * 64})

    with pytest.raises(Exception, match="not the ones recorded"):
        await runner.resume(outcome.state, {pending.call_id: tampered})
    assert shop.effects == []


def test_editable_is_part_of_the_agent_and_names_only_its_own_arguments() -> None:
    shop = Shop()
    plain = PydanticAIAgent(shop.agent(scripted([REFUND])))
    editable = hosted(shop)
    everything = hosted(shop, editable={"issue_refund": True})

    assert plain.fingerprint() != editable.fingerprint() != everything.fingerprint()
    assert "editable" not in str(plain.fingerprint_parts())  # unchanged without edits
    assert everything.editable() == {"issue_refund": ("order_id", "amount")}
    with pytest.raises(ConfigurationError, match="not its arguments"):
        hosted(shop, editable={"issue_refund": ["amount", "reason"]})
    with pytest.raises(ConfigurationError, match="does not have"):
        hosted(shop, editable={"refund": True})


def test_a_tool_with_an_args_validator_function_cannot_be_made_editable() -> None:
    from pydantic_ai import Agent

    agent: Agent[None, str] = Agent(scripted([REFUND]), name="support")

    def check(ctx: Any, order_id: str, amount: float) -> None:
        return None

    @agent.tool_plain(requires_approval=True, args_validator=check)
    def issue_refund(order_id: str, amount: float) -> str:
        return "refunded"

    with pytest.raises(ConfigurationError, match="args_validator"):
        PydanticAIAgent(agent, editable={"issue_refund": ["amount"]})


async def test_an_edit_python_calls_equal_but_json_does_not_runs_as_edited() -> None:
    """`1` edited to `true`: equal to Python, another value to the tool. The tool gets the
    `true` the reviewer approved, and the model is told of the change."""
    seen: list[Any] = []
    call = ToolCallPart("set_limit", {"account": "a", "limit": 1}, tool_call_id="c1")
    agent: Agent[None, str] = Agent(scripted([call]), name="support")

    @agent.tool_plain(requires_approval=True)
    def set_limit(account: str, limit: int | bool) -> str:
        """Set an account's limit; true means unlimited."""
        seen.append(limit)
        return f"limit {limit!r}"

    runner = runner_for(PydanticAIAgent(agent, editable={"set_limit": ["limit"]}))
    outcome = await runner.run("support", "Lift the limit.")
    assert isinstance(outcome, Paused), outcome
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"limit": True}, "U_LEAD")
    assert check.ok and check.changed and approve is not None
    done = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(done, Succeeded)
    assert seen == [True] and isinstance(seen[0], bool)
    assert "(limit: 1 -> true)" in done.output
