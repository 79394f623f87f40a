"""Approve with a comment, and edit then approve, through the whole stack: real Redis, the
Slack stand-in, signed requests to /slack/events, a worker resuming the run.

button -> views.open -> view_submission -> the approval service -> the decision -> the
decided message -> the resume runs the (edited) call once -> the model reads what changed.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

from agent_host.approvals import ApprovalRequest
from agent_host.runtime.checkpoint import RunState, call_hash
from agent_host.runtime.decisions import Approve
from bot import blocks
from slack_sandbox.payloads import payload_body
from slack_sandbox.signing import sign_request
from tests.support.edit_agents import PAYOUT_AGENT
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    REQUESTER,
    REVIEWER,
    REVIEWER2,
    SECRET,
    Stack,
    running_stack,
)

from .test_bot_signing import click_body, post

PAYOUTS = {"COUNTERSIGN_AGENTS": "tests.support.edit_agents:registry"}


def arg(name: str) -> str:
    return blocks.edit_block_id(name)


def typed(value: Any) -> dict[str, Any]:
    return {blocks.EDIT_INPUT: value}


async def final_state(stack: Stack, run_id: str) -> RunState:
    info = await stack.host.store.run_info(run_id)
    assert info is not None
    return await stack.host.store.load_checkpoint(run_id, info.pause_id)


def tool_results(state: RunState, tool: str) -> list[str]:
    return [m.content for m in state.transcript if m.role == "tool" and m.name == tool]


def buttons_of(stack: Stack, request: ApprovalRequest) -> list[str]:
    message = stack.message(CHANNEL, request.message_ts)
    return [
        e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]
    ]


async def open_edit(stack: Stack, request: ApprovalRequest, seen: int = 0) -> dict[str, Any]:
    reply = await stack.click(REVIEWER, request, blocks.EDIT)
    assert reply.status == 200
    return await stack.opened_view(REVIEWER, blocks.EDIT_MODAL, seen)


async def assert_pending(stack: Stack, request: ApprovalRequest, effect: str) -> None:
    current = await stack.host.store.get_request(request.request_id)
    assert current is not None and current.status == "pending" and current.approvals == []
    assert stack.effects.count(effect) == 0


# -- approve with a comment -------------------------------------------------------------------


async def test_a_comment_reaches_the_message_the_audit_trail_and_the_model(
    redis_url: str, tmp_path: Path
) -> None:
    comment = "Verified the double charge in Stripe. Refund is correct."
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert blocks.APPROVE_COMMENT in buttons_of(stack, request)

        await stack.click(REVIEWER, request, blocks.APPROVE_COMMENT)
        view = await stack.opened_view(REVIEWER, blocks.COMMENT_MODAL)
        assert view["view"]["private_metadata"] == f"{request.request_id}|{request.pause_id}"
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"  # opening decides nothing

        blank = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: "  "}}
        )
        assert "Write a comment" in blank.json()["errors"][blocks.COMMENT_BLOCK]
        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: comment}}
        )
        assert submitted.status == 200 and submitted.json() is None

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded" and "Refund issued" in info.output
        assert stack.effects.count("refund") == 1
        decided = await stack.decided(request.request_id)
        assert isinstance(decided.decision, Approve)
        assert decided.decision.comment == comment and decided.decided_by == REVIEWER
        assert decided.decision.call_hash == request.call_hash

        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert f"Approved by <@U0REVIEWER>: {comment}" in str(message["blocks"])
        audit = [e for e in await stack.host.store.audit(run_id) if e["event"] == "approved"]
        assert comment in audit[-1]["detail"]
        [result] = tool_results(await final_state(stack, run_id), "issue_refund")
        assert result.startswith("Refund issued") and result.endswith(
            f"Reviewer U0REVIEWER commented: {comment}"
        )


# -- edit, then approve -----------------------------------------------------------------------


async def test_edit_then_approve_runs_the_edited_arguments_once(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.editable == ("amount",)
        assert blocks.EDIT in buttons_of(stack, request)

        view = await open_edit(stack, request)
        assert view["view"]["private_metadata"] == f"{request.request_id}|{request.pause_id}"
        inputs = {b["block_id"]: b for b in view["view"]["blocks"] if b["type"] == "input"}
        assert list(inputs) == [arg("amount"), blocks.COMMENT_BLOCK]  # order_id is not editable
        amount = inputs[arg("amount")]["element"]
        assert amount["type"] == "number_input" and amount["initial_value"] == "42.5"

        submitted = await stack.standin.submit_view(
            REVIEWER,
            view["id"],
            {
                arg("amount"): typed("40"),
                blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: "the customer kept one item"},
            },
        )
        assert submitted.status == 200 and submitted.json() is None

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert "Refund issued: $40.00 to order 123" in info.output
        refunds = [e for e in stack.effects.all_events() if e["kind"] == "refund"]
        assert [(e["order_id"], e["amount"]) for e in refunds] == [("123", 40.0)]

        decided = await stack.decided(request.request_id)
        decision = decided.decision
        assert isinstance(decision, Approve) and decision.edited
        assert decision.call_hash == request.call_hash  # the call the reviewer was shown
        assert decision.original_arguments == {"order_id": "123", "amount": 42.5}
        assert decision.edited_arguments == {"order_id": "123", "amount": 40.0}
        assert decision.edited_by == REVIEWER == decided.decided_by
        _, fingerprint = stack.host.runner.agent("refund-agent")
        assert decision.edited_hash == call_hash(
            fingerprint, "issue_refund", decision.edited_arguments
        )
        assert decision.comment == "the customer kept one item"

        message = await stack.decided_message(CHANNEL, request.message_ts)
        shown = str(message["blocks"])
        assert "Edited by <@U0REVIEWER> before approval" in shown
        assert "• `amount`: 42.5 → 40.0" in shown
        audit = [e for e in await stack.host.store.audit(run_id) if e["event"] == "approved"]
        assert '"edited_arguments":{"order_id":"123","amount":40.0}' in audit[-1]["detail"]

        state = await final_state(stack, run_id)
        [result] = tool_results(state, "issue_refund")
        assert "reviewer U0REVIEWER edited the arguments before approving" in result
        assert "amount: 42.5 -> 40.0" in result
        [call] = [c for c in state.calls if c.tool == "issue_refund"]
        assert call.arguments == {"order_id": "123", "amount": 42.5}  # what the model asked


async def test_every_kind_of_input_is_edited_and_runs_as_submitted(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, **PAYOUTS) as stack:
        run_id = await stack.start_run(PAYOUT_AGENT, "pay 250")
        [request] = await stack.pending_requests(run_id)
        view = await open_edit(stack, request)
        kinds = {
            b["block_id"]: b["element"]["type"]
            for b in view["view"]["blocks"]
            if b["type"] == "input"
        }
        assert kinds == {
            arg("vendor"): "plain_text_input",
            arg("amount"): "number_input",
            arg("currency"): "static_select",
            arg("installments"): "number_input",
            arg("speed"): "static_select",
            arg("notify"): "checkboxes",
            arg("memo"): "plain_text_input",
            blocks.COMMENT_BLOCK: "plain_text_input",
        }
        submitted = await stack.standin.submit_view(
            REVIEWER,
            view["id"],
            {
                arg("amount"): typed("199.5"),
                arg("currency"): typed('"USD"'),
                arg("installments"): typed("2"),
                arg("speed"): typed('"same_day"'),
                arg("notify"): typed(["true"]),
                arg("memo"): typed('{"invoice": "INV-9", "note": "split"}'),
            },
        )
        assert submitted.json() is None, submitted.json()
        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded", info.error
        [payout] = [e for e in stack.effects.all_events() if e["kind"] == "payout"]
        assert {k: payout[k] for k in payout if k not in ("kind", "key")} == {
            "vendor": "acme",
            "amount": 199.5,
            "currency": "USD",
            "installments": 2,
            "speed": "same_day",
            "notify": True,
            "memo": {"invoice": "INV-9", "note": "split"},
        }


async def test_an_edit_that_would_raise_the_severity_is_refused_and_nothing_is_recorded(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, **PAYOUTS) as stack:
        run_id = await stack.start_run(PAYOUT_AGENT, "pay 250")
        [request] = await stack.pending_requests(run_id)
        assert request.severity == "high"
        view = await open_edit(stack, request)

        refused = await stack.standin.submit_view(
            REVIEWER, view["id"], {arg("amount"): typed("5000")}
        )
        errors = refused.json()["errors"]
        assert list(errors) == [blocks.COMMENT_BLOCK]
        assert "needs critical severity, above this request's high" in errors[blocks.COMMENT_BLOCK]
        assert stack.view_state(view["id"])["closed"] is False
        await assert_pending(stack, request, "payout")

        # The tool's own schema: the problem is shown under the argument it concerns.
        invalid = await stack.standin.submit_view(
            REVIEWER, view["id"], {arg("memo"): typed('{"invoice": 7}')}
        )
        assert list(invalid.json()["errors"]) == [arg("memo")]
        assert "string" in invalid.json()["errors"][arg("memo")]
        not_json = await stack.standin.submit_view(
            REVIEWER, view["id"], {arg("memo"): typed("{invoice")}
        )
        assert not_json.json()["errors"][arg("memo")].startswith("Not valid JSON")
        await assert_pending(stack, request, "payout")

        fine = await stack.standin.submit_view(REVIEWER, view["id"], {arg("amount"): typed("900")})
        assert fine.json() is None
        await stack.run_status(run_id, "succeeded")
        assert [e["amount"] for e in stack.effects.all_events() if e["kind"] == "payout"] == [900.0]


async def test_a_non_reviewer_can_neither_open_nor_submit_the_edit_form(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        # the requester may not decide their own request (the route does not allow it)
        await stack.click(REQUESTER, request, blocks.EDIT)
        [refusal] = await stack.wait_ephemerals(REQUESTER)
        assert "Not allowed" in refusal and "you started this run" in refusal
        assert stack.standin.calls_to("views.open") == []

        view = await open_edit(stack, request)
        shown = stack.standin.core.workspace.view(view["id"])
        assert shown is not None
        shown.user = REQUESTER  # the requester submits a form opened for a reviewer
        refused = await stack.standin.submit_view(
            REQUESTER, view["id"], {arg("amount"): typed("1")}
        )
        error = refused.json()["errors"][blocks.COMMENT_BLOCK]
        assert "Not allowed" in error and "you started this run" in error
        await assert_pending(stack, request, "refund")


async def test_a_stale_edit_form_is_refused(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        view = await open_edit(stack, request)
        shown = stack.standin.core.workspace.view(view["id"])
        assert shown is not None
        shown.view["private_metadata"] = f"{request.request_id}|req_0000000000000000_0001"
        stale = await stack.standin.submit_view(REVIEWER, view["id"], {arg("amount"): typed("1")})
        assert "earlier step of the run" in stale.json()["errors"][blocks.COMMENT_BLOCK]
        await assert_pending(stack, request, "refund")

        # A form opened before someone else decided is told who decided.
        await stack.click(REVIEWER, request, blocks.REJECT)
        reject = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        await stack.standin.submit_view(REVIEWER, reject["id"], {})
        await stack.run_status(run_id, "succeeded")
        shown.view["private_metadata"] = f"{request.request_id}|{request.pause_id}"
        late = await stack.standin.submit_view(REVIEWER, view["id"], {arg("amount"): typed("1")})
        assert "already rejected" in late.json()["errors"][blocks.COMMENT_BLOCK]
        assert stack.effects.count("refund") == 0


async def test_a_tool_that_does_not_allow_edits_has_no_edit_button_and_a_forged_click_fails(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", "delete /tmp/old.txt")
        [request] = await stack.pending_requests(run_id)
        assert request.editable == ()
        assert blocks.EDIT not in buttons_of(stack, request)

        # The Reject click, turned into an Edit click by someone who signs requests.
        body = click_body(stack, REVIEWER, request, blocks.REJECT)
        payload = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
        payload["actions"][0]["action_id"] = blocks.EDIT
        forged = payload_body(payload)
        status, _ = await post(stack, forged, sign_request(SECRET, int(time.time()), forged))
        assert status == 200
        [refusal] = await stack.wait_ephemerals(REVIEWER)
        assert "cannot be edited" in refusal and "does not let a reviewer edit" in refusal
        assert stack.standin.calls_to("views.open") == []
        await assert_pending(stack, request, "delete_file")


async def test_every_approvers_comment_towards_a_quorum_reaches_the_agent(
    redis_url: str, tmp_path: Path
) -> None:
    """A quorum route offers no edit (every approver would have to see the edited call);
    each approver's comment is kept in the audit trail, the deciding one's on the message,
    and the agent reads them all with the tool's result, as the form promises."""
    async with running_stack(redis_url, tmp_path) as stack:
        reply = await stack.approvals(
            ADMIN, CHANNEL, f"route add tool=issue_refund channel={CHANNEL} quorum=2"
        )
        assert "Added route" in reply.json()["text"], reply.body
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert blocks.EDIT not in buttons_of(stack, request)

        for reviewer, words in ((REVIEWER, "first look: fine"), (REVIEWER2, "second look: fine")):
            await stack.click(reviewer, request, blocks.APPROVE_COMMENT)
            view = await stack.opened_view(reviewer, blocks.COMMENT_MODAL)
            submitted = await stack.standin.submit_view(
                reviewer, view["id"], {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: words}}
            )
            assert submitted.json() is None
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1

        audit = {e["event"]: e for e in await stack.host.store.audit(run_id)}
        assert "first look: fine" in audit["approval"]["decision"]
        assert "second look: fine" in audit["approved"]["detail"]
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert "second look: fine" in str(message["blocks"])
        [result] = tool_results(await final_state(stack, run_id), "issue_refund")
        assert result.startswith("Refund issued") and result.endswith(
            "Reviewer U0REVIEWER commented: first look: fine\n\n"
            "Reviewer U0REVIEWER2 commented: second look: fine"
        )
