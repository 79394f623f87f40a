"""An OpenAI Agents SDK agent hosted by countersign, with a scripted SDK `Model` (offline).

The model is stateless: it answers from the conversation it is given, as a real one does,
so any worker that rebuilds the agent gets the same answers. The runner and the in-memory
ledger stand in for the worker and Redis here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, FunctionTool, ModelResponse, RunConfig, Usage, function_tool
from agents.models.interface import Model
from agents.testing.model import assistant_message, function_call

from agent_host import idempotency_key
from agent_host.adapters.openai_agents import OpenAIAgentsAgent
from agent_host.errors import AgentChangedError, ConfigurationError
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import Approve, Reject
from agent_host.runtime.hosted import NOT_WHAT_WAS_APPROVED, UNKNOWN_OUTCOME
from agent_host.runtime.ledger import InMemoryLedger
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Failed, Paused, Runner, Succeeded
from tests.unit.adapters.in_doubt import resumed_with_its_call_in_doubt

NO_TRACES = RunConfig(tracing_disabled=True)


def tool_outputs(input: Any) -> list[dict[str, Any]]:
    """The tools' outputs in a model's input, in order."""
    items = input if isinstance(input, list) else []
    return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


class Scripted(Model):
    """Turn n (counted by the tool outputs in the input) answers with `turns[n]`'s calls."""

    def __init__(self, *turns: list[tuple[str, dict[str, Any], str]]) -> None:
        self.turns = turns

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        outputs = tool_outputs(input)
        answered, seen = 0, 0
        while answered < len(self.turns) and len(outputs) >= seen + len(self.turns[answered]):
            seen += len(self.turns[answered])
            answered += 1
        if answered == len(self.turns):
            text = "; ".join(str(o["output"]) for o in outputs)
            return ModelResponse(
                output=[assistant_message(f"done. {text}")], usage=Usage(), response_id=None
            )
        calls = [function_call(name, args, call_id=cid) for name, args, cid in self.turns[answered]]
        return ModelResponse(
            output=[assistant_message("On it."), *calls], usage=Usage(), response_id=None
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")


LOOKUP = ("lookup_order", {"order_id": "124"}, "fc_1")
REFUND = ("issue_refund", {"order_id": "124", "amount": 12.5}, "fc_2")


class Shop:
    def __init__(self) -> None:
        self.effects: list[tuple[str, Any]] = []

    def tools(self, *, refund_needs_approval: bool = True) -> list[FunctionTool]:
        @function_tool
        def lookup_order(order_id: str) -> str:
            """Look an order up."""
            self.effects.append(("lookup", order_id))
            return f"order {order_id}: 12.50, paid twice"

        @function_tool(needs_approval=refund_needs_approval)
        def issue_refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.effects.append(("refund", (order_id, amount)))
            return f"refunded {amount}"

        return [lookup_order, issue_refund]

    def hosted(self, model: Model, **options: Any) -> OpenAIAgentsAgent:
        needs = options.pop("refund_needs_approval", True)
        agent = Agent(
            name="support",
            instructions="Help.",
            tools=self.tools(refund_needs_approval=needs),
            model=model,
        )
        return OpenAIAgentsAgent(agent, run_config=NO_TRACES, **options)


def runner_for(hosted: OpenAIAgentsAgent, ledger: InMemoryLedger | None = None) -> Runner:
    return Runner(AgentRegistry({"support": lambda: hosted}), ledger or InMemoryLedger())


async def paused(runner: Runner) -> Paused:
    outcome = await runner.run("support", "Refund order 124, I was billed twice.")
    assert isinstance(outcome, Paused), outcome
    return outcome


async def test_the_whole_turn_pauses_and_only_the_gated_call_waits() -> None:
    shop = Shop()
    outcome = await paused(runner_for(shop.hosted(Scripted([LOOKUP, REFUND]))))

    assert shop.effects == []
    assert [(c.call_id, c.model_call_id, c.tool, c.gate) for c in outcome.state.calls] == [
        ("call_0_1", "fc_1", "lookup_order", "allow"),
        ("call_0_2", "fc_2", "issue_refund", "ask"),
    ]
    [pending] = outcome.pending
    assert pending.arguments == {"order_id": "124", "amount": 12.5}
    assert outcome.state.transcript[-1].content == "On it."


async def test_an_approved_call_runs_once_even_when_the_resume_is_redelivered() -> None:
    shop, ledger = Shop(), InMemoryLedger()
    runner = runner_for(shop.hosted(Scripted([LOOKUP, REFUND])), ledger)
    saved = RunState.from_json((await paused(runner)).state.to_json())
    [pending] = saved.pending
    approve = {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}

    first = await runner.resume(saved, approve)
    again = await runner.resume(saved, approve)

    assert isinstance(first, Succeeded) and isinstance(again, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 12.5))]
    assert "refunded 12.5" in first.output and again.output == first.output


async def test_a_rejection_never_runs_the_call_and_its_message_reaches_the_model() -> None:
    shop = Shop()
    runner = runner_for(shop.hosted(Scripted([LOOKUP, REFUND])))
    outcome = await paused(runner)
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state, {pending.call_id: Reject(decided_by="U_LEAD", message="Not a duplicate.")}
    )

    assert isinstance(done, Succeeded)
    assert shop.effects == [("lookup", "124")]
    assert "Not a duplicate." in done.output


async def test_the_operators_policy_overrides_the_sdks_flag() -> None:
    shop = Shop()
    hosted = shop.hosted(
        Scripted([LOOKUP, REFUND]),
        refund_needs_approval=False,
        policy={"lookup_order": Permission.ASK},
    )

    outcome = await paused(runner_for(hosted))

    assert [(c.tool, c.gate) for c in outcome.state.calls] == [
        ("lookup_order", "ask"),
        ("issue_refund", "allow"),
    ]
    with pytest.raises(ConfigurationError, match="lookup_ordr"):
        shop.hosted(Scripted(), policy={"lookup_ordr": Permission.DENY})


async def test_a_changed_agent_is_refused_at_resume() -> None:
    shop = Shop()
    outcome = await paused(runner_for(shop.hosted(Scripted([LOOKUP, REFUND]))))
    [pending] = outcome.pending
    changed = runner_for(
        shop.hosted(Scripted([LOOKUP, REFUND]), policy={"lookup_order": Permission.DENY})
    )

    with pytest.raises(AgentChangedError, match="policy of tool lookup_order changed"):
        await changed.resume(outcome.state, {pending.call_id: Approve(call_hash=pending.call_hash)})
    assert shop.effects == []


async def test_arguments_altered_in_the_saved_run_state_are_not_run() -> None:
    shop = Shop()
    runner = runner_for(shop.hosted(Scripted([LOOKUP, REFUND])))
    outcome = await paused(runner)
    [pending] = outcome.pending
    state = outcome.state.model_copy(deep=True)
    assert state.hosted_state is not None
    approved = json.dumps({"order_id": "124", "amount": 12.5}, separators=(",", ":"))
    altered = json.dumps({"order_id": "124", "amount": 9999}, separators=(",", ":"))
    assert json.dumps(approved)[1:-1] in state.hosted_state
    state.hosted_state = state.hosted_state.replace(
        json.dumps(approved)[1:-1], json.dumps(altered)[1:-1]
    )

    done = await runner.resume(state, {pending.call_id: Approve(call_hash=pending.call_hash)})

    # The SDK itself notices the call no longer matches its record and stops; had it not,
    # the call guard would have refused the call. Either way nothing was refunded.
    assert [e for e in shop.effects if e[0] == "refund"] == []
    if isinstance(done, Succeeded):
        assert NOT_WHAT_WAS_APPROVED.format(call_id="call_0_2") in done.output
    else:
        assert isinstance(done, Failed) and "tool call ID" in done.error


async def test_repeated_call_ids_fail_the_run_closed() -> None:
    shop = Shop()
    other = ("issue_refund", {"order_id": "125", "amount": 3.0}, "fc_2")

    outcome = await runner_for(shop.hosted(Scripted([REFUND, other]))).run("support", "both")

    assert isinstance(outcome, Failed)
    assert "Use a unique call ID" in outcome.error
    assert shop.effects == []


async def test_agents_whose_calls_could_run_unseen_are_refused() -> None:
    helper = Agent(name="helper")
    with pytest.raises(ConfigurationError, match="handoffs"):
        OpenAIAgentsAgent(Agent(name="triage", handoffs=[helper]))


async def test_the_approvers_comment_reaches_the_model_with_the_tools_result() -> None:
    shop = Shop()
    runner = runner_for(shop.hosted(Scripted([LOOKUP, REFUND])))
    outcome = await paused(runner)
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state,
        {
            pending.call_id: Approve(
                decided_by="U_LEAD", call_hash=pending.call_hash, comment="Checked in Stripe."
            )
        },
    )

    assert isinstance(done, Succeeded)
    assert "Reviewer U_LEAD commented: Checked in Stripe." in done.output
    assert shop.effects.count(("refund", ("124", 12.5))) == 1


class RawArguments(Model):
    """Calls `tool` with `raw` as its arguments' text, then ends with what the tool said."""

    def __init__(self, tool: str, raw: str) -> None:
        self.tool, self.raw = tool, raw

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        outputs = tool_outputs(input)
        if outputs:
            said = str(outputs[0]["output"])
            return ModelResponse(output=[assistant_message(said)], usage=Usage(), response_id=None)
        call = function_call(self.tool, {}, call_id="fc_1")
        call.arguments = self.raw
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")


async def test_a_call_whose_arguments_are_not_an_object_is_not_run() -> None:
    """The model sends its arguments double-encoded (a JSON string holding the object): a
    policy reading them as no arguments at all let `prod-db` through unasked, and a tool
    decoding its input leniently deleted it. Such a call is refused, and the model told."""
    deleted: list[str] = []

    async def delete_repo(ctx: Any, raw: str) -> str:
        data = json.loads(raw)
        data = json.loads(data) if isinstance(data, str) else data  # lenient
        deleted.append(data["name"])
        return f"deleted {data['name']}"

    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    tool = FunctionTool(
        name="delete_repo",
        description="Delete a repository.",
        params_json_schema=schema,
        on_invoke_tool=delete_repo,
    )

    def prod_needs_a_person(arguments: Any, context: Any) -> Permission:
        return Permission.ASK if "prod" in str(arguments.get("name", "")) else Permission.ALLOW

    model = RawArguments("delete_repo", json.dumps(json.dumps({"name": "prod-db"})))
    agent = Agent(name="support", instructions="Help.", tools=[tool], model=model)
    hosted = OpenAIAgentsAgent(
        agent, run_config=NO_TRACES, policy={"delete_repo": prod_needs_a_person}
    )

    outcome = await runner_for(hosted).run("support", "delete prod-db")

    assert deleted == []
    assert isinstance(outcome, Succeeded), outcome
    [call] = outcome.state.calls
    assert (call.gate, call.outcome) == ("invalid", "invalid")
    assert "its arguments are not a JSON object" in outcome.output


async def test_an_approved_tool_that_timed_out_is_recorded_as_started_not_as_never_run() -> None:
    """The SDK cancels a tool past its timeout, after it began moving money: the record says
    the call failed once let through, never that the framework did not run it."""
    started: list[float] = []

    @function_tool(needs_approval=True, timeout=0.05)
    async def wire(amount: float) -> str:
        """Wire money."""
        started.append(amount)
        await asyncio.sleep(5)
        return "wired"

    model = Scripted([("wire", {"amount": 5.0}, "fc_1")])
    agent = Agent(name="support", instructions="Help.", tools=[wire], model=model)
    runner = runner_for(OpenAIAgentsAgent(agent, run_config=NO_TRACES))
    outcome = await paused(runner)
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )

    assert started == [5.0]
    record = done.state.call(pending.call_id)
    assert record is not None and record.outcome == "unknown_outcome"
    assert record.result is not None and "failed once it was let through" in record.result


async def test_an_approved_call_started_before_and_never_finished_is_recorded_as_unknown() -> None:
    """A worker died inside the call, or another worker is running it now: it is not run
    again, and the run's record says its outcome is unknown, not that it ran."""
    shop, ledger = Shop(), InMemoryLedger()
    runner = runner_for(shop.hosted(Scripted([REFUND])), ledger)
    outcome = await paused(runner)

    record = await resumed_with_its_call_in_doubt(runner, ledger, outcome)

    assert shop.effects == []
    assert (record.outcome, record.result) == ("unknown_outcome", UNKNOWN_OUTCOME)


async def test_an_approved_tool_reads_countersign_s_idempotency_key() -> None:
    keys: list[str] = []

    @function_tool(needs_approval=True)
    def wire(amount: float) -> str:
        """Wire money."""
        keys.append(idempotency_key())
        return "wired"

    model = Scripted([("wire", {"amount": 5.0}, "fc_1")])
    agent = Agent(name="support", instructions="Help.", tools=[wire], model=model)
    runner = runner_for(OpenAIAgentsAgent(agent, run_config=NO_TRACES))
    outcome = await runner.run("support", "wire it", run_id="run_k")
    assert isinstance(outcome, Paused), outcome
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )

    assert isinstance(done, Succeeded), done
    assert keys == [f"run_k:{pending.call_id}"]
