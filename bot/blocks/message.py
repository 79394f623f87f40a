"""The message of a pending request: its body, the buttons, and the confirm dialogs that
ask again before a high-severity or a standing approval. "Approve with comment" and "Edit &
approve" open a form (`modals`, `edit`) whose submission is the approval.

A call is approved only as someone has seen it whole. Where the surface an Approve button
sits on cuts the arguments (the message past one section, an App Home line past its
summary), that button opens them whole in a form whose submission is the approval
(`modals.whole_call_modal`), and nothing approves the call from there at once; arguments
too long even for that form cannot be approved in Slack at all."""

from __future__ import annotations

from agent_host.approvals import ApprovalRequest
from bot.blocks.arguments import (
    arguments_in_full,
    arguments_sections,
    arguments_summary,
    summary_in_full,
)
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
from bot.blocks.listing import ARGUMENTS_MAX as LINE_ARGUMENTS_MAX
from bot.blocks.request import question_text, quorum_line, request_body
from bot.mrkdwn import one_line, short, units

__all__ = ["approval_message", "offers_edit", "shown_in_full"]

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


def shown_in_full(request: ApprovalRequest, *, in_home: bool = False) -> bool:
    """Whether the surface shows the call's arguments whole: its message, or (`in_home`) its
    line in the App Home tab. Elsewhere, Approve opens them whole first."""
    if request.kind == "question":
        return True
    if in_home:
        return summary_in_full(request.arguments, LINE_ARGUMENTS_MAX)
    return arguments_in_full(request.arguments)


def _actions(
    request: ApprovalRequest, *, in_full: bool, whole_fits: bool = True, standing: bool = True
) -> Block:
    """The buttons; where the surface cut the arguments (`in_full` False), Approve opens them
    whole, if they fit a form (`whole_fits`), and is the only way to approve. "Approve for
    this run" where the route allows it and the surface offers it (`standing`)."""
    rid = request.request_id
    if request.kind == "question":
        elements = [
            button("Answer", ANSWER, rid, "primary"),
            button("Reject", REJECT, rid, "danger"),
        ]
    elif not in_full:
        elements = [button("Approve", APPROVE, rid, "primary")] if whole_fits else []
        elements.append(button("Reject", REJECT, rid, "danger"))
    else:
        needs_confirm = request.severity.lower() in CONFIRM_SEVERITIES
        confirm = _confirm(request) if needs_confirm else None
        elements = [
            button("Approve", APPROVE, rid, "primary", confirm),
            button("Approve with comment", APPROVE_COMMENT, rid),
        ]
        if offers_edit(request):
            elements.append(button("Edit & approve", EDIT, rid))
        if (
            standing
            and request.allow_always
            and request.route.allows_standing_approval
            and not request.rerouted
        ):
            elements.append(
                button("Approve for this run", APPROVE_ALWAYS, rid, None, _confirm_always(request))
            )
        elements.append(button("Reject", REJECT, rid, "danger"))
    return {"type": "actions", "block_id": actions_block_id(rid), "elements": elements}


def _title(request: ApprovalRequest) -> str:
    if request.kind == "question":
        return f"Question from {request.agent}"
    return f"Approval needed: {request.tool}"


def _whole_fits(request: ApprovalRequest) -> bool:
    return arguments_sections(request.arguments) is not None


def approval_message(request: ApprovalRequest, *, standing: bool = True) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a pending request, with its buttons; an escalated copy's
    (`standing` False) without "Approve for this run", which only the people of the route's
    own channel may give."""
    blocks = request_body(request, _title(request))
    if request.route.quorum > 1:
        blocks.append(context(f":busts_in_silhouette: {quorum_line(request)}"))
    in_full = shown_in_full(request)
    whole_fits = in_full or _whole_fits(request)  # (the sections are worked out once)
    if not in_full:
        blocks.append(context(_not_whole_here(whole_fits)))
    blocks.append(_actions(request, in_full=in_full, whole_fits=whole_fits, standing=standing))
    if request.kind == "question":
        fallback = f"Question from {request.agent}: {one_line(question_text(request))}"
    else:
        fallback = (
            f"Approval needed: {request.agent} wants to run {request.tool} "
            f"({request.severity}), request {request.request_id}"
        )
    return short(fallback, FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]


def _not_whole_here(whole_fits: bool) -> str:
    if whole_fits:
        return (
            ":mag: The arguments are longer than this message shows: *Approve* opens them "
            "whole first."
        )
    return (
        ":no_entry: The arguments are too long to show in Slack whole, so the call cannot be "
        "approved here: reject it, or decide it through the API."
    )


def buttons_block(request: ApprovalRequest, *, standing: bool = True) -> Block:
    """The request's buttons for its line in the App Home tab: the same action ids, values
    and block id as its message, so the same listener decides; Approve opens the arguments
    whole first where the line cuts them. "Approve for this run" only with `standing` (the
    viewer is one of the people of the request's own channel)."""
    in_full = shown_in_full(request, in_home=True)
    whole_fits = in_full or _whole_fits(request)
    return _actions(request, in_full=in_full, whole_fits=whole_fits, standing=standing)
