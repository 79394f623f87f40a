"""The ids Slack sends back with a click or a form: what the listeners dispatch on."""

from __future__ import annotations

__all__ = [
    "ANSWER",
    "ANSWER_BLOCK",
    "ANSWER_INPUT",
    "ANSWER_MODAL",
    "APPROVE",
    "APPROVE_ALWAYS",
    "APPROVE_COMMENT",
    "BULK_APPROVE",
    "BULK_REJECT",
    "BULK_REJECT_MODAL",
    "BULK_SPLIT",
    "COMMENT_BLOCK",
    "COMMENT_INPUT",
    "COMMENT_MODAL",
    "EDIT",
    "EDIT_INPUT",
    "EDIT_MODAL",
    "PENDING_NEXT",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REJECT",
    "REJECT_MODAL",
    "actions_block_id",
    "bulk_block_id",
    "bulk_value",
    "edit_block_id",
    "parse_bulk_value",
]

# Action ids of the message buttons; every button's value is the request id.
APPROVE = "countersign_approve"
APPROVE_ALWAYS = "countersign_approve_always"
REJECT = "countersign_reject"
ANSWER = "countersign_answer"
# The Next page button of `/approvals pending`; its value is `here|all:<sealed page marker>`.
PENDING_NEXT = "countersign_pending_next"
APPROVE_COMMENT = "countersign_approve_comment"
EDIT = "countersign_edit"
# The buttons of a message for many calls (a bulk); each one's value is `bulk_value`.
BULK_APPROVE = "countersign_bulk_approve"
BULK_REJECT = "countersign_bulk_reject"
BULK_SPLIT = "countersign_bulk_split"
# Its reject form; private_metadata is `bulk_value` too.
BULK_REJECT_MODAL = "countersign_bulk_reject_modal"
# Modal callback ids; private_metadata is `<request id>|<pause id>` (bot.parsing).
REJECT_MODAL = "countersign_reject_modal"
ANSWER_MODAL = "countersign_answer_modal"
COMMENT_MODAL = "countersign_comment_modal"
EDIT_MODAL = "countersign_edit_modal"
WHOLE_CALL_MODAL = "countersign_whole_call_modal"
# block_id / action_id of the modal inputs (view.state.values[block][action]).
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"
ANSWER_BLOCK = "answer"
ANSWER_INPUT = "answer_input"
COMMENT_BLOCK = "comment"
COMMENT_INPUT = "comment_input"
EDIT_INPUT = "value"  # the action id of every argument's input; its block names the argument
EDIT_BLOCK_PREFIX = "arg:"


def edit_block_id(argument: str) -> str:
    """The input block of one argument in the edit form."""
    return f"{EDIT_BLOCK_PREFIX}{argument}"


def actions_block_id(request_id: str) -> str:
    """The block holding a request's buttons: a click names both it and the request."""
    return f"actions:{request_id}"


BULK_SEPARATOR = "|"


def bulk_block_id(bulk_id: str) -> str:
    """The block holding a bulk message's buttons: a click names both it and the bulk."""
    return f"bulk:{bulk_id}"


def bulk_value(bulk_id: str, digest: str) -> str:
    """A bulk button's value: the bulk and the digest of the calls its message showed."""
    return f"{bulk_id}{BULK_SEPARATOR}{digest}"


def parse_bulk_value(value: str) -> tuple[str, str]:
    """(bulk id, digest) of a bulk button's value; empty strings when it is not one."""
    bulk_id, separator, digest = value.partition(BULK_SEPARATOR)
    return (bulk_id, digest) if separator and bulk_id and digest else ("", "")
