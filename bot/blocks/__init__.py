"""Block Kit for approval requests: pure functions from requests to Slack JSON, no I/O.

Everything a user or the model wrote is escaped before it reaches mrkdwn (`bot.mrkdwn`),
and every text is cut to fit Block Kit's limits (`limits`). Argument values under
secret-looking keys are masked at any depth before they are shown (`arguments`).

- `ids`: the action, callback and block ids Slack sends back with a click or a form
- `message`: a pending request, with its buttons and confirm dialogs
- `decided`: a decided request, with who decided what and when
- `modals`: the reject and answer forms
- `outcome`: the thread reply when a run ends
"""

from __future__ import annotations

from bot.blocks.arguments import MASK, mask_secrets
from bot.blocks.decided import decided_message
from bot.blocks.ids import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    APPROVE,
    APPROVE_ALWAYS,
    PENDING_NEXT,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
    REJECT_MODAL,
    actions_block_id,
)
from bot.blocks.limits import MESSAGE_BLOCKS_MAX
from bot.blocks.message import approval_message
from bot.blocks.modals import answer_modal, reject_modal
from bot.blocks.outcome import outcome_message

__all__ = [
    "ANSWER",
    "ANSWER_BLOCK",
    "ANSWER_INPUT",
    "ANSWER_MODAL",
    "APPROVE",
    "APPROVE_ALWAYS",
    "MASK",
    "MESSAGE_BLOCKS_MAX",
    "PENDING_NEXT",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REJECT",
    "REJECT_MODAL",
    "actions_block_id",
    "answer_modal",
    "approval_message",
    "decided_message",
    "mask_secrets",
    "outcome_message",
    "reject_modal",
]
