"""What every rendering of a request shows, pending or decided: header, fields, reason or
question, arguments and the call's hash."""

from __future__ import annotations

from agent_host.approvals import ApprovalRequest
from bot.blocks.arguments import arguments_block
from bot.blocks.context import context_blocks
from bot.blocks.elements import Block, context, field, header, written
from bot.blocks.limits import FIELDS_MAX, SECTION_TEXT_MAX
from bot.mrkdwn import date, inline_code, mentions, person, short

__all__ = ["decision_detail", "question_text", "quorum_line", "request_body"]

SEVERITY_EMOJI = {
    "low": ":large_green_circle:",
    "medium": ":large_yellow_circle:",
    "high": ":large_orange_circle:",
    "critical": ":red_circle:",
}


def _severity(severity: str) -> str:
    emoji = SEVERITY_EMOJI.get(severity.lower(), ":white_circle:")
    return f"{emoji} {short(severity, 100)}"


def _fields(request: ApprovalRequest) -> Block:
    fields = [
        field("Agent", inline_code(request.agent)),
        field("Tool", inline_code(request.tool)),
        field("Severity", _severity(request.severity)),
        field("Requested by", person(request.requested_by)),
        field("Expires", date(request.expires_at)),
        field("Request id", inline_code(request.request_id)),
    ]
    return {"type": "section", "fields": fields[:FIELDS_MAX]}


def question_text(request: ApprovalRequest) -> str:
    return request.question or request.reason


def quorum_line(request: ApprovalRequest) -> str:
    quorum = request.route.quorum
    line = f"{len(request.approvals)} of {quorum} approvals"
    if request.approvals:
        line += f" (so far: {mentions(request.approvals)})"
    return line


def decision_detail(request: ApprovalRequest) -> str:
    """The free text of the decision: reject message, requested changes, the answer, or an
    approval's comment."""
    decision = request.decision
    for key in ("message", "feedback", "text", "comment"):
        value = getattr(decision, key, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def request_body(request: ApprovalRequest, title: str) -> list[Block]:
    """The blocks every rendering of a request starts with, under the header `title`."""
    blocks = [header(title), _fields(request)]
    if request.kind == "question":
        blocks += written("Question", question_text(request), SECTION_TEXT_MAX)
    else:
        blocks += written("Reason", request.reason, SECTION_TEXT_MAX)
    blocks.append(arguments_block(request.arguments))
    blocks += context_blocks(request.context)  # what the run did before, in short
    hash_prefix = inline_code(request.call_hash[:12])
    blocks.append(context(f":lock: approve what you see: hash {hash_prefix}"))
    return blocks
