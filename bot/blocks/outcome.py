"""The thread reply when a run ends: its output or error, and the calls that were not run."""

from __future__ import annotations

from collections.abc import Iterable

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.notifier import RunSummary
from bot.blocks.limits import OUTCOME_LISTING_MAX, OUTCOME_TEXT_MAX, escaped_within
from bot.blocks.request import decision_detail
from bot.mrkdwn import escape, inline_code, one_line, person, short, units

__all__ = ["outcome_message"]


def _not_run_line(request: ApprovalRequest) -> str | None:
    tool = inline_code(request.tool)
    detail = one_line(decision_detail(request))
    if request.status == "rejected":
        line = f"• {tool} was rejected by {person(request.decided_by)}"
    elif request.status == "changes_requested":
        line = f"• {tool}: changes requested by {person(request.decided_by)}"
    elif request.status == "expired":
        return f"• {tool} expired before anyone decided; it was not run"
    else:
        return None
    if detail:
        line += f": {short(detail)}"
    return line


def _not_run_listing(requests: Iterable[ApprovalRequest]) -> str:
    """`*Not run:*` and a line per call, within OUTCOME_LISTING_MAX; "" when all ran."""
    lines = [line for r in requests if (line := _not_run_line(r)) is not None]
    if not lines:
        return ""
    listing = "\n*Not run:*"
    for index, line in enumerate(lines):
        more = f"\n• … and {len(lines) - index} more"
        if units(listing + "\n" + line) > OUTCOME_LISTING_MAX - units(more):
            return listing + more
        listing += "\n" + line
    return listing


def outcome_message(run: RunSummary, requests: Iterable[ApprovalRequest]) -> str:
    """The thread reply for a finished run: its output or error and what was not run."""
    if run.status == "succeeded":
        lead, raw = "Run finished", run.output.strip() or "(no output)"
    elif run.status == "failed":
        lead, raw = "Run failed", run.error.strip() or "(no error message)"
    else:
        lead, raw = f"Run {escape(run.status)}", (run.output or run.error).strip() or "—"
    return escaped_within(raw, OUTCOME_TEXT_MAX, f"{lead}: ", _not_run_listing(requests))
