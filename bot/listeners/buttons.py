"""Clicks on a request's buttons: Approve and Approve for this run decide at once through
the approval service; Reject, Answer, Approve with comment and Edit & approve open their
form (the edit form built from the tool's schema, from the agent registry). Where the
surface clicked cut the call's arguments (a long call's message, its App Home line), an
approving button opens the call whole instead, and only that form's submission approves.

A click is first checked against the request it names (it exists, is still pending, and the
button sits on that request's own message, or in the block for it in the clicker's App
Home tab), then against the reviewer rules, then decided with the store's compare-and-set.
The answer goes to the clicking user only: an ephemeral line under a message, a line at
the top of their App Home tab.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncBoltContext

from agent_host.approvals import ApprovalRequest, ApprovalService
from agent_host.errors import StoreUnavailable
from agent_host.runtime.decisions import Approve
from bot import blocks
from bot.home import HomeTab
from bot.listeners.after_ack import Replies
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import (
    ALREADY_VOTED,
    NOT_FOUND,
    UNAVAILABLE,
    UNCONFIRMED,
    already_decided,
    result_text,
    unavailable,
)
from bot.listeners.taken_once import first_time
from bot.member_channels import UNCHECKED, dm_copy_in
from bot.mrkdwn import channel_link, escape
from bot.parsing import Click, parse_click

__all__ = ["ACTIONS", "button_listener", "is_decision_click", "refusal"]

log = logging.getLogger(__name__)

ACTIONS = (
    blocks.APPROVE,
    blocks.APPROVE_ALWAYS,
    blocks.REJECT,
    blocks.ANSWER,
    blocks.APPROVE_COMMENT,
    blocks.EDIT,
)
_APPROVING = (blocks.APPROVE, blocks.APPROVE_ALWAYS, blocks.APPROVE_COMMENT, blocks.EDIT)
_FORMS = {
    blocks.REJECT: blocks.reject_modal,
    blocks.ANSWER: blocks.answer_modal,
    blocks.APPROVE_COMMENT: blocks.comment_modal,
}


def _opens_form(action_id: str, seen_whole: bool) -> bool:
    return action_id in _FORMS or action_id == blocks.EDIT or not seen_whole


def _form(
    action_id: str, request: ApprovalRequest, approvals: ApprovalService, seen_whole: bool
) -> Any:
    """The view the button opens (a dict), why it cannot open (a str), or None (no form)."""
    if not seen_whole:  # approved only as seen whole, never as the cut version clicked
        return blocks.whole_call_modal(request)
    if action_id == blocks.EDIT:
        if approvals.editor is None:
            return "Editing arguments is not available here."
        form = approvals.editor.form(request)
        if isinstance(form, str):
            return f":no_entry: This call cannot be edited: {escape(form)}."
        return blocks.edit_modal(request, form)
    build = _FORMS.get(action_id)
    return build(request) if build is not None else None


def refusal(request: ApprovalRequest | None, click: Click) -> str:
    """Why a click cannot lead anywhere, before anyone's rights are checked; empty if it can."""
    if request is None:
        return NOT_FOUND
    if not _click_belongs(click, request):
        return "This button does not belong to this request's message. Nothing was changed."
    if request.decided:
        return already_decided(request)
    return ""


def _click_belongs(click: Click, request: ApprovalRequest) -> bool:
    """The button sits in the block built for this very request, in its channel (or that
    of one of its escalated copies), on its message: a value naming another request is
    refused. (A message posted twice after a lost answer from Slack carries the same
    block, so either copy works.)"""
    block = blocks.actions_block_id(request.request_id)
    if click.block_id != block:
        return False
    if click.from_home:  # the tab published to this very person holds that block
        return block in click.message_block_ids
    if not request.posted_in(click.channel):
        return False
    if (copy := dm_copy_in(click.channel, request)) is not None and click.user != copy.to:
        return False  # a copy in someone's direct messages is theirs to click
    if request.only_in_bulk:  # its bulk message has no buttons of its own for it
        return block in click.message_block_ids
    return click.message_ts == request.message_ts or block in click.message_block_ids


@dataclass
class _Progress:
    """How far a click got: a timeout before the compare-and-set changed nothing."""

    deciding: bool = False


async def _outside_channel(click: Click, request: ApprovalRequest, home: HomeTab | None) -> str:
    """A route without named reviewers is for the people in its channels and those it was
    escalated to. A click on a message in a channel proves that by itself; one from the App
    Home tab does not, nor one on a copy in the clicker's direct messages (escalated to a
    user group they may have left since): why this clicker is not one of them, or ""."""
    if request.route.reviewers:
        return ""
    if not (click.from_home or dm_copy_in(click.channel, request) is not None):
        return ""
    return await home.channels.outside(click.user, request) if home is not None else UNCHECKED


async def _standing_refused(click: Click, request: ApprovalRequest, home: HomeTab | None) -> str:
    """Why this click may not approve the rest of the run, or "". A standing approval
    covers the run's later calls on this route without asking anyone: only the people of
    the route's own channel may give it, on its own message or from their App Home tab,
    not someone whose right to decide came from an escalated copy, nor the people of the
    default channel a request was rerouted to."""
    if request.rerouted:
        return (
            f"Approve for this run is given by the people of the route's channel "
            f"{channel_link(request.route.destination)}, where this request could not be "
            "posted; approve this call alone"
        )
    if click.from_home:
        if home is None:
            return UNCHECKED
        return await home.channels.outside(click.user, request, escalation=False)
    if click.channel == request.message_channel:
        return ""
    return (
        f"Approve for this run is given by the people of {channel_link(request.original_channel)} "
        "on the request's own message; from this copy, approve this call alone"
    )


def is_decision_click(body: dict[str, Any]) -> bool:
    """A click of one of ACTIONS: its listener awaits the replay guard itself, together
    with its first read."""
    actions = body.get("actions")
    if body.get("type") != "block_actions" or not isinstance(actions, list) or not actions:
        return False
    first = actions[0]
    return isinstance(first, dict) and first.get("action_id") in ACTIONS


async def _on_click(
    click: Click,
    approvals: ApprovalService,
    replies: Replies,
    progress: _Progress,
    home: HomeTab | None = None,
    context: AsyncBoltContext | None = None,
) -> str | None:
    """The click's answer to its user ("" when the updated message says it all; None for
    a copy of a click taken already, answered by nobody)."""
    request, new = await asyncio.gather(approvals.load(click.request_id), first_time(context))
    if not new:
        return None
    if reason := refusal(request, click):
        return reason
    assert request is not None
    if outside := await _outside_channel(click, request, home):
        return f":no_entry: Not allowed: {outside}. Nothing was changed."
    seen_whole = click.action_id not in _APPROVING or blocks.shown_in_full(
        request, in_home=click.from_home
    )
    if _opens_form(click.action_id, seen_whole):
        if click.action_id in _APPROVING and click.user in request.approvals:
            return ALREADY_VOTED  # a form would only be refused once filled in
        eligibility = await approvals.may_decide(click.user, request)
        if not eligibility.allowed:
            return f":no_entry: Not allowed: {eligibility.reason}."
        view = _form(click.action_id, request, approvals, seen_whole)
        if isinstance(view, str):
            return view
        replies.open_form(click.trigger_id, view, click.channel, click.user)
        return ""
    always = click.action_id == blocks.APPROVE_ALWAYS
    if always and (refused := await _standing_refused(click, request, home)):
        return f":no_entry: Not allowed: {refused}. Nothing was changed."
    decision = Approve(decided_by=click.user, call_hash=request.call_hash, always=always)
    progress.deciding = True
    return result_text(
        await approvals.decide(request.request_id, decision, via="slack", current=request)
    )


def button_listener(
    approvals: ApprovalService, replies: Replies, home: HomeTab | None = None
) -> Callable[[AsyncAck, dict[str, Any], AsyncBoltContext], Awaitable[None]]:
    """The listener for every button in ACTIONS: ack at once, answer within the budget."""

    async def on_button(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        click = parse_click(body)
        if click is None:
            log.warning("ignored a malformed click")
            return
        progress = _Progress()
        text: str | None
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                text = await _on_click(click, approvals, replies, progress, home, context)
        except TimeoutError:
            text = UNCONFIRMED if progress.deciding else UNAVAILABLE
        except StoreUnavailable as exc:  # (it names the error's type: unreachable, or full)
            log.warning("click by %s could not use Redis: %s", click.user, exc)
            text = unavailable(exc)
        if text is None:  # a copy of a click taken already: nobody is answered
            return
        if not click.from_home:
            replies.ephemeral(click.channel, click.user, text)
        elif text and home is not None:  # a decision refreshes the tab through the outbox
            replies.tasks.spawn(home.publish(click.user, notice=text))

    return on_button
