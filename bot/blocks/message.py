"""The message of a pending request: its body, the buttons, and the confirm dialogs that
ask again before a high-severity or a standing approval. "Approve with comment" and "Edit &
approve" open a form (`modals`, `edit`) whose submission is the approval."""

from __future__ import annotations

from agent_host.approvals import ApprovalRequest
from bot.blocks.arguments import arguments_summary
from bot.blocks.elements import Block, button, context, text
from bot.blocks.ids import (
    ANSWER,
    APPROVE,
    APPROVE_ALWAYS,
    APPROVE_COMMENT,
    EDIT,
    REJECT,
    actions_block_id,
)
from bot.blocks.limits import (
    CONFIRM_TEXT_MAX,
    CONFIRM_TITLE_MAX,
    FALLBACK_TEXT_MAX,
    MESSAGE_BLOCKS_MAX,
    plain_within,
)
from bot.blocks.request import question_text, quorum_line, request_body
from bot.mrkdwn import one_line, short, units

__all__ = ["approval_message", "offers_edit"]

CONFIRM_SEVERITIES = ("high", "critical")


def _confirm(request: ApprovalRequest) -> Block:
    title = plain_within(f"Approve {request.tool}?", CONFIRM_TITLE_MAX)
    lead = f"{request.agent} will run {request.tool} with "
    tail = ". Approve exactly this call?"
    summary_room = max(20, CONFIRM_TEXT_MAX - units(lead) - units(tail))
    dialog = lead + arguments_summary(request.arguments, summary_room) + tail
    return {
        "title": text(title, "plain_text"),
        "text": text(plain_within(dialog, CONFIRM_TEXT_MAX), "plain_text"),
        "confirm": text("Approve", "plain_text"),
        "deny": text("Cancel", "plain_text"),
        "style": "danger" if request.severity.lower() == "critical" else "primary",
    }


def _confirm_always(request: ApprovalRequest) -> Block:
    """A standing approval reaches further than the call on screen: say how far."""
    dialog = (
        f"This approves this call and later calls of {request.tool} in this run that go to "
        f"this same route at {request.severity} severity or lower, without asking again."
    )
    return {
        "title": text(plain_within("Approve for this run?", CONFIRM_TITLE_MAX), "plain_text"),
        "text": text(plain_within(dialog, CONFIRM_TEXT_MAX), "plain_text"),
        "confirm": text("Approve for this run", "plain_text"),
        "deny": text("Cancel", "plain_text"),
    }


def offers_edit(request: ApprovalRequest) -> bool:
    """ "Edit & approve" where the tool lets a reviewer edit and one approval decides (the
    approval service refuses an edit anywhere else, with the reason)."""
    return bool(request.editable) and request.route.quorum <= 1 and request.origin != "external"


def _actions(request: ApprovalRequest) -> Block:
    rid = request.request_id
    if request.kind == "question":
        elements = [
            button("Answer", ANSWER, rid, "primary"),
            button("Reject", REJECT, rid, "danger"),
        ]
    else:
        needs_confirm = request.severity.lower() in CONFIRM_SEVERITIES
        confirm = _confirm(request) if needs_confirm else None
        elements = [
            button("Approve", APPROVE, rid, "primary", confirm),
            button("Approve with comment", APPROVE_COMMENT, rid),
        ]
        if offers_edit(request):
            elements.append(button("Edit & approve", EDIT, rid))
        if request.allow_always and request.route.allows_standing_approval:
            elements.append(
                button("Approve for this run", APPROVE_ALWAYS, rid, None, _confirm_always(request))
            )
        elements.append(button("Reject", REJECT, rid, "danger"))
    return {"type": "actions", "block_id": actions_block_id(rid), "elements": elements}


def _title(request: ApprovalRequest) -> str:
    if request.kind == "question":
        return f"Question from {request.agent}"
    return f"Approval needed: {request.tool}"


def approval_message(request: ApprovalRequest) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a pending request, with its buttons."""
    blocks = request_body(request, _title(request))
    if request.route.quorum > 1:
        blocks.append(context(f":busts_in_silhouette: {quorum_line(request)}"))
    blocks.append(_actions(request))
    if request.kind == "question":
        fallback = f"Question from {request.agent}: {one_line(question_text(request))}"
    else:
        fallback = (
            f"Approval needed: {request.agent} wants to run {request.tool} "
            f"({request.severity}), request {request.request_id}"
        )
    return short(fallback, FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]


def buttons_block(request: ApprovalRequest) -> Block:
    """The request's buttons as its message has them, for another surface (the App Home
    tab): the same action ids, values and block id, so the same listener decides."""
    return _actions(request)
