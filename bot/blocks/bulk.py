"""The message of many calls of one turn (a bulk, `agent_host.approvals.bulk`): a table of
its calls (tool, the arguments in one line, severity, hash, status), the tally, and
**Approve all N** (with a confirm naming N and the tools), **Reject all** (a form with one
reason) and **Review one by one** (each call posted in the message's thread).

Whatever the calls hold, it stays within Block Kit's limits: every field of a row is
flattened, escaped and cut to its own bound, rows are packed into sections of at most 3000
characters, and past ROWS_MAX rows (or the room left in 50 blocks) the rest is counted in
an "and M more" line. The buttons carry `bulk_value`: the bulk and the digest of the calls
it lists, so a click decides exactly those calls, each with the hash shown.

Approve all is offered (and honoured, `lists_every_call_whole`) only while the message
shows every call still waiting whole: a call it cuts or does not list is approved one by
one, where its own message shows it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from agent_host.approvals import ApprovalRequest, RequestStatus
from agent_host.approvals.bulk import Bulk
from bot.blocks.arguments import arguments_summary, summary_in_full
from bot.blocks.elements import Block, button, context, field, header, section, text, written
from bot.blocks.ids import (
    BULK_APPROVE,
    BULK_REJECT,
    BULK_REJECT_MODAL,
    BULK_SPLIT,
    REASON_BLOCK,
    REASON_INPUT,
    bulk_block_id,
    bulk_value,
)
from bot.blocks.limits import (
    CONFIRM_TEXT_MAX,
    CONFIRM_TITLE_MAX,
    FALLBACK_TEXT_MAX,
    MESSAGE_BLOCKS_MAX,
    SECTION_TEXT_MAX,
    escaped_within,
    plain_within,
)
from bot.blocks.modals import modal_view, text_input
from bot.blocks.request import SEVERITY_EMOJI
from bot.mrkdwn import date, inline_code, mentions, one_line, person, short, units

__all__ = [
    "ROWS_MAX",
    "bulk_message",
    "bulk_reject_modal",
    "lists_every_call_whole",
    "tools_summary",
]

ROWS_MAX = 40  # calls listed in the table; the rest are counted
TOOL_MAX = 60  # characters of a tool's name in a row
AGENT_MAX = 60  # characters of the agent's name in the confirm dialog
ARGUMENTS_MAX = 100  # plain characters of a row's arguments (escaped: at most 5x)
SEVERITY_MAX = 20
REASONS_MAX = 3  # distinct reasons shown above the table
# Blocks that are not table rows: header, fields, reasons (their label, then the words),
# more, tally, hash, not whole, buttons.
_OTHER_BLOCKS = 9
_TABLE_ROOM = MESSAGE_BLOCKS_MAX - _OTHER_BLOCKS

_STATUS = {
    RequestStatus.PENDING: ":hourglass_flowing_sand: waiting",
    RequestStatus.APPROVED: ":white_check_mark: approved",
    RequestStatus.REJECTED: ":x: rejected",
    RequestStatus.CHANGES_REQUESTED: ":memo: changes requested",
    RequestStatus.ANSWERED: ":speech_balloon: answered",
    RequestStatus.EXPIRED: ":hourglass: expired",
}


def _waiting(requests: Sequence[ApprovalRequest]) -> list[ApprovalRequest]:
    return [r for r in requests if not r.decided]


def tools_summary(requests: Sequence[ApprovalRequest], most: int = 3) -> str:
    """`delete_file (7), move_file (2) and 3 more tools`, in plain text (for a dialog)."""
    return _tool_counts(requests, most, lambda tool: plain_within(one_line(tool), TOOL_MAX))


def tools_as_code(requests: Sequence[ApprovalRequest], most: int = 3) -> str:
    """`tools_summary` in mrkdwn, each tool's name as code: nothing in a name is formatting
    (at most `most` names of TOOL_MAX characters: a few hundred once escaped)."""
    return _tool_counts(requests, most, lambda tool: inline_code(tool, TOOL_MAX))


def _tool_counts(requests: Sequence[ApprovalRequest], most: int, show: Callable[[str], str]) -> str:
    """The `most` commonest tools, each `show`n with its count, then how many more."""
    counts = Counter(one_line(r.tool) for r in requests)
    parts = [f"{show(tool)} ({n})" for tool, n in counts.most_common(most)]
    if len(counts) > most:
        parts.append(f"and {len(counts) - most} more tools")
    return ", ".join(parts) or "no calls"


def _severity(severity: str) -> str:
    emoji = SEVERITY_EMOJI.get(severity.lower(), ":white_circle:")
    return f"{emoji} {short(one_line(severity), SEVERITY_MAX)}"


def _status(request: ApprovalRequest) -> str:
    shown = _STATUS.get(request.status, short(str(request.status), SEVERITY_MAX))
    if not request.decided and request.route.quorum > 1:
        shown += f" ({len(request.approvals)} of {request.route.quorum} approvals)"
    return shown


def row(number: int, request: ApprovalRequest) -> str:
    """One call in one line: number, tool, arguments, severity, hash, status."""
    summary = arguments_summary(request.arguments, ARGUMENTS_MAX)
    return (
        f"`{number}.` {inline_code(request.tool, TOOL_MAX)} "
        f"{inline_code(summary, ARGUMENTS_MAX)} · {_severity(request.severity)} · "
        f"hash {inline_code(request.call_hash[:8])} · {_status(request)}"
    )


def _table(requests: Sequence[ApprovalRequest], room: int) -> tuple[list[Block], int]:
    """Sections of rows, at most `room` of them and ROWS_MAX rows; and how many calls did
    not fit."""
    sections: list[str] = []
    shown = 0
    for number, request in enumerate(requests[:ROWS_MAX], start=1):
        line = row(number, request)
        if sections and units(sections[-1]) + 1 + units(line) <= SECTION_TEXT_MAX:
            sections[-1] += "\n" + line
        elif len(sections) < room:
            sections.append(line)
        else:
            break
        shown += 1
    return [section(s) for s in sections], len(requests) - shown


def _not_whole(requests: Sequence[ApprovalRequest], more: int) -> int:
    """How many calls still waiting the message does not show whole (cut, or not listed)."""
    listed = requests[: len(requests) - more]
    cut = sum(1 for r in _waiting(listed) if not summary_in_full(r.arguments, ARGUMENTS_MAX))
    return cut + len(_waiting(requests[len(requests) - more :]))


def lists_every_call_whole(requests: Sequence[ApprovalRequest]) -> bool:
    """Whether the bulk's message shows every call still waiting whole: only then may Approve
    all decide them."""
    _, more = _table(requests, _TABLE_ROOM)
    return not _not_whole(requests, more)


def _tally(requests: Sequence[ApprovalRequest]) -> str:
    counts = Counter(r.status for r in requests)
    parts = [
        f"{counts[status]} {_STATUS[status].split(' ', 1)[1]}"
        for status in _STATUS
        if counts[status]
    ]
    line = f":bar_chart: {len(requests)} calls: " + ", ".join(parts)
    deciders = list(dict.fromkeys(r.decided_by for r in requests if r.decided and r.decided_by))
    if deciders:
        line += f" · decided by {mentions(deciders, 5)}"
    return line


def _confirm(bulk: Bulk, waiting: Sequence[ApprovalRequest]) -> Block:
    n = len(waiting)
    dialog = (
        f"{n} call{'s' if n != 1 else ''}: {tools_summary(waiting)}, for agent "
        f"{plain_within(one_line(bulk.agent), AGENT_MAX)}. Each is approved exactly as "
        "listed (its hash); any you may not decide stays waiting."
    )
    critical = any(r.severity.lower() == "critical" for r in waiting)
    return {
        "title": text(plain_within(f"Approve all {n} calls?", CONFIRM_TITLE_MAX), "plain_text"),
        "text": text(plain_within(one_line(dialog), CONFIRM_TEXT_MAX), "plain_text"),
        "confirm": text(f"Approve all {n}", "plain_text"),
        "deny": text("Cancel", "plain_text"),
        "style": "danger" if critical else "primary",
    }


def _actions(bulk: Bulk, waiting: Sequence[ApprovalRequest], *, whole: bool) -> Block:
    value = bulk_value(bulk.bulk_id, bulk.digest)
    approve_all = button(
        f"Approve all {len(waiting)}", BULK_APPROVE, value, "primary", _confirm(bulk, waiting)
    )
    elements = [approve_all] if whole else []
    elements += [
        button("Reject all", BULK_REJECT, value, "danger"),
        button("Review one by one", BULK_SPLIT, value),
    ]
    return {"type": "actions", "block_id": bulk_block_id(bulk.bulk_id), "elements": elements}


def _reasons(requests: Sequence[ApprovalRequest]) -> list[Block]:
    reasons = list(dict.fromkeys(one_line(r.reason) for r in requests if r.reason.strip()))
    lines = [plain_within(reason, 300) for reason in reasons[:REASONS_MAX]]
    if len(reasons) > REASONS_MAX:
        lines.append(f"and {len(reasons) - REASONS_MAX} more")
    words = "\n".join(f"• {line}" for line in lines)
    return written("Why they need approval", words, SECTION_TEXT_MAX)


def _title(bulk: Bulk, requests: Sequence[ApprovalRequest], waiting: int) -> str:
    if waiting:
        return f"Approval needed: {len(requests)} calls from {one_line(bulk.agent)}"
    return f"All {len(requests)} calls decided: {one_line(bulk.agent)}"


def bulk_message(bulk: Bulk, requests: Sequence[ApprovalRequest]) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a bulk's message, as its calls (`requests`, in the
    bulk's order) are now: with its buttons while any waits and it was not split."""
    waiting = _waiting(requests)
    expiries = [r.expires_at for r in waiting]
    fields = [
        field("Agent", inline_code(bulk.agent)),
        field("Calls", tools_as_code(requests)),
        field("Requested by", person(bulk.requested_by)),
        field("Expires", date(min(expiries)) if expiries else "—"),
        field("Bulk id", inline_code(bulk.bulk_id)),
    ]
    blocks: list[Block] = [
        header(_title(bulk, requests, len(waiting))),
        {"type": "section", "fields": fields},
    ]
    blocks += _reasons(requests)
    rows, more = _table(requests, _TABLE_ROOM)
    blocks += rows
    if more:
        blocks.append(
            context(
                f"… and {more} more calls not listed here. *Review one by one* posts each "
                "in this message's thread; `/approvals pending` lists them."
            )
        )
    blocks.append(context(_tally(requests)))
    blocks.append(
        context(
            f":lock: approve what you see: each call is decided with the hash shown; "
            f"list {inline_code(bulk.digest[:12])}"
        )
    )
    if bulk.split_by:
        blocks.append(
            context(
                f":thread: {person(bulk.split_by)} chose to review these one by one: each "
                "call is in this message's thread, with its own buttons."
            )
        )
    elif waiting:
        if not_whole := _not_whole(requests, more):
            blocks.append(
                context(
                    f":mag: {not_whole} of the calls waiting are longer than this message shows, "
                    "or not listed, so they are not approved all at once: *Review one by one* "
                    "posts each in this message's thread, whole."
                )
            )
        blocks.append(_actions(bulk, waiting, whole=not not_whole))
    fallback = (
        f"Approval needed: {bulk.agent} wants to run {len(requests)} calls "
        f"({tools_summary(requests)}), {len(waiting)} waiting"
        if waiting
        else f"All {len(requests)} calls of {bulk.agent} decided"
    )
    return short(one_line(fallback), FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]


def bulk_reject_modal(bulk: Bulk, requests: Sequence[ApprovalRequest]) -> Block:
    """The `views.open` view asking for one reason, then rejecting every call that waits."""
    waiting = _waiting(requests)
    lead = (
        f"Reject the {len(waiting)} calls from {inline_code(bulk.agent)} still waiting? "
        "The reason, if you give one, becomes each call's output the model sees."
    )
    summary = tools_as_code(waiting)
    reason = text_input(
        REASON_BLOCK,
        REASON_INPUT,
        "Reason (optional)",
        "Why not? The agent sees this.",
        optional=True,
    )
    blocks = [section(escaped_within("", SECTION_TEXT_MAX, lead)), context(summary), reason]
    metadata = bulk_value(bulk.bulk_id, bulk.digest)
    return modal_view(BULK_REJECT_MODAL, metadata, "Reject all", "Reject all", blocks)
