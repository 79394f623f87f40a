"""A hosted agent's model, or someone with the checkpoint key, trying to get a call run that
no person approved, or approved with other arguments. Each case runs through a real Redis,
the Slack stand-in and signed clicks, once per framework where both can be led there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_host.durable import keys as K
from agent_host.runtime.checkpoint import call_hash
from bot import blocks
from tests.support.hosted_agents import AGENTS, CALLBACKS, FINAL, LIMITED
from tests.support.stack import CHANNEL, REVIEWER, Stack

from .test_hosted_in_slack import effects, hosted_stack, run_detail

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in AGENTS.items()]


async def reject(stack: Stack, request: Any, reason: str) -> None:
    await stack.click(REVIEWER, request, blocks.REJECT)
    view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
    values = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
    assert (await stack.standin.submit_view(REVIEWER, view["id"], values)).status == 200


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_two_refunds_of_one_turn_each_run_only_as_decided(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    """The same tool twice in one turn, with different arguments: approving one approves
    only that one."""
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124 twice")
        requests = await stack.pending_requests(run_id, count=2)
        by_amount = {r.arguments["amount"]: r for r in requests}
        assert sorted(by_amount) == [12.5, 22.5]

        await stack.click(REVIEWER, by_amount[12.5], blocks.APPROVE)
        await stack.decided(by_amount[12.5].request_id)
        await reject(stack, by_amount[22.5], "one refund is enough")
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "succeeded", info.error
        assert [(e["order_id"], e["amount"]) for e in effects(stack, "refund", agent)] == [
            ("124", 12.5)
        ]
        assert effects(stack, "model_request", agent)[-1]["results"] == [
            "order 124: paid twice",
            "refunded 12.50 to order 124",
            "one refund is enough",
        ]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_model_repeating_a_call_id_gets_nothing_run_or_asked(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    """Two refunds under one id: an approval of either could be taken for the other, so
    the framework refuses the turn and countersign fails the run; nothing is posted."""
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124 twice same id")
        info = await stack.run_status(run_id, "succeeded", "failed", "waiting")

        assert info.status == "failed"
        assert "unique" in info.error.lower() and "id" in info.error.lower()
        assert await stack.host.store.run_requests(run_id) == []
        assert effects(stack, "refund", agent) == effects(stack, "lookup", agent) == []


@pytest.mark.parametrize(
    ("agent", "shown"),
    [
        pytest.param(AGENTS["pydantic-ai"], 12.0, id="pydantic-ai"),
        pytest.param(AGENTS["openai-agents"], 12, id="openai-agents"),
    ],
)
async def test_arguments_the_framework_converts_are_approved_as_they_will_run(
    agent: str, shown: float, redis_url: str, tmp_path: Path
) -> None:
    """The model sends `amount: 12` for a float. Pydantic AI validates it to 12.0 before the
    tool runs: the reviewer is shown that, and the approval matches the call that runs."""
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124 amount 12")
        [request] = await stack.pending_requests(run_id)
        assert request.arguments == {"order_id": "124", "amount": shown}
        assert type(request.arguments["amount"]) is type(shown)

        await stack.click(REVIEWER, request, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "succeeded", info.error
        assert info.output == f"{FINAL}order 124: paid twice; refunded 12.00 to order 124"
        assert [e["amount"] for e in effects(stack, "refund", agent)] == [12.0]


async def test_a_tool_taking_a_model_with_a_date_is_asked_about_and_runs(
    redis_url: str, tmp_path: Path
) -> None:
    """Validated arguments hold a `date` inside a model: shown and hashed as JSON."""
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(CALLBACKS, "call me back")
        [request] = await stack.pending_requests(run_id)
        assert request.arguments == {"slot": {"day": "2026-01-02", "minutes": 30}}

        await stack.click(REVIEWER, request, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "succeeded", info.error
        assert info.output == f"{FINAL}call back on 02 January for 30 minutes"
        assert effects(stack, "callback", CALLBACKS) == [
            {"kind": "callback", "agent": CALLBACKS, "day": "2026-01-02", "minutes": 30}
        ]


@pytest.mark.parametrize("framework", list(LIMITED))
@pytest.mark.parametrize("amount", ["NaN", "Infinity", "1e999", "-Infinity"])
async def test_nan_or_infinity_never_slips_past_a_limit(
    framework: str, amount: str, redis_url: str, tmp_path: Path
) -> None:
    """The operator lets refunds up to 100 through. NaN compares false with any limit, and
    Python's JSON reads it; a call with it is refused, and the model is told why."""
    agent = LIMITED[framework]
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, f"refund order 124 amount {amount}")
        info = await stack.run_status(run_id, "succeeded", "failed", "waiting")

        assert info.status == "succeeded", info.error
        assert effects(stack, "refund", agent) == []
        assert await stack.host.store.run_requests(run_id) == []
        told = effects(stack, "model_request", agent)[-1]["results"][1]
        assert told == (
            "Tool issue_refund was not run: amount is NaN or Infinity, which is not a JSON "
            "number. Call it again with a finite number."
        )
        detail = await run_detail(stack, run_id)
        assert [(c["tool"], c["outcome"]) for c in detail["tool_calls"]] == [
            ("lookup_order", "executed"),
            ("issue_refund", "invalid"),
        ]


async def test_arguments_nested_past_what_a_reviewer_could_read_are_refused(
    redis_url: str, tmp_path: Path
) -> None:
    """The Agents SDK validates arguments only when the tool runs: 40 levels of arrays reach
    the planning, which refuses them (they could be neither shown nor judged), and the
    model is told why."""
    agent = LIMITED["openai-agents"]
    deep = "[" * 40 + "]" * 40
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, f"refund order 124 amount {deep}")
        info = await stack.run_status(run_id, "succeeded", "failed", "waiting")

        assert info.status == "succeeded", info.error
        assert await stack.host.store.run_requests(run_id) == []
        assert effects(stack, "refund", agent) == []
        told = effects(stack, "model_request", agent)[-1]["results"][1]
        assert told.startswith(
            "Tool issue_refund was not run: its arguments are nested more than 32 levels deep"
        )


async def test_a_limit_that_cannot_judge_the_arguments_asks_a_person(
    redis_url: str, tmp_path: Path
) -> None:
    """`amount: "lots"` makes the operator's limit raise (the Agents SDK validates arguments
    only when the tool runs): the call goes to a person, at high severity, never through."""
    agent = LIMITED["openai-agents"]
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124 amount lots")
        [request] = await stack.pending_requests(run_id)

        assert request.arguments == {"order_id": "124", "amount": "lots"}
        assert request.severity == "high"
        assert "could not judge these arguments (TypeError)" in request.reason
        assert effects(stack, "refund", agent) == effects(stack, "lookup", agent) == []


async def test_pydantic_ai_validates_arguments_before_any_policy_sees_them(
    redis_url: str, tmp_path: Path
) -> None:
    agent = LIMITED["pydantic-ai"]
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124 amount lots")
        info = await stack.run_status(run_id, "succeeded", "failed", "waiting")

        assert info.status == "succeeded", info.error
        assert await stack.host.store.run_requests(run_id) == []
        assert effects(stack, "refund", agent) == []
        told = effects(stack, "model_request", agent)[-1]["results"]
        assert any("amount" in text and "valid number" in text for text in told), told


async def rewrite_checkpoint(stack: Stack, run_id: str, change: Any) -> None:
    """What someone holding the encryption key could do: decrypt, change, encrypt again."""
    store = stack.host.store
    info = await store.run_info(run_id)
    assert info is not None
    state = await store.load_checkpoint(run_id, info.pause_id)
    change(state)
    blob = store.keyring.encrypt(state.to_json().encode(), run_id=run_id, request_id=info.pause_id)
    await store.redis.set(K.Keys(run_id).checkpoint, blob)


def refund_amount_in(hosted_state: str, old: float, new: float) -> str:
    """The refund's amount changed wherever the framework's state spells it."""
    assert hosted_state.count(str(old)) >= 1, hosted_state
    return hosted_state.replace(str(old), str(new))


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_framework_state_altered_in_the_checkpoint_runs_nothing_unapproved(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)

        def alter(state: Any) -> None:
            state.hosted_state = refund_amount_in(state.hosted_state, 12.5, 9999.5)

        await rewrite_checkpoint(stack, run_id, alter)
        await stack.click(REVIEWER, request, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert effects(stack, "refund", agent) == []  # neither 9999.5 nor 12.5
        if info.status == "succeeded":  # the call guard refused what was not approved
            assert "the arguments differ from those that were approved" in info.output
        else:  # the framework itself noticed its state no longer matched
            assert info.error, info


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_checkpoint_whose_call_record_was_altered_too_fails_closed(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    """Altering countersign's record of the call as well (arguments and hash) does not
    help: the reviewer's decision binds to the hash of the call they were shown."""
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)

        def alter(state: Any) -> None:
            state.hosted_state = refund_amount_in(state.hosted_state, 12.5, 9999.5)
            record = state.call(request.call_id)
            record.arguments = {"order_id": "124", "amount": 9999.5}
            record.call_hash = call_hash(state.agent_fingerprint, record.tool, record.arguments)

        await rewrite_checkpoint(stack, run_id, alter)
        await stack.click(REVIEWER, request, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "failed"
        assert "the decision was made on a different call" in info.error
        assert effects(stack, "refund", agent) == effects(stack, "lookup", agent) == []
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert outcome["text"].startswith("Run failed: ")
        assert json.dumps(request.arguments)  # what the reviewer saw stays what it was
