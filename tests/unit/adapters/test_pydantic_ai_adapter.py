"""A Pydantic AI agent hosted by countersign, with Pydantic AI's own FunctionModel (offline).

The runner and the in-memory ledger stand in for the worker and Redis here; the same
agents through Redis, Slack and a killed worker are in tests/integration and tests/system.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_host import idempotency_key
from agent_host.adapters.pydantic_ai import PydanticAIAgent
from agent_host.errors import AgentChangedError, ConfigurationError
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import Answer, Approve, Reject
from agent_host.runtime.hosted import NOT_WHAT_WAS_APPROVED, UNKNOWN_OUTCOME
from agent_host.runtime.ledger import InMemoryLedger, hosted_entry
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Failed, Paused, Runner, Succeeded
from tests.unit.adapters.in_doubt import resumed_with_its_call_in_doubt

Turn = list[ToolCallPart]


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]


def scripted(*turns: Turn) -> FunctionModel:
    """Answer turn n (counted by the tool results so far) with its calls; then the results."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = returns(messages)
        answered = 0  # turns whose every call has a result
        while answered < len(turns) and len(done) >= sum(map(len, turns[: answered + 1])):
            answered += 1
        turn = turns[answered] if answered < len(turns) else None
        if turn is None:
            text = "; ".join(f"{r.tool_name}: {r.content}" for r in done)
            return ModelResponse(parts=[TextPart(f"done. {text}")])
        return ModelResponse(parts=[TextPart("On it."), *turn])

    return FunctionModel(respond)


class Shop:
    """The tools' side effects, to count them."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, Any]] = []

    def agent(self, model: FunctionModel, *, refund_schema_extra: bool = False) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(model, name="support")

        @agent.tool_plain
        def lookup_order(order_id: str) -> str:
            """Look an order up."""
            self.effects.append(("lookup", order_id))
            return f"order {order_id}: 12.50, paid twice"

        if refund_schema_extra:

            @agent.tool_plain(requires_approval=True)
            def issue_refund(order_id: str, amount: float, note: str = "") -> str:  # type: ignore[misc]
                """Refund an order."""
                self.effects.append(("refund", (order_id, amount)))
                return f"refunded {amount}"
        else:

            @agent.tool_plain(requires_approval=True)
            def issue_refund(order_id: str, amount: float) -> str:
                """Refund an order."""
                self.effects.append(("refund", (order_id, amount)))
                return f"refunded {amount}"

        return agent


LOOKUP = ToolCallPart("lookup_order", {"order_id": "124"}, tool_call_id="c1")
REFUND = ToolCallPart("issue_refund", {"order_id": "124", "amount": 12.5}, tool_call_id="c2")


def runner_for(agent: Any, ledger: InMemoryLedger | None = None) -> Runner:
    return Runner(AgentRegistry({"support": lambda: agent}), ledger or InMemoryLedger())


async def paused_run(shop: Shop, runner: Runner) -> Paused:
    outcome = await runner.run("support", "Refund order 124, I was billed twice.")
    assert isinstance(outcome, Paused), outcome
    return outcome


async def test_the_whole_turn_pauses_and_only_the_gated_call_waits() -> None:
    shop = Shop()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))))

    outcome = await paused_run(shop, runner)

    assert shop.effects == []  # not even the ALLOW lookup ran before the decision
    calls = [(c.call_id, c.model_call_id, c.tool, c.gate) for c in outcome.state.calls]
    assert calls == [
        ("call_0_1", "c1", "lookup_order", "allow"),
        ("call_0_2", "c2", "issue_refund", "ask"),
    ]
    [pending] = outcome.pending
    assert pending.arguments == {"order_id": "124", "amount": 12.5}
    assert outcome.state.hosted_state and "issue_refund" in outcome.state.hosted_state
    assert outcome.state.transcript[-1].content == "On it."  # the agent's last words


async def test_an_approved_call_runs_once_even_when_the_resume_is_redelivered() -> None:
    shop, ledger = Shop(), InMemoryLedger()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))), ledger)
    outcome = await paused_run(shop, runner)
    saved = RunState.from_json(outcome.state.to_json())  # as the worker loads it
    [pending] = saved.pending
    approve = {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}

    first = await runner.resume(saved, approve)
    again = await runner.resume(saved, approve)  # the worker died before saving: redelivered

    assert isinstance(first, Succeeded) and isinstance(again, Succeeded)
    assert sorted(shop.effects, key=repr) == [("lookup", "124"), ("refund", ("124", 12.5))]
    assert "refunded 12.5" in first.output and again.output == first.output
    assert [c.outcome for c in first.state.calls] == ["executed", "executed"]


async def test_a_rejection_never_runs_the_call_and_reaches_the_model() -> None:
    shop = Shop()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state, {pending.call_id: Reject(decided_by="U_LEAD", message="Not a duplicate.")}
    )

    assert isinstance(done, Succeeded)
    assert shop.effects == [("lookup", "124")]
    assert "issue_refund: Not a duplicate." in done.output
    assert done.state.call("call_0_2").outcome == "rejected"  # type: ignore[union-attr]


async def test_the_operators_policy_overrides_the_frameworks_flag() -> None:
    shop = Shop()
    hosted = PydanticAIAgent(
        shop.agent(scripted([LOOKUP, REFUND])), policy={"issue_refund": Permission.DENY}
    )

    done = await runner_for(hosted).run("support", "refund")

    assert isinstance(done, Succeeded)  # nothing to ask: the lookup ran, the refund refused
    assert shop.effects == [("lookup", "124")]
    assert "issue_refund: Tool issue_refund is not permitted" in done.output
    with pytest.raises(ConfigurationError, match="issue_refnd"):
        PydanticAIAgent(shop.agent(scripted()), policy={"issue_refnd": Permission.DENY})


async def test_a_changed_agent_is_refused_at_resume() -> None:
    shop = Shop()
    outcome = await paused_run(
        shop, runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))))
    )
    [pending] = outcome.pending
    changed = runner_for(
        PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]), refund_schema_extra=True))
    )

    with pytest.raises(AgentChangedError, match="schema of tool issue_refund changed"):
        await changed.resume(outcome.state, {pending.call_id: Approve(call_hash=pending.call_hash)})
    assert shop.effects == []


async def test_arguments_altered_in_the_saved_history_are_not_run() -> None:
    """The reviewer approved 12.5; a history that now says 9999 runs nothing."""
    shop = Shop()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    state = outcome.state.model_copy(deep=True)
    assert state.hosted_state is not None
    history = json.loads(state.hosted_state)
    for message in history["messages"]:
        for part in message.get("parts", []):
            if part.get("tool_name") == "issue_refund":
                part["args"] = {"order_id": "124", "amount": 9999}
    state.hosted_state = json.dumps(history)

    done = await runner.resume(state, {pending.call_id: Approve(call_hash=pending.call_hash)})

    assert isinstance(done, Succeeded)
    assert ("refund", ("124", 9999)) not in shop.effects
    assert [e for e in shop.effects if e[0] == "refund"] == []
    assert NOT_WHAT_WAS_APPROVED.format(call_id="call_0_2") in done.output


async def test_a_tool_that_defers_a_question_gets_a_persons_answer() -> None:
    agent: Agent[None, str] = Agent(
        scripted([ToolCallPart("ask_manager", {"topic": "refund"}, tool_call_id="q1")]),
        name="support",
    )

    @agent.tool
    def ask_manager(ctx: RunContext[None], topic: str) -> str:
        """Ask the manager."""
        raise CallDeferred(metadata={"question": f"May I discuss the {topic}?"}, kind="question")

    runner = runner_for(PydanticAIAgent(agent))
    outcome = await runner.run("support", "hi")
    assert isinstance(outcome, Paused)
    [pending] = outcome.pending
    assert (pending.gate, pending.question) == ("question", "May I discuss the refund?")

    # The call let through is recorded as what it was: a question the tool asked, not a
    # call that failed once let through.
    [let_through] = [c for c in outcome.state.calls if c.gate == "allow"]
    assert let_through.outcome == "deferred"
    assert (
        let_through.result
        == f"The tool asked a person a question itself: asked as {pending.call_id}."
    )

    done = await runner.resume(
        outcome.state, {pending.call_id: Answer(text="Yes, go ahead.", decided_by="U_LEAD")}
    )

    assert isinstance(done, Succeeded)
    assert "ask_manager: Yes, go ahead." in done.output


async def test_a_tool_let_through_that_asks_for_approval_itself_waits_for_a_person() -> None:
    effects: list[float] = []
    agent: Agent[None, str] = Agent(
        scripted([ToolCallPart("transfer", {"amount": 5000.0}, tool_call_id="t1")]), name="support"
    )

    @agent.tool
    def transfer(ctx: RunContext[None], amount: float) -> str:
        """Move money; large amounts need approval."""
        if amount > 1000 and not ctx.tool_call_approved:
            raise ApprovalRequired()
        effects.append(amount)
        return "moved"

    runner = runner_for(PydanticAIAgent(agent))
    outcome = await runner.run("support", "move it")

    assert isinstance(outcome, Paused), outcome  # the policy let it through; the tool did not
    assert effects == []
    [pending] = outcome.pending
    assert pending.reason == "the tool itself asked for a person's approval"
    # The call let through is recorded as what it was: deferred by the tool, asked anew.
    [let_through] = [c for c in outcome.state.calls if c.gate == "allow"]
    assert let_through.outcome == "deferred"
    assert (
        let_through.result
        == f"The tool asked for a person's approval itself: asked about as {pending.call_id}."
    )
    done = await runner.resume(
        outcome.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )
    assert isinstance(done, Succeeded) and effects == [5000.0]


async def test_repeated_call_ids_fail_the_run_closed() -> None:
    shop = Shop()
    twice = ToolCallPart("issue_refund", {"order_id": "125", "amount": 1.0}, tool_call_id="c2")
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([REFUND, twice]))))

    outcome = await runner.run("support", "refund both")

    assert isinstance(outcome, Failed)
    assert "unique" in outcome.error and "tool_call_id" in outcome.error
    assert shop.effects == []


async def test_a_framework_failing_after_an_approved_call_ran_records_that_it_ran() -> None:
    """The model API fails on the turn after the refund ran: the run fails, and its state
    says the refund was executed (a requester starting it again knows it already ran)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if returns(messages):
            raise RuntimeError("model API 503")
        return ModelResponse(parts=[TextPart("On it."), REFUND])

    shop = Shop()
    runner = runner_for(PydanticAIAgent(shop.agent(FunctionModel(respond))))
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    approve = {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}

    failed = await runner.resume(outcome.state, approve)

    assert isinstance(failed, Failed) and "model API 503" in failed.error
    assert shop.effects == [("refund", ("124", 12.5))]
    record = failed.state.call(pending.call_id)
    assert record is not None and record.outcome == "executed"
    assert record.result is not None and "refunded 12.5" in record.result


async def test_the_approvers_comment_reaches_the_model_with_the_tools_result() -> None:
    shop = Shop()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([LOOKUP, REFUND]))))
    outcome = await paused_run(shop, runner)
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
    assert "refunded 12.5\n\nReviewer U_LEAD commented: Checked in Stripe." in done.output


async def test_an_approved_tool_that_raised_is_recorded_as_started_not_as_never_run() -> None:
    """The refund moved the money, then raised (a bank timeout): the run's record says the
    tool raised once started and its effect is unknown, never "the framework did not run
    this call", which would invite running it again."""
    moved: list[float] = []
    agent: Agent[None, str] = Agent(scripted([REFUND]), name="support")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        moved.append(amount)
        raise RuntimeError("bank timeout after the money moved")

    runner = runner_for(PydanticAIAgent(agent))
    outcome = await runner.run("support", "Refund order 124.")
    assert isinstance(outcome, Paused), outcome
    [pending] = outcome.pending

    done = await runner.resume(
        outcome.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )

    assert moved == [12.5]
    record = done.state.call(pending.call_id)
    assert record is not None and record.outcome == "unknown_outcome"
    assert record.result is not None
    assert "failed once it was let through (RuntimeError: bank timeout" in record.result
    assert "did not run" not in record.result


async def test_an_approved_call_started_before_and_never_finished_is_recorded_as_unknown() -> None:
    """A worker died inside the call, or another worker is running it now: it is not run
    again, and the run's record says its outcome is unknown, not that it ran."""
    shop, ledger = Shop(), InMemoryLedger()
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([REFUND]))), ledger)
    outcome = await paused_run(shop, runner)

    record = await resumed_with_its_call_in_doubt(runner, ledger, outcome)

    assert shop.effects == []
    assert (record.outcome, record.result) == ("unknown_outcome", UNKNOWN_OUTCOME)


async def test_a_call_id_repeated_after_a_call_in_doubt_is_a_new_call_not_one_that_asked() -> None:
    """The call let through with the refund was started before and never finished; the
    model then calls the same tool under the same id. That is a new call, run as the policy
    says, and the first stays of unknown outcome (not taken for a tool that asked itself)."""
    shop, ledger = Shop(), InMemoryLedger()
    again = ToolCallPart("lookup_order", {"order_id": "125"}, tool_call_id="c1")
    runner = runner_for(PydanticAIAgent(shop.agent(scripted([REFUND, LOOKUP], [again]))), ledger)
    outcome = await paused_run(shop, runner)
    [pending] = outcome.pending
    [lookup] = [c for c in outcome.state.calls if c.gate == "allow"]
    await ledger.claim(outcome.state.run_id, hosted_entry(lookup))  # never finished

    done = await runner.resume(
        outcome.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )

    assert isinstance(done, Succeeded), done
    assert shop.effects == [("refund", ("124", 12.5)), ("lookup", "125")]
    first, second = [c for c in done.state.calls if c.tool == "lookup_order"]
    assert (first.outcome, second.gate, second.outcome) == ("unknown_outcome", "allow", "executed")


async def test_two_approved_calls_under_one_model_id_get_two_idempotency_keys() -> None:
    """The model gives its second refund, in a later turn, the first one's id. Each call's
    key is countersign's (the run's and the call's), so a payment API that drops a repeated
    key would not drop the second, separately approved refund."""
    keys: list[tuple[str, str]] = []
    first = ToolCallPart("issue_refund", {"order_id": "124", "amount": 12.5}, tool_call_id="c2")
    second = ToolCallPart("issue_refund", {"order_id": "999", "amount": 50.0}, tool_call_id="c2")
    agent: Agent[None, str] = Agent(scripted([first], [second]), name="support")

    @agent.tool(requires_approval=True)
    def issue_refund(ctx: RunContext[None], order_id: str, amount: float) -> str:
        """Refund an order."""
        keys.append((order_id, idempotency_key()))
        return "refunded"

    runner = runner_for(PydanticAIAgent(agent))
    outcome = await runner.run("support", "refund both", run_id="run_k")
    for _ in range(2):
        assert isinstance(outcome, Paused), outcome
        [pending] = outcome.pending
        outcome = await runner.resume(
            outcome.state,
            {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)},
        )

    assert isinstance(outcome, Succeeded), outcome
    assert keys == [("124", "run_k:call_0_1"), ("999", "run_k:call_1_1")]


@pytest.mark.parametrize(
    ("call_id", "text", "where"),
    [("c\ud800", "On it.", "calls[0].id"), ("c2", "On it \udc00", "last_words")],
)
async def test_a_model_answer_that_is_not_text_fails_the_run_saying_where(
    call_id: str, text: str, where: str
) -> None:
    """A lone UTF-16 surrogate in a call id or the model's words could be neither saved nor
    shown: the run fails at once, saying so, instead of at every save as countersign's own
    error (each retry asking the model again)."""
    shop = Shop()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        part = ToolCallPart("issue_refund", {"order_id": "1", "amount": 3.0}, tool_call_id=call_id)
        return ModelResponse(parts=[TextPart(text), part])

    runner = runner_for(PydanticAIAgent(shop.agent(FunctionModel(respond))))
    outcome = await runner.run("support", "go")

    assert isinstance(outcome, Failed), outcome
    assert outcome.error == (
        f"the pydantic-ai agent's model answered with a lone UTF-16 surrogate in {where}, "
        "which is not text; nothing of that answer ran"
    )
    assert json.loads(outcome.state.to_json())["status"] == "failed"  # it can be saved
    assert shop.effects == []
