"""Edit, then approve, for a hosted OpenAI Agents SDK agent: `editable=` on the adapter, the
edit checked against the tool's `params_json_schema` and judged again by the policy, and the
call guard invoking the tool with the edited arguments, once (invariant 19)."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, function_tool

from agent_host.adapters.json_schema import check_arguments
from agent_host.adapters.openai_agents import OpenAIAgentsAgent
from agent_host.errors import ConfigurationError, InvalidArguments, InvalidDecisionError
from agent_host.runtime.decisions import Approve
from agent_host.runtime.hosted import ToolGate
from agent_host.runtime.policy import Severity, Verdict
from agent_host.runtime.runner import Succeeded
from tests.support.edit_decisions import edit
from tests.unit.adapters.test_openai_agents_adapter import (
    LOOKUP,
    NO_TRACES,
    REFUND,
    Scripted,
    Shop,
    paused,
    runner_for,
)


def big_refunds_are_high(arguments: Any, context: Any) -> Verdict:
    if float(arguments.get("amount", 0)) > 100:
        return Verdict.ask("a big refund", Severity.HIGH)
    return Verdict.ask("a refund", Severity.MEDIUM)


def hosted(shop: Shop, **options: Any) -> OpenAIAgentsAgent:
    options.setdefault("editable", {"issue_refund": ["amount"]})
    return shop.hosted(Scripted([LOOKUP, REFUND]), **options)


async def test_an_edited_approval_runs_the_edited_arguments_once_and_the_model_is_told() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused(runner)
    [pending] = outcome.pending
    assert pending.editable == ["amount"]

    check, approve = await edit(runner, outcome.state, pending, {"amount": 6.5}, "U_LEAD")
    assert check.ok and check.changed and approve is not None
    done = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(done, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 6.5))]
    assert "refunded 6.5" in done.output
    assert "Note: reviewer U_LEAD edited the arguments before approving (amount: 12.5 -> 6.5)" in (
        done.output
    )


async def test_a_redelivered_resume_of_an_edited_approval_does_not_run_it_again() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused(runner)
    [pending] = outcome.pending
    _, approve = await edit(runner, outcome.state, pending, {"amount": 6.5}, "U_LEAD")
    assert approve is not None

    first = await runner.resume(outcome.state, {pending.call_id: approve})
    again = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(first, Succeeded) and isinstance(again, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 6.5))]
    assert again.output == first.output


async def test_an_edit_of_an_argument_the_adapter_did_not_name_is_refused() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused(runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"order_id": "999"}, "U_LEAD")

    assert approve is None
    assert check.errors == {"order_id": "issue_refund does not let a reviewer edit order_id"}
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
    outcome = await paused(runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"amount": 500}, "U_LEAD")

    assert approve is None
    assert "needs high severity" in check.refusal and "cannot lower the bar" in check.refusal


async def test_an_edit_that_does_not_fit_the_json_schema_is_refused_on_its_field() -> None:
    shop = Shop()
    runner = runner_for(hosted(shop))
    outcome = await paused(runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"amount": "lots"}, "U_LEAD")

    assert approve is None
    assert check.errors == {"amount": "must be of type number"}


async def test_a_higher_severity_edit_recorded_anyway_fails_closed_at_resume() -> None:
    """Re-checked at resume with the policy: an approval whose edited call needs a higher
    severity than the call was approved at runs nothing, whatever recorded it."""
    shop = Shop()
    runner = runner_for(hosted(shop, policy={"issue_refund": ToolGate(big_refunds_are_high)}))
    outcome = await paused(runner)
    [pending] = outcome.pending
    allowed = {"order_id": "124", "amount": 500}
    from agent_host.runtime.checkpoint import call_hash

    forged = Approve(
        decided_by="U_LEAD",
        call_hash=pending.call_hash,
        edited_arguments=allowed,
        original_arguments=dict(pending.arguments),  # type: ignore[arg-type]
        edited_hash=call_hash(outcome.state.agent_fingerprint, "issue_refund", allowed),
        edited_by="U_LEAD",
    )
    with pytest.raises(InvalidDecisionError, match="need high severity"):
        await runner.resume(outcome.state, {pending.call_id: forged})
    assert shop.effects == []


def test_editable_is_part_of_the_agent_and_names_only_its_own_arguments() -> None:
    shop = Shop()
    plain = shop.hosted(Scripted([REFUND]))
    editable = hosted(shop)

    assert plain.fingerprint() != editable.fingerprint()
    assert hosted(shop, editable={"issue_refund": True}).editable() == {
        "issue_refund": ("order_id", "amount")
    }
    with pytest.raises(ConfigurationError, match="not its arguments"):
        hosted(shop, editable={"issue_refund": ["reason"]})


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "amount": {"type": "number", "minimum": 0},
        "count": {"type": "integer"},
        "speed": {"enum": ["standard", "express"]},
        "notify": {"type": "boolean"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
            "additionalProperties": False,
        }
    },
}


@pytest.mark.parametrize(
    ("arguments", "problems"),
    [
        ({"order_id": "1"}, {"amount": "is required"}),
        ({"order_id": "1", "amount": -1}, {"amount": "must be at least 0"}),
        ({"order_id": "1", "amount": True}, {"amount": "must be of type number"}),
        ({"order_id": "1", "amount": 1, "count": 1.5}, {"count": "must be of type integer"}),
        ({"order_id": "1", "amount": 1, "speed": "slow"}, {"speed": "must be one of "}),
        ({"order_id": "1", "amount": 1, "notify": 1}, {"notify": "must be of type boolean"}),
        ({"order_id": "1", "amount": 1, "note": 3}, {"note": "does not match any"}),
        ({"order_id": "1", "amount": 1, "items": [{}]}, {"items": "0.sku: is required"}),
        ({"order_id": "1", "amount": 1, "extra": 1}, {"extra": "is not an argument"}),
        ({"order_id": "", "amount": 1}, {"order_id": "must be at least 1 characters"}),
    ],
)
def test_the_schema_check_refuses_what_does_not_fit(
    arguments: dict[str, Any], problems: dict[str, str]
) -> None:
    with pytest.raises(InvalidArguments) as refused:
        check_arguments("t", SCHEMA, arguments)
    assert set(refused.value.problems) == set(problems)
    for name, start in problems.items():
        assert refused.value.problems[name].startswith(start)


def test_the_schema_check_passes_what_fits_and_fails_closed_on_what_it_does_not_know() -> None:
    fits = {
        "order_id": "1",
        "amount": 2,
        "count": 3,
        "speed": "express",
        "notify": False,
        "note": None,
        "items": [{"sku": "a"}],
    }
    assert check_arguments("t", SCHEMA, fits) == fits
    unknown = {"type": "object", "properties": {"a": {"type": "string", "uniqueWords": True}}}
    with pytest.raises(InvalidArguments, match="uniqueWords"):
        check_arguments("t", unknown, {"a": "x"})


async def test_an_edit_python_calls_equal_but_json_does_not_runs_as_edited() -> None:
    """`1` edited to `true`: equal to Python, another value to the tool. The tool gets the
    `true` the reviewer approved, and the model is told of the change."""
    seen: list[Any] = []

    @function_tool(needs_approval=True)
    def set_limit(account: str, limit: int | bool) -> str:
        """Set an account's limit; true means unlimited."""
        seen.append(limit)
        return f"limit {limit!r}"

    model = Scripted([("set_limit", {"account": "a", "limit": 1}, "fc_1")])
    agent = Agent(name="support", instructions="Help.", tools=[set_limit], model=model)
    runner = runner_for(
        OpenAIAgentsAgent(agent, run_config=NO_TRACES, editable={"set_limit": ["limit"]})
    )
    outcome = await paused(runner)
    [pending] = outcome.pending

    check, approve = await edit(runner, outcome.state, pending, {"limit": True}, "U_LEAD")
    assert check.ok and check.changed and approve is not None
    done = await runner.resume(outcome.state, {pending.call_id: approve})

    assert isinstance(done, Succeeded)
    assert seen == [True] and isinstance(seen[0], bool)
    assert "(limit: 1 -> true)" in done.output
