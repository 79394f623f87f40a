"""The message of a decided request: its body without buttons, who decided what, and when;
an approval's comment, and what a reviewer edited before approving."""

from __future__ import annotations

import json
from typing import Any

from agent_host.approvals import WEBHOOK, ApprovalRequest
from agent_host.runtime.decisions import Approve, Reject
from bot.blocks.arguments import hides, mask_secrets
from bot.blocks.elements import Block, section
from bot.blocks.limits import (
    FALLBACK_TEXT_MAX,
    MESSAGE_BLOCKS_MAX,
    SECTION_TEXT_MAX,
    escaped_within,
)
from bot.blocks.request import decision_detail, quorum_line, request_body
from bot.mrkdwn import date, inline_code, mentions, one_line, person, short, units

__all__ = ["decided_message"]

_OUTCOME_VERB = {
    "approved": "Approved",
    "rejected": "Rejected",
    "changes_requested": "Changes requested",
    "answered": "Answered",
    "expired": "Expired",
    "pending": "Pending",
}
_OUTCOME_EMOJI = {
    "approved": ":white_check_mark:",
    "rejected": ":x:",
    "changes_requested": ":memo:",
    "answered": ":speech_balloon:",
    "expired": ":hourglass:",
    "pending": ":hourglass_flowing_sand:",
}


def _decider(request: ApprovalRequest) -> str:
    """ "by <@U…>", or for a webhook "via webhook" with the name its caller claimed shown
    only as a claim."""
    decision = request.decision
    if request.decided_by == WEBHOOK:
        claimed = decision.note if decision is not None else ""
        return f"via webhook (claimed: {short(claimed, 80)})" if claimed else "via webhook"
    by = person(request.decided_by)
    if isinstance(decision, Approve) and decision.standing_of:
        return f"by {by}'s approval for this run ({inline_code(decision.standing_of)})"
    return f"by {by}"


def _approved(request: ApprovalRequest, by: str) -> str:
    if request.route.quorum > 1 and request.approvals:
        lead = f"Approved by {mentions(request.approvals)}"
        return lead + f" ({len(request.approvals)} of {request.route.quorum} approvals)"
    return f"Approved {by}"


def _with_detail(lead: str, detail: str) -> tuple[str, str]:
    return (lead + ": " if detail else lead), detail


def _outcome(request: ApprovalRequest) -> tuple[str, str]:
    """(trusted mrkdwn lead, raw detail to escape) stating the decision."""
    status = request.status
    decision = request.decision
    by = _decider(request)
    emoji = _OUTCOME_EMOJI.get(status, ":grey_question:")
    standing = ""
    if isinstance(decision, Approve | Reject) and decision.always:
        standing = f", also for later calls of {inline_code(request.tool)} in this run"
    if status == "approved":  # with the approver's comment, if any
        return _with_detail(f"{emoji} {_approved(request, by)}{standing}", decision_detail(request))
    if status == "rejected":
        return _with_detail(f"{emoji} Rejected {by}{standing}", decision_detail(request))
    if status == "changes_requested":
        return _with_detail(f"{emoji} Changes requested {by}", decision_detail(request))
    if status == "answered":
        return _with_detail(f"{emoji} Answered {by}", decision_detail(request))
    if status == "expired":
        what = (
            "the question went unanswered" if request.kind == "question" else "the call was not run"
        )
        deadline = date(request.expires_at)
        return f"{emoji} Expired — nobody decided before {deadline}; {what}", ""
    if status == "pending":
        return f"{emoji} Waiting for a decision: {quorum_line(request)}", ""
    return f"{emoji} {short(status, 100)} {by}", ""


EDIT_VALUE_MAX = 300  # characters of one argument's value in the diff


def _value(value: Any) -> str:
    try:
        raw = json.dumps(mask_secrets(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        raw = repr(value)
    return short(one_line(raw), EDIT_VALUE_MAX)


def _edits(request: ApprovalRequest) -> Block | None:
    """What the reviewer changed before approving, argument by argument (masked)."""
    decision = request.decision
    if not isinstance(decision, Approve) or decision.edited_arguments is None:
        return None
    lead = (
        f"*Edited by {person(decision.edited_by)} before approval* — the call ran with the "
        f"edited arguments (hash {inline_code(decision.edited_hash[:12])})"
    )
    changes = decision.changes()
    text = lead
    for index, (name, before, after) in enumerate(changes):
        if hides(name, before) or hides(name, after):
            line = f"\n• {inline_code(name, 100)}: changed (hidden)"
        else:
            line = f"\n• {inline_code(name, 100)}: {_value(before)} → {_value(after)}"
        more = f"\n• … and {len(changes) - index} more"
        if units(text + line) > SECTION_TEXT_MAX - units(more):
            text += more
            break
        text += line
    return section(text)


def _title(request: ApprovalRequest) -> str:
    verb = _OUTCOME_VERB.get(request.status, request.status.replace("_", " ").capitalize())
    if request.kind == "question":
        return f"{verb}: question from {request.agent}"
    return f"{verb}: {request.tool}"


def decided_message(request: ApprovalRequest) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a decided request: no buttons, the outcome and its time."""
    blocks = request_body(request, _title(request))
    if (edits := _edits(request)) is not None:
        blocks.append(edits)
    lead, detail = _outcome(request)
    when = ""
    if request.decided_at is not None:
        when = f"\n_Decided {date(request.decided_at)}_"
    blocks.append(section(escaped_within(detail, SECTION_TEXT_MAX, lead, when)))
    fallback = f"{_title(request)}, decided by {request.decided_by or 'nobody'}"
    if detail:
        fallback += f": {one_line(detail)}"
    return short(fallback, FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]
