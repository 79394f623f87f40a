"""Submissions of the forms: reject with a reason, answer a question, approve with a
comment, edit then approve, approve a call seen whole. Each becomes one decision for the
approval service, or errors shown in the form.

A form carries the request and the pause it was opened in (its private_metadata); the
decision is checked against what the reviewer saw then, so a form left open across a step
of the run is refused as stale. Who submits is checked then too: on a route without named
reviewers, a reviewer who left its channel since the form opened may no longer decide.
Errors are shown under the form's inputs, and the form stays open; an accepted form closes
with the ack. The edit form is read back with the tool's
schema as it was built (`bot.blocks.edit`); the approval service then validates the edited
arguments with the tool and judges them again, and its problems are shown under each input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncAck

from agent_host.approvals import ApprovalRequest, ApprovalService, DecideResult
from agent_host.errors import StoreUnavailable
from agent_host.runtime.decisions import Answer, Approve, Decision, Reject
from bot import blocks
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import NOT_FOUND, form_error, result_text, unavailable_in_form
from bot.member_channels import MemberChannels
from bot.parsing import Submission, input_value, parse_submission

__all__ = ["FORMS", "form_listener"]

log = logging.getLogger(__name__)

STALE = "This form does not match a request any more; close it and click again."
EMPTY_ANSWER = "Write an answer to send."
EMPTY_COMMENT = "Write a comment, or close this and click Approve."

Listener = Callable[[AsyncAck, dict[str, Any], dict[str, Any]], Awaitable[None]]
Errors = dict[str, str]  # problems by block id; empty: the form was accepted
# Given the request as loaded when the form was submitted (None: there is none).
Submit = Callable[[ApprovalService, Submission, ApprovalRequest | None], Awaitable[Errors]]


@dataclass(frozen=True)
class _Form:
    block: str  # where a problem of the form as a whole is shown
    submit: Submit


async def _decide(
    approvals: ApprovalService,
    submission: Submission,
    request: ApprovalRequest | None,
    decision: Decision,
    block: str,
) -> Errors:
    if request is not None:  # what the reviewer saw when the form opened
        decision = decision.model_copy(update={"call_hash": request.call_hash})
    result = await approvals.decide(
        submission.request_id, decision, via="slack", current=request, pause_id=submission.pause_id
    )
    return {} if result.accepted else {block: form_error(result_text(result))}


def _typed(submission: Submission, block: str, action: str) -> str:
    return input_value(submission.values, block, action)


async def _reject(
    approvals: ApprovalService, submission: Submission, request: ApprovalRequest | None
) -> Errors:
    reason = _typed(submission, blocks.REASON_BLOCK, blocks.REASON_INPUT)
    decision = Reject(message=reason, decided_by=submission.user)
    return await _decide(approvals, submission, request, decision, blocks.REASON_BLOCK)


async def _answer(
    approvals: ApprovalService, submission: Submission, request: ApprovalRequest | None
) -> Errors:
    text = _typed(submission, blocks.ANSWER_BLOCK, blocks.ANSWER_INPUT)
    if not text.strip():
        return {blocks.ANSWER_BLOCK: EMPTY_ANSWER}
    decision = Answer(text=text, decided_by=submission.user)
    return await _decide(approvals, submission, request, decision, blocks.ANSWER_BLOCK)


def _approve(*, comment_required: bool) -> Submit:
    """An approval with the form's comment (Approve with comment: required; a call seen
    whole: optional)."""

    async def submit(
        approvals: ApprovalService, submission: Submission, request: ApprovalRequest | None
    ) -> Errors:
        comment = _typed(submission, blocks.COMMENT_BLOCK, blocks.COMMENT_INPUT).strip()
        if comment_required and not comment:
            return {blocks.COMMENT_BLOCK: EMPTY_COMMENT}
        decision = Approve(decided_by=submission.user, comment=comment)
        return await _decide(approvals, submission, request, decision, blocks.COMMENT_BLOCK)

    return submit


async def _edit(
    approvals: ApprovalService, submission: Submission, request: ApprovalRequest | None
) -> Errors:
    general = blocks.COMMENT_BLOCK
    if request is None:
        return {general: form_error(NOT_FOUND)}
    if request.pause_id != submission.pause_id:  # said before any problem of the inputs
        return {general: form_error(result_text(DecideResult("stale", request)))}
    form = approvals.editor.form(request) if approvals.editor is not None else "not available"
    if isinstance(form, str):
        return {general: form_error(f"This call cannot be edited: {form}.")}
    edited, problems = blocks.read_edit(form, submission.values)
    if problems:
        return problems
    decision = Approve(
        decided_by=submission.user,
        call_hash=request.call_hash,  # the call the reviewer was shown, before the edit
        comment=_typed(submission, general, blocks.COMMENT_INPUT).strip(),
        edited_arguments=edited,
    )
    result = await approvals.decide(
        request.request_id, decision, via="slack", current=request, pause_id=submission.pause_id
    )
    if result.accepted:
        return {}
    if result.errors:  # the tool's own verdict on the edited arguments, under each input
        shown: Errors = {}
        for name, problem in result.errors.items():
            block = blocks.block_of(form, name)
            where = f"{name}: " if name and block == general else ""
            shown.setdefault(block, form_error(where + problem))
        return shown
    return {general: form_error(result_text(result))}


_SPECS = {
    blocks.REJECT_MODAL: _Form(blocks.REASON_BLOCK, _reject),
    blocks.ANSWER_MODAL: _Form(blocks.ANSWER_BLOCK, _answer),
    blocks.COMMENT_MODAL: _Form(blocks.COMMENT_BLOCK, _approve(comment_required=True)),
    blocks.EDIT_MODAL: _Form(blocks.COMMENT_BLOCK, _edit),
    blocks.WHOLE_CALL_MODAL: _Form(blocks.COMMENT_BLOCK, _approve(comment_required=False)),
}
FORMS = tuple(_SPECS)


async def _submitted(
    form: _Form,
    approvals: ApprovalService,
    channels: MemberChannels,
    submission: Submission,
) -> Errors:
    """The form's decision made, unless its submitter is not in the channels of a request
    decided by the people in them (the approval service checks named reviewers)."""
    request = await approvals.load(submission.request_id)
    if request is not None and (outside := await channels.outside(submission.user, request)):
        return {form.block: form_error(f"Not allowed: {outside}. Nothing was changed.")}
    return await form.submit(approvals, submission, request)


def form_listener(approvals: ApprovalService, channels: MemberChannels) -> Listener:
    """The listener for every form in FORMS; `channels` says which channels a submitter
    is in."""

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        callback = view.get("callback_id") if isinstance(view, dict) else None
        form = _SPECS.get(
            callback if isinstance(callback, str) else "", _SPECS[blocks.REJECT_MODAL]
        )
        submission = parse_submission(body, view)
        if submission is None:
            await ack(response_action="errors", errors={form.block: STALE})
            return
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                errors = await _submitted(form, approvals, channels, submission)
        except TimeoutError:
            errors = {form.block: form_error(result_text(DecideResult("unknown")))}
        except StoreUnavailable as exc:
            log.warning("a form submitted by %s could not use Redis: %s", submission.user, exc)
            errors = {form.block: form_error(unavailable_in_form(exc))}
        if errors:
            await ack(response_action="errors", errors=errors)
        else:
            await ack()

    return on_submit
