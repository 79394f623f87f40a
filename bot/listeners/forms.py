"""Submissions of the reject and answer forms: the decision, or an error shown in the form.

A form carries the request and the pause it was opened in (its private_metadata); the
decision is checked against what the reviewer saw then, so a form left open across a step
of the run is refused as stale. Errors are shown under the form's input, and the form stays
open; an accepted form closes with the ack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck

from agent_host.approvals import ApprovalService, DecideResult
from agent_host.errors import StoreUnavailable
from agent_host.runtime.decisions import Answer, Decision, Reject
from bot import blocks
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import UNAVAILABLE, form_error, result_text
from bot.parsing import Submission, input_value, parse_submission

__all__ = ["FORMS", "form_listener"]

FORMS = (blocks.REJECT_MODAL, blocks.ANSWER_MODAL)
STALE = "This form does not match a request any more; close it and click again."
EMPTY_ANSWER = "Write an answer to send."

Listener = Callable[[AsyncAck, dict[str, Any], dict[str, Any]], Awaitable[None]]


def _decision(submission: Submission, is_answer: bool, text: str) -> Decision:
    if is_answer:
        return Answer(text=text, decided_by=submission.user)
    return Reject(message=text, decided_by=submission.user)


async def _submit(
    approvals: ApprovalService, request_id: str, pause_id: str, decision: Decision
) -> DecideResult:
    request = await approvals.load(request_id)
    if request is not None:  # what the reviewer saw when the form opened
        decision = decision.model_copy(update={"call_hash": request.call_hash})
    return await approvals.decide(
        request_id, decision, via="slack", current=request, pause_id=pause_id
    )


def form_listener(approvals: ApprovalService) -> Listener:
    """The listener for both forms in FORMS."""

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        is_answer = isinstance(view, dict) and view.get("callback_id") == blocks.ANSWER_MODAL
        block, field = (
            (blocks.ANSWER_BLOCK, blocks.ANSWER_INPUT)
            if is_answer
            else (blocks.REASON_BLOCK, blocks.REASON_INPUT)
        )
        submission = parse_submission(body, view)
        if submission is None:
            await ack(response_action="errors", errors={block: STALE})
            return
        text = input_value(submission.values, block, field)
        if is_answer and not text.strip():
            await ack(response_action="errors", errors={block: EMPTY_ANSWER})
            return
        decision = _decision(submission, is_answer, text)
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                result = await _submit(
                    approvals, submission.request_id, submission.pause_id, decision
                )
        except TimeoutError:
            result = DecideResult("unknown")
        except StoreUnavailable:
            await ack(response_action="errors", errors={block: form_error(UNAVAILABLE)})
            return
        if result.accepted:
            await ack()
        else:
            await ack(response_action="errors", errors={block: form_error(result_text(result))})

    return on_submit
