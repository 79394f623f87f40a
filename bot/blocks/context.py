"""What the run did before the call a message asks about, and what the agent said: the
context a reviewer decides with (`agent_host.approvals.context`), shortened and flattened
so the message stays within Block Kit's limits whatever the model wrote."""

from __future__ import annotations

from agent_host.approvals.context import CallContext, EarlierCall
from bot.blocks.arguments import arguments_summary, visible
from bot.blocks.elements import Block, section, written
from bot.blocks.limits import SECTION_TEXT_MAX
from bot.mrkdwn import inline_code, one_line, short, units

__all__ = ["context_blocks"]

ARGUMENTS_SHOWN = 120  # characters of an earlier call's arguments
RESULT_SHOWN = 160  # characters of its result
SAID_SHOWN = 700  # characters of the agent's words
_OUTCOME = {
    "executed": "ran",
    "rejected": "rejected",
    "denied": "denied by policy",
    "expired": "expired",
    "answered": "answered",
    "error": "failed",
    "invalid": "invalid call",
    "unknown_outcome": "outcome unknown",
    "deferred": "asked for approval itself",
}


def context_blocks(context: CallContext | None) -> list[Block]:
    """Up to two sections: the earlier calls and their outcomes, then the agent's words."""
    if context is None or context.empty:
        return []
    shown: list[Block] = []
    if context.earlier or context.more:
        shown.append(section(_earlier(context)))
    shown += written("The agent said before asking", one_line(context.said), SAID_SHOWN)
    return shown


def _earlier(context: CallContext) -> str:
    """The earlier calls, newest last; past the section's limit the oldest are left out,
    counted with those the context left out already."""
    lines, more = [_line(call) for call in context.earlier], context.more
    while len(lines) > 1 and units(_earlier_text(lines, more)) > SECTION_TEXT_MAX:
        lines.pop(0)
        more += 1
    return _earlier_text(lines, more)


def _earlier_text(lines: list[str], more: int) -> str:
    head = ["*Before this call, the run*"]
    if more:
        head.append(f"• … {more} earlier call{'s' if more != 1 else ''}")
    return "\n".join(head + lines)


def _line(call: EarlierCall) -> str:
    """One earlier call: its tool, arguments and result as inline code (what the model and
    the tools wrote is never formatting), its outcome in countersign's words."""
    outcome = _OUTCOME.get(call.outcome, call.outcome or "?")
    arguments = inline_code(arguments_summary(call.arguments, ARGUMENTS_SHOWN), ARGUMENTS_SHOWN)
    tool = inline_code(visible(one_line(call.tool)), 80)
    line = f"• {tool} {arguments} → _{short(outcome, 40)}_"
    result = visible(one_line(call.result))
    if result:
        line += f": {inline_code(result, RESULT_SHOWN)}"
    return line
