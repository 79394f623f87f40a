"""Edit, then approve, on a hosted agent's call, the whole way: real Redis, the Slack
stand-in, signed requests; Edit & approve -> the modal built from the hosted tool's JSON
schema -> submit -> the approval service's checks -> the resume -> the framework's tool runs
with the edited arguments, once, and its model reads what was changed and by whom."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.decisions import Approve
from bot import blocks
from tests.support.hosted_agents import EDITABLE, REGISTRY
from tests.support.stack import CHANNEL, REVIEWER, running_stack

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in EDITABLE.items()]


def effects(stack: Any, kind: str, agent: str) -> list[dict[str, Any]]:
    return [e for e in stack.effects.all_events() if e["kind"] == kind and e["agent"] == agent]


def field(name: str, value: Any) -> dict[str, Any]:
    return {blocks.edit_block_id(name): {blocks.EDIT_INPUT: value}}


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_edit_and_approve_runs_the_hosted_tool_with_the_edited_arguments_once(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=REGISTRY) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)
        assert request.editable == ("amount",)
        message = stack.message(CHANNEL, request.message_ts)
        actions = [b for b in message["blocks"] if b["type"] == "actions"]
        buttons = [e["action_id"] for b in actions for e in b["elements"]]
        assert blocks.EDIT in buttons

        assert (await stack.click(REVIEWER, request, blocks.EDIT)).status == 200
        view = await stack.opened_view(REVIEWER, blocks.EDIT_MODAL)
        inputs = {b["block_id"]: b for b in view["view"]["blocks"] if b["type"] == "input"}
        assert list(inputs) == [blocks.edit_block_id("amount"), blocks.COMMENT_BLOCK]
        amount = inputs[blocks.edit_block_id("amount")]["element"]
        assert amount["type"] == "number_input" and amount["initial_value"] == "12.5"

        wrong = await stack.standin.submit_view(REVIEWER, view["id"], field("amount", "lots"))
        assert blocks.edit_block_id("amount") in wrong.json()["errors"]
        assert effects(stack, "refund", agent) == []
        submitted = await stack.standin.submit_view(REVIEWER, view["id"], field("amount", "7"))
        assert submitted.status == 200 and submitted.json() is None

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded", info.error
        [refund] = effects(stack, "refund", agent)
        assert (refund["order_id"], refund["amount"]) == ("124", 7.0)
        # what the framework handed its model: the result, then what was changed and by whom
        refund_result = effects(stack, "model_request", agent)[-1]["results"][-1]
        assert refund_result.startswith("refunded 7.00 to order 124")
        assert f"reviewer {REVIEWER} edited the arguments before approving" in refund_result
        assert "amount: 12.5 -> 7.0" in refund_result

        decided = await stack.decided(request.request_id)
        decision = decided.decision
        assert isinstance(decision, Approve) and decision.edited
        assert decision.call_hash == request.call_hash
        assert decision.edited_arguments == {"order_id": "124", "amount": 7.0}
        _, fingerprint = stack.host.runner.agent(agent)
        assert decision.edited_hash == call_hash(
            fingerprint, "issue_refund", decision.edited_arguments
        )
        shown = str((await stack.decided_message(CHANNEL, request.message_ts))["blocks"])
        assert "Edited by <@U0REVIEWER> before approval" in shown

        # the same modal submitted again (Slack's retry, a replay) decides nothing more
        shown = stack.standin.core.workspace.view(view["id"])
        assert shown is not None
        shown.closed = False
        again = await stack.standin.submit_view(REVIEWER, view["id"], field("amount", "3"))
        assert "already approved" in str(again.json())
        await stack.run_status(run_id, "succeeded", "failed")
        assert len(effects(stack, "refund", agent)) == 1
