"""Clicks on a bulk message (many calls of one turn in one message) and its reject form.

A click is checked against the bulk its button names: it exists, the calls it lists are
still the ones the message showed (the button's digest), and the button sits on that
bulk's own message. Then:

- **Approve all N** decides each call still waiting, after the ack (N compare-and-sets may
  outlast Slack's 3 s), through the approval service, each with the hash the message showed:
  calls the clicker may not decide stay waiting, and the clicker is told which and why.
- **Reject all** opens a form for one reason (if the clicker may decide any of the calls);
  its submission rejects each call still waiting the same way, once the submitter is found
  to be one of the channel's people still (for calls whose route names no reviewers).
- **Review one by one** posts each call still waiting in the message's thread, with its own
  buttons (once; the bulk message then keeps only its table and tally).

"Approve for this run" is not offered for a bulk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from slack_bolt.async_app import AsyncAck

from agent_host.approvals import ApprovalRequest, ApprovalService
from agent_host.approvals.bulk import Bulk, BulkTally, Maker, decide_each
from agent_host.durable.bulks import BulkBook
from agent_host.errors import StoreFull, StoreUnavailable
from agent_host.runtime.decisions import Approve, Reject
from bot import blocks
from bot.listeners.after_ack import Replies
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import form_error, unavailable, unavailable_in_form
from bot.member_channels import MemberChannels
from bot.mrkdwn import inline_code, person
from bot.parsing import Click, input_value, parse_click, parse_submission

__all__ = [
    "BULK_ACTIONS",
    "BULK_BUDGET",
    "bulk_button_listener",
    "bulk_form_listener",
    "tally_text",
]

log = logging.getLogger(__name__)

BULK_ACTIONS = (blocks.BULK_APPROVE, blocks.BULK_REJECT, blocks.BULK_SPLIT)
BULK_BUDGET = 60.0  # seconds to decide every call of one bulk, after the ack
LISTED_MAX = 10  # calls named in a reply; the rest are counted

GONE = "This message's calls no longer exist. Nothing was changed."
CHANGED = (
    ":no_entry: The calls listed on this message are not the ones it was posted with; "
    "nothing was decided. Use `/approvals pending` to review them."
)
NOT_HERE = "This button does not belong to this message. Nothing was changed."
NOT_WHOLE = (
    ":mag: Some calls waiting here are longer than this message shows, or not listed, so "
    "none was approved all at once. *Review one by one* posts each whole in this message's "
    "thread. Nothing was changed."
)
APPROVED = "Approved"
UNFINISHED = (
    ":hourglass: countersign could not finish deciding every call (its database did not "
    "answer in time). What was recorded shows on the message; click again for the rest."
)
FULL_UNFINISHED = (
    ":warning: countersign could not finish deciding every call: its database (Redis) is "
    "full. What was recorded shows on the message; ask an admin to make room, then click "
    "again for the rest."
)


def split_notice(bulk: Bulk) -> str:
    return (
        f"{person(bulk.split_by)} chose to review these calls one by one: decide each with "
        "the buttons in this message's thread. Nothing was changed."
    )


def _bulk_click_belongs(click: Click, bulk: Bulk) -> bool:
    """The button sits in the bulk's block on the bulk's own message, in its channel (a
    message posted twice after a lost answer from Slack carries the same block)."""
    block = blocks.bulk_block_id(bulk.bulk_id)
    if click.from_home or click.block_id != block or not bulk.channel:
        return False
    if click.channel != bulk.channel:
        return False
    return click.message_ts == bulk.ts or block in click.message_block_ids


async def _load(book: BulkBook, value: str) -> tuple[Bulk | None, str]:
    """The bulk a button or form names, if it still lists exactly the calls it was shown
    with; otherwise why not."""
    bulk_id, digest = blocks.parse_bulk_value(value)
    bulk = await book.get(bulk_id) if bulk_id else None
    if bulk is None:
        return None, GONE
    if not bulk.intact() or digest != bulk.digest:
        return None, CHANGED
    return bulk, ""


async def _may_decide_any(
    approvals: ApprovalService, user: str, requests: Sequence[ApprovalRequest]
) -> str:
    """ "" if `user` may decide at least one of the calls still waiting, else why not."""
    waiting = [r for r in requests if not r.decided]
    if not waiting:
        return "Every call of this message is decided already. Nothing was changed."
    reason = ""
    for request in waiting:
        eligibility = await approvals.may_decide(user, request)
        if eligibility.allowed:
            return ""
        reason = reason or eligibility.reason
    return f":no_entry: Not allowed: {reason}. Nothing was changed."


def _calls(items: Sequence[tuple[ApprovalRequest, str]]) -> str:
    lines = [
        f"• {inline_code(r.request_id)} {inline_code(r.tool, 60)}" + (f": {why}" if why else "")
        for r, why in items[:LISTED_MAX]
    ]
    if len(items) > LISTED_MAX:
        lines.append(f"• and {len(items) - LISTED_MAX} more")
    return "\n".join(lines)


def tally_text(verb: str, tally: BulkTally) -> str:
    """What one Approve all / Reject all did, for the clicker: what it decided, and which
    calls it left waiting and why (bounded: the first LISTED_MAX are named)."""
    lines: list[str] = []
    if tally.decided:
        lines.append(f":white_check_mark: {verb} {len(tally.decided)} call(s).")
    if tally.progress:
        lines.append(
            f":ballot_box_with_check: Your approval is recorded on {len(tally.progress)} "
            "call(s) that need more approvals:\n" + _calls([(r, "") for r in tally.progress])
        )
    if tally.voted:
        lines.append(
            f"You approved {len(tally.voted)} call(s) already; another reviewer must "
            "approve them too."
        )
    if tally.refused:
        lines.append(
            f":no_entry: {len(tally.refused)} call(s) left waiting, not decided by you:\n"
            + _calls(tally.refused)
        )
    if tally.already:
        if lines:
            lines.append(f"{len(tally.already)} call(s) were decided already.")
        else:
            lines.append("Every call of this message was decided already. Nothing was changed.")
    if tally.missing:
        lines.append(f"{len(tally.missing)} call(s) no longer exist.")
    return "\n".join(lines) or "Nothing was decided."


async def _decide_all(
    approvals: ApprovalService,
    book: BulkBook,
    bulk: Bulk,
    make: Maker,
    verb: str,
    tell: Callable[[str], None],
) -> None:
    """Decide every call of `bulk` still waiting (after the ack), then tell the decider."""
    try:
        async with asyncio.timeout(BULK_BUDGET):
            requests = await book.requests(bulk)
            if verb == APPROVED and not blocks.lists_every_call_whole(requests):
                tell(NOT_WHOLE)  # e.g. a message posted before Approve all was withheld
                return
            tally = await decide_each(approvals, bulk, requests, make)
    except (TimeoutError, StoreUnavailable) as exc:
        log.warning("bulk %s: deciding every call did not finish: %s", bulk.bulk_id, exc)
        tell(FULL_UNFINISHED if isinstance(exc, StoreFull) else UNFINISHED)
        return
    tell(tally_text(verb, tally))


async def _on_click(
    click: Click, approvals: ApprovalService, book: BulkBook, replies: Replies
) -> str:
    """The click's answer to its user ("" when a form or the updated message says it)."""
    bulk, refusal = await _load(book, click.request_id)
    if bulk is None:
        return refusal
    if not _bulk_click_belongs(click, bulk):
        return NOT_HERE
    if bulk.split_by:
        return split_notice(bulk)

    def tell(text: str) -> None:
        replies.ephemeral(click.channel, click.user, text)

    if click.action_id == blocks.BULK_APPROVE:
        note = f"approve all ({bulk.bulk_id})"

        def approve(request: ApprovalRequest, shown: str) -> Approve:
            return Approve(decided_by=click.user, call_hash=shown, note=note)

        replies.tasks.spawn(_decide_all(approvals, book, bulk, approve, APPROVED, tell))
        return ""
    requests = await book.requests(bulk)
    if why := await _may_decide_any(approvals, click.user, requests):
        return why
    if click.action_id == blocks.BULK_REJECT:
        view = blocks.bulk_reject_modal(bulk, requests)
        replies.open_form(click.trigger_id, view, click.channel, click.user)
        return ""
    outcome, queued = await book.split(bulk, click.user)
    if outcome == "taken":
        current = await book.get(bulk.bulk_id)
        return split_notice(current or bulk)
    if outcome == "gone":
        return GONE
    return f":thread: Posting the {queued} call(s) still waiting one by one in this thread."


def bulk_button_listener(
    approvals: ApprovalService, book: BulkBook, replies: Replies
) -> Callable[[AsyncAck, dict[str, Any]], Awaitable[None]]:
    """The listener for every button in BULK_ACTIONS: ack at once, answer within the budget
    (Approve all answers after deciding)."""

    async def on_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = parse_click(body)
        if click is None or click.from_home:
            log.warning("ignored a malformed bulk click")
            return
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                text = await _on_click(click, approvals, book, replies)
        except (TimeoutError, StoreUnavailable) as exc:
            text = unavailable(exc)
        replies.ephemeral(click.channel, click.user, text)

    return on_button


async def _outside(channels: MemberChannels, book: BulkBook, bulk: Bulk, user: str) -> str:
    """Why `user` is not one of the people of every waiting call of the bulk decided by
    their channels' people, or "". The calls share the bulk's channel, but each route's
    calls have their own escalation notes: one call of each route (and its escalations)
    is checked, and one refusal refuses them all."""
    checked: set[tuple[str, tuple[str, ...]]] = set()
    for request in await book.requests(bulk):
        if request.route.reviewers or request.decided:
            continue
        people = (request.route.route_id, (*request.channels(), *request.escalated_to()))
        if people in checked:
            continue
        checked.add(people)
        if outside := await channels.outside(user, request):
            return f"Not allowed: {outside}. Nothing was changed."
    return ""


def bulk_form_listener(
    approvals: ApprovalService, book: BulkBook, replies: Replies, channels: MemberChannels
) -> Callable[[AsyncAck, dict[str, Any], dict[str, Any]], Awaitable[None]]:
    """The Reject all form: one reason for every call still waiting. The form closes once
    the bulk is found unchanged; the calls are rejected after the ack, and the decider is
    told in the bulk's channel what was rejected and what was left waiting."""

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        submission = parse_submission(body, view)
        if submission is None:
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: form_error(GONE)})
            return
        value = blocks.bulk_value(submission.request_id, submission.pause_id)
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                bulk, refusal = await _load(book, value)
                if bulk is not None and bulk.split_by:
                    refusal = split_notice(bulk)
                elif bulk is not None:
                    refusal = await _outside(channels, book, bulk, submission.user)
        except (TimeoutError, StoreUnavailable) as exc:
            bulk, refusal = None, unavailable_in_form(exc)
        if bulk is None or refusal:
            errors = {blocks.REASON_BLOCK: form_error(refusal)}
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        reason = input_value(submission.values, blocks.REASON_BLOCK, blocks.REASON_INPUT)
        user, channel = submission.user, bulk.channel
        note = f"reject all ({bulk.bulk_id})"

        def reject(request: ApprovalRequest, shown: str) -> Reject:
            return Reject(message=reason, decided_by=user, call_hash=shown, note=note)

        def tell(text: str) -> None:
            replies.ephemeral(channel, user, text)

        replies.tasks.spawn(_decide_all(approvals, book, bulk, reject, "Rejected", tell))

    return on_submit
