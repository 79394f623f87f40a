"""Block Kit for approval requests: pure functions from requests to Slack JSON, no I/O.

Everything a user or the model wrote is escaped before it reaches mrkdwn (`bot.mrkdwn`),
and every text is cut to fit Block Kit's limits (`limits`). Argument values under
secret-looking keys are masked at any depth before they are shown (`arguments`).

- `ids`: the action, callback and block ids Slack sends back with a click or a form
- `message`: a pending request, with its buttons and confirm dialogs
- `decided`: a decided request, with who decided what and when
- `modals`: the reject, answer and comment forms, and a call shown whole before approving
- `edit`: the "Edit & approve" form, built from the tool's schema and read back
- `outcome`: the thread reply when a run ends
- `bulk`: one message for many calls of a turn, with Approve all, Reject all, one by one
"""

from __future__ import annotations

from bot.blocks.arguments import MASK, mask_secrets
from bot.blocks.bulk import bulk_message, bulk_reject_modal, lists_every_call_whole
from bot.blocks.decided import decided_message
from bot.blocks.edit import block_of, edit_modal, read_edit
from bot.blocks.ids import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    APPROVE,
    APPROVE_ALWAYS,
    APPROVE_COMMENT,
    BULK_APPROVE,
    BULK_REJECT,
    BULK_REJECT_MODAL,
    BULK_SPLIT,
    COMMENT_BLOCK,
    COMMENT_INPUT,
    COMMENT_MODAL,
    EDIT,
    EDIT_INPUT,
    EDIT_MODAL,
    PENDING_NEXT,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
    REJECT_MODAL,
    WHOLE_CALL_MODAL,
    actions_block_id,
    bulk_block_id,
    bulk_value,
    edit_block_id,
    parse_bulk_value,
)
from bot.blocks.limits import MESSAGE_BLOCKS_MAX
from bot.blocks.message import approval_message, offers_edit, shown_in_full
from bot.blocks.modals import answer_modal, comment_modal, reject_modal, whole_call_modal
from bot.blocks.outcome import outcome_message

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
    "MASK",
    "MESSAGE_BLOCKS_MAX",
    "PENDING_NEXT",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REJECT",
    "REJECT_MODAL",
    "WHOLE_CALL_MODAL",
    "actions_block_id",
    "answer_modal",
    "approval_message",
    "block_of",
    "bulk_block_id",
    "bulk_message",
    "bulk_reject_modal",
    "bulk_value",
    "comment_modal",
    "decided_message",
    "edit_block_id",
    "edit_modal",
    "lists_every_call_whole",
    "mask_secrets",
    "offers_edit",
    "outcome_message",
    "parse_bulk_value",
    "read_edit",
    "reject_modal",
    "shown_in_full",
    "whole_call_modal",
]
