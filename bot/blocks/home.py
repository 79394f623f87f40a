"""The App Home tab: what waits for this person's decision, oldest first, each with its
buttons, and what they decided lately. Within a view's limits for any input: each line is
bounded (`listing`), and the counts are capped well under 100 blocks."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

from agent_host.approvals import ApprovalRequest
from bot.blocks.elements import Block, context, header, section
from bot.blocks.limits import SECTION_TEXT_MAX, plain_within
from bot.blocks.listing import age, request_line
from bot.blocks.message import buttons_block
from bot.mrkdwn import inline_code, person, short, units

__all__ = ["HOME_VIEW", "RECENT_MAX", "VIEW_BLOCKS_MAX", "WAITING_MAX", "home_view"]

HOME_VIEW = "countersign_home"  # the view's callback_id
VIEW_BLOCKS_MAX = 100
WAITING_MAX = 20  # two blocks each
RECENT_MAX = 10  # one line each, in one section
_STATUS = {
    "approved": ":white_check_mark: approved",
    "rejected": ":x: rejected",
    "changes_requested": ":memo: changes requested",
    "answered": ":speech_balloon: answered",
    "expired": ":hourglass: expired",
}


def home_view(
    user_id: str,
    waiting: Sequence[ApprovalRequest],
    recent: Sequence[ApprovalRequest],
    links: Mapping[str, str],
    now: float,
    *,
    more: bool = False,
    unsure: bool = False,
    refused: str = "",
    notice: str = "",
    standing: Container[str] = (),
) -> dict[str, Any]:
    """The view to publish; `notice` is trusted mrkdwn (the answer to their last click),
    `refused` too (why requests may be missing, when Slack refused the app a lookup: it
    says more than `unsure`).
    "Approve for this run" is offered on the requests in `standing` (by id) alone."""
    blocks: list[Block] = [header("Waiting for you")]
    if notice:
        blocks.append(section(plain_within(notice, SECTION_TEXT_MAX)))
    if not waiting:
        blocks.append(section("Nothing is waiting for your decision right now."))
    for request in waiting[:WAITING_MAX]:
        blocks.append(section(request_line(request, now, links.get(request.request_id, ""))))
        blocks.append(buttons_block(request, standing=request.request_id in standing))
    if more or len(waiting) > WAITING_MAX:
        blocks.append(
            context("More are waiting than fit here: `/approvals pending all` lists them all.")
        )
    if refused:
        blocks.append(context(refused))
    elif unsure:
        blocks.append(
            context(
                ":warning: Slack could not say in time which channels or reviewer groups you "
                "are in, so some requests may be missing; open this tab again in a moment."
            )
        )
    blocks.append({"type": "divider"})
    blocks.append(header("Decided by you recently"))
    lines = _within([_recent_line(user_id, r, now) for r in recent[:RECENT_MAX]])
    blocks.append(section("\n".join(lines)) if lines else context("Nothing yet."))
    return {"type": "home", "callback_id": HOME_VIEW, "blocks": blocks[:VIEW_BLOCKS_MAX]}


def _within(lines: list[str]) -> list[str]:
    """As many whole lines as fit one section, and how many did not."""
    kept: list[str] = []
    for index, line in enumerate(lines):
        rest = f"• … and {len(lines) - index} more"
        if units("\n".join([*kept, line])) > SECTION_TEXT_MAX - units(rest) - 1:
            return [*kept, rest]
        kept.append(line)
    return kept


def _recent_line(user_id: str, request: ApprovalRequest, now: float) -> str:
    if request.kind == "question":  # the model's words, as code: never formatting
        what = inline_code(request.question, 80)
    else:
        what = inline_code(request.tool, 80)
    when = request.decided_at if request.decided_at is not None else request.created_at
    if request.decided:
        status = _STATUS.get(request.status, short(request.status, 40))
        if request.decided_by and request.decided_by != user_id:
            status += f" (decided by {person(request.decided_by)})"
    else:
        status = (
            f":ballot_box_with_check: you approved: {len(request.approvals)} of "
            f"{request.route.quorum} approvals so far"
        )
    return (
        f"• {status} — {what} by "
        f"{inline_code(request.agent, 60)}, {age(now - when)} ago "
        f"({inline_code(request.request_id)})"
    )
