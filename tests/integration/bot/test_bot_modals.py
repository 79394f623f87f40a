"""Reject and Answer go through modals: the click opens a view, the submission decides."""

from __future__ import annotations

from pathlib import Path

from bot import blocks
from slack_sandbox import workspace_to_dict
from tests.support.stack import CHANNEL, REVIEWER, REVIEWER2, running_stack
from tests.support.waiting import eventually


async def test_reject_with_reason_via_modal_reaches_the_model_and_the_message(
    redis_url: str, tmp_path: Path
) -> None:
    reason = "amount looks wrong, check with finance"
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        reply = await stack.click(REVIEWER, request, blocks.REJECT)
        assert reply.status == 200
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        [opened] = stack.standin.calls_to("views.open")
        assert "trigger_id" in opened
        assert view["view"]["private_metadata"] == f"{request.request_id}|{request.pause_id}"
        # Opening the modal decides nothing yet.
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
        )
        assert submitted.status == 200
        assert submitted.json() is None  # a plain ack: the view closes
        assert stack.view_state(view["id"])["closed"] is True

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert reason in info.output
        assert "not approved" in info.output
        assert stack.effects.count("refund") == 0

        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None
        assert decided.status == "rejected"
        assert decided.decided_by == REVIEWER
        assert decided.decision is not None and getattr(decided.decision, "message", None) == reason

        message = await stack.decided_message(CHANNEL, request.message_ts)
        shown = str(message["blocks"])
        assert "Rejected by <@U0REVIEWER>" in shown
        assert reason in shown
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert "was rejected by <@U0REVIEWER>" in outcome["text"]
        assert reason in outcome["text"]


async def test_reject_without_a_reason_is_recorded_too(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.REJECT)
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        submitted = await stack.standin.submit_view(REVIEWER, view["id"], {})
        assert submitted.status == 200 and submitted.json() is None

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded" and "not approved" in info.output
        assert stack.effects.count("refund") == 0
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.status == "rejected"


async def test_reject_modal_submitted_after_someone_else_approved_changes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.REJECT)
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)

        await stack.click(REVIEWER2, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")

        late = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "too late"}}
        )
        assert late.status == 200
        body = late.json()
        assert body["response_action"] == "errors"
        assert "already approved" in body["errors"][blocks.REASON_BLOCK]
        state = stack.view_state(view["id"])
        assert state["closed"] is False and blocks.REASON_BLOCK in state["errors"]

        current = await stack.host.store.get_request(request.request_id)
        assert current is not None
        assert current.status == "approved" and current.decided_by == REVIEWER2
        assert stack.effects.count("refund") == 1


async def test_answer_button_opens_modal_and_the_answer_becomes_the_tool_result(
    redis_url: str, tmp_path: Path
) -> None:
    answer = "Tell them the parcel ships on Monday."
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("support-agent", "where is my parcel?")
        [request] = await stack.pending_requests(run_id)
        assert request.kind == "question"
        posted = stack.message(CHANNEL, request.message_ts)
        [actions] = [b for b in posted["blocks"] if b["type"] == "actions"]
        labels = [e["text"]["text"] for e in actions["elements"]]
        assert labels == ["Answer", "Reject"]

        reply = await stack.click(REVIEWER, request, blocks.ANSWER)
        assert reply.status == 200
        view = await stack.opened_view(REVIEWER, blocks.ANSWER_MODAL)
        assert view["view"]["private_metadata"] == f"{request.request_id}|{request.pause_id}"
        assert "where is my parcel?" in str(view["view"]["blocks"])

        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.ANSWER_BLOCK: {blocks.ANSWER_INPUT: answer}}
        )
        assert submitted.status == 200 and submitted.json() is None

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert answer in info.output
        assert stack.effects.count("support_reply") == 1

        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None
        assert decided.status == "answered" and decided.decided_by == REVIEWER
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert "Answered by <@U0REVIEWER>" in str(message["blocks"])
        assert answer in str(message["blocks"])
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert answer in outcome["text"]


async def test_blank_answer_is_refused_in_the_modal_and_the_question_stays_open(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("support-agent", "refund please")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.ANSWER)
        view = await stack.opened_view(REVIEWER, blocks.ANSWER_MODAL)

        blank = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.ANSWER_BLOCK: {blocks.ANSWER_INPUT: "   "}}
        )
        assert blank.status == 200
        body = blank.json()
        assert body["response_action"] == "errors"
        assert blocks.ANSWER_BLOCK in body["errors"]
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"
        assert stack.effects.count("support_reply") == 0

        fine = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.ANSWER_BLOCK: {blocks.ANSWER_INPUT: "Say sorry."}}
        )
        assert fine.status == 200 and fine.json() is None
        info = await stack.run_status(run_id, "succeeded", "failed")
        assert "Say sorry." in info.output

        async def one_reply() -> bool:
            return stack.effects.count("support_reply") == 1

        await eventually(one_reply)


async def test_modal_that_cannot_be_opened_tells_the_reviewer_and_decides_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        stack.standin.inject("views.open", status=500)
        reply = await stack.click(REVIEWER, request, blocks.REJECT)
        assert reply.status == 200
        [text] = await stack.wait_ephemerals(REVIEWER)
        assert "Could not open the form" in text
        assert workspace_to_dict(stack.standin.workspace)["views"] == []
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        await stack.click(REVIEWER, request, blocks.REJECT)  # a second try works
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        assert len(stack.standin.calls_to("views.open")) == 2
        await stack.standin.submit_view(REVIEWER, view["id"], {})
        decided = await stack.decided(request.request_id)
        assert decided.status == "rejected"


async def test_two_reviewers_reject_at_once_only_the_first_submission_counts(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.REJECT)
        await stack.click(REVIEWER2, request, blocks.REJECT)
        one = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        two = await stack.opened_view(REVIEWER2, blocks.REJECT_MODAL)

        first = await stack.standin.submit_view(
            REVIEWER2, two["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "no"}}
        )
        second = await stack.standin.submit_view(
            REVIEWER, one["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "also no"}}
        )
        assert first.json() is None
        assert "already rejected" in second.json()["errors"][blocks.REASON_BLOCK]

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert ": no" in info.output and "also no" not in info.output
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.decided_by == REVIEWER2
        assert stack.effects.count("refund") == 0
