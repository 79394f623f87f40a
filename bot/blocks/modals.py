"""The forms a reviewer fills in: a reason before rejecting, the answer to a question, a
comment with an approval, the whole of a call too long for where its Approve button sits.
(The edit form is `edit`.)"""

from __future__ import annotations

from agent_host.approvals import ApprovalRequest
from bot.blocks.arguments import arguments_sections, arguments_summary
from bot.blocks.elements import Block, context, section, text, written
from bot.blocks.ids import (
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    COMMENT_BLOCK,
    COMMENT_INPUT,
    COMMENT_MODAL,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT_MODAL,
    WHOLE_CALL_MODAL,
)
from bot.blocks.limits import (
    CONTEXT_TEXT_MAX,
    INPUT_MAX_LENGTH,
    MODAL_TITLE_MAX,
    PLACEHOLDER_MAX,
    SECTION_TEXT_MAX,
    escaped_within,
    plain_within,
)
from bot.blocks.request import question_text
from bot.mrkdwn import inline_code
from bot.parsing import modal_metadata

__all__ = [
    "answer_modal",
    "call_context",
    "comment_input",
    "comment_modal",
    "modal_view",
    "reject_modal",
    "text_input",
    "whole_call_modal",
]

NAMES_MAX = 100  # characters of each name where a tool's and an agent's share one text
TOO_LONG = (
    ":no_entry: This call's arguments are too long to show in Slack whole, so it cannot be "
    "approved here: reject it, or decide it through the API. Nothing was changed."
)


def call_context(request: ApprovalRequest) -> Block:
    # Two names in one text: each cut to NAMES_MAX (at most 5x that once escaped).
    lead = (
        f"{inline_code(request.tool, NAMES_MAX)} for agent "
        f"{inline_code(request.agent, NAMES_MAX)} · "
    )
    summary = arguments_summary(request.arguments, 500)
    return context(escaped_within(summary, CONTEXT_TEXT_MAX, lead))


def _modal(
    request: ApprovalRequest, callback_id: str, title: str, submit: str, blocks: list[Block]
) -> Block:
    metadata = modal_metadata(request.request_id, request.pause_id)
    return modal_view(callback_id, metadata, title, submit, blocks)


def modal_view(
    callback_id: str, metadata: str, title: str, submit: str, blocks: list[Block]
) -> Block:
    """A form with Cancel: `metadata` comes back with its submission."""
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": metadata,
        "title": text(plain_within(title, MODAL_TITLE_MAX), "plain_text"),
        "submit": text(plain_within(submit, MODAL_TITLE_MAX), "plain_text"),
        "close": text("Cancel", "plain_text"),
        "blocks": blocks,
    }


def text_input(
    block_id: str, action_id: str, label: str, placeholder: str, optional: bool
) -> Block:
    """A multi-line text input, bounded for Slack."""
    element: Block = {
        "type": "plain_text_input",
        "action_id": action_id,
        "multiline": True,
        "max_length": INPUT_MAX_LENGTH,
        "placeholder": text(plain_within(placeholder, PLACEHOLDER_MAX), "plain_text"),
    }
    if not optional:
        element["min_length"] = 1
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": text(label, "plain_text"),
        "element": element,
    }


def comment_input(*, optional: bool) -> Block:
    """The comment that goes with an approval (also on the edit form, optional there)."""
    return text_input(
        COMMENT_BLOCK,
        COMMENT_INPUT,
        "Comment",  # Slack itself marks an optional input "(optional)"
        "Why you approve, or what to watch for. The agent reads this.",
        optional=optional,
    )


def comment_modal(request: ApprovalRequest) -> Block:
    """The `views.open` view asking for a comment, then approving."""
    blocks = [
        section(
            f"Approve this call from {inline_code(request.agent)} with a comment? The comment "
            "is shown on the message, kept in the audit trail, and the agent reads it with "
            "the tool's result."
        ),
        call_context(request),
        comment_input(optional=False),
    ]
    return _modal(request, COMMENT_MODAL, "Approve with comment", "Approve", blocks)


def reject_modal(request: ApprovalRequest) -> Block:
    """The `views.open` view asking for an optional reason before rejecting."""
    what = "question" if request.kind == "question" else "call"
    blocks = [
        section(
            f"Reject this {what} from {inline_code(request.agent)}? "
            "The reason, if you give one, becomes the tool's output the model sees."
        ),
        call_context(request),
        text_input(
            REASON_BLOCK,
            REASON_INPUT,
            "Reason (optional)",
            "Why not? The agent sees this.",
            optional=True,
        ),
    ]
    return _modal(request, REJECT_MODAL, "Reject request", "Reject", blocks)


def answer_modal(request: ApprovalRequest) -> Block:
    """The `views.open` view asking for the answer to a question."""
    blocks = [
        *written("Question", question_text(request), SECTION_TEXT_MAX),
        call_context(request),
        text_input(
            ANSWER_BLOCK,
            ANSWER_INPUT,
            "Your answer",
            "The agent receives this as the tool's result.",
            optional=False,
        ),
    ]
    return _modal(request, ANSWER_MODAL, "Answer question", "Send answer", blocks)


def whole_call_modal(request: ApprovalRequest) -> Block | str:
    """The `views.open` view showing a call's arguments whole, then approving it (with an
    optional comment); or why it cannot (too long to show whole)."""
    sections = arguments_sections(request.arguments)
    if sections is None:
        return TOO_LONG
    blocks = [
        section(
            f"Approve this call of {inline_code(request.tool, NAMES_MAX)} from "
            f"{inline_code(request.agent, NAMES_MAX)} "
            "exactly as shown here? Its arguments were longer than where you clicked could "
            "show; here they are whole. This approves this one call, as it is (no edits, "
            "nothing later in the run):"
        ),
        *sections,
        comment_input(optional=True),
    ]
    return _modal(request, WHOLE_CALL_MODAL, "Approve in full", "Approve", blocks)
