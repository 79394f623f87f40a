"""The escalation ladder in Slack: the reminder in a request's thread, the line on an
escalated copy (linking the original), the line on the original (saying where it went).

Mentions come only from the route's validated ids (`bot.mrkdwn.mention`), and a link only
from a Slack permalink that looks like one, so nothing a user or the model wrote becomes a
mention or a link here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.bulk import Bulk
from bot.blocks.elements import Block, context
from bot.blocks.limits import MESSAGE_BLOCKS_MAX
from bot.mrkdwn import CHANNEL_ID, channel_link, date, inline_code, mention

__all__ = [
    "REMINDER_MENTIONS_MAX",
    "bulk_note",
    "copy_note",
    "escalated_note",
    "reminder_text",
    "safe_link",
    "with_note",
]

REMINDER_MENTIONS_MAX = 30  # beyond this a reminder says how many more it did not name
_PERMALINK = re.compile(r"^https://[^\s<>|]{1,500}$")


def safe_link(url: str) -> str:
    """`url` if it is an https link that cannot break out of `<url|text>`, else ""."""
    return url if _PERMALINK.fullmatch(url) else ""


def _destination(target: str) -> str:
    return channel_link(target) if CHANNEL_ID.match(target) else mention(target)


def reminder_text(request: ApprovalRequest) -> str:
    """The thread reply: the route's reviewers by mention, how long it has waited, and what
    comes next (the escalation, the expiry). A bulk message's calls of several routes get
    one reply for each route, each mentioning its own reviewers."""
    reviewers = list(request.route.reviewers)
    named = " ".join(mention(r) for r in reviewers[:REMINDER_MENTIONS_MAX])
    if len(reviewers) > REMINDER_MENTIONS_MAX:
        named += f" and {len(reviewers) - REMINDER_MENTIONS_MAX} more reviewers"
    who = f"{named} " if named else ""
    since = date(request.created_at)
    if request.only_in_bulk:  # one reminder for the message's calls of this route
        lines = [
            f"{who}:alarm_clock: The calls in this message that are yours to decide have "
            f"been waiting since {since}."
            if reviewers
            else f":alarm_clock: The calls in this message have been waiting for a decision "
            f"since {since}. Anyone here may decide those no reviewer is named for."
        ]
    else:
        lines = [
            f"{who}:alarm_clock: Request {inline_code(request.request_id)} "
            f"({inline_code(request.tool, 100)}) has been waiting for a decision since {since}."
        ]
        if not reviewers:
            lines.append("Anyone here may decide it.")
    route = request.route
    if route.escalate_to and not (request.escalations or request.escalation_notes):
        lines.append(
            f"It will be escalated to {_destination(route.escalate_to)} at "
            f"{date(request.created_at + route.escalate_after_seconds)}."
        )
    lines.append(f"It expires {date(request.expires_at)}.")
    return "\n".join(lines)  # bounded: at most 30 mentions, a cut tool name, dates


def copy_note(request: ApprovalRequest, link: str) -> str:
    """The line on an escalated copy: why it is here, and the way to the original."""
    where = channel_link(request.message_channel or request.route.destination)
    original = f"<{link}|the original request>" if safe_link(link) else "the original request"
    if request.decided:
        return f":rotating_light: Escalated copy of {original} in {where}."
    return (
        f":rotating_light: *Escalated*: waiting for a decision since "
        f"{date(request.created_at)}. See {original} in {where}; "
        "deciding here decides it there too."
    )


def bulk_note(bulk: Bulk, requests: Sequence[ApprovalRequest], link: str) -> str:
    """The escalation of a message of many calls of one route: one note linking it, not a
    copy of each call. Each call is also in the App Home tab of those who may decide it:
    on a route naming reviewers, theirs (an escalation changes nobody's right there); on
    one naming none, also the tab of whoever the note reached."""
    waiting = [r for r in requests if not r.decided]
    since = date(min((r.created_at for r in requests), default=None))
    message = f"<{link}|the message>" if safe_link(link) else "the message"
    where = channel_link(bulk.channel)
    named = any(r.route.reviewers for r in requests)
    decided = (
        f"See {message} in {where}; its reviewers also find each call in their countersign "
        "App Home tab."
        if named
        else f"See {message} in {where}, or your countersign App Home tab."
    )
    return (
        f":rotating_light: *Escalated*: {len(waiting)} of {len(requests)} calls of "
        f"{inline_code(bulk.agent, 100)} have waited for a decision since {since}. {decided}"
    )


def escalated_note(request: ApprovalRequest) -> str:
    """The line on the original once a copy is out: where it was escalated."""
    return f":arrow_heading_up: Escalated to {_destination(request.route.escalate_to)}."


def with_note(note: str, text: str, body: list[Block]) -> tuple[str, list[Block]]:
    """The message with `note` as a context block on top (in the fallback text too); when
    the blocks are at Slack's maximum already, in the fallback text only."""
    if len(body) >= MESSAGE_BLOCKS_MAX:
        return f"{note}\n{text}", body
    return f"{note}\n{text}", [context(note), *body]
