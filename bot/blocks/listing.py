"""One line per request, for lists (`/approvals pending`, the App Home tab): what it is, a
one-line summary of its arguments, its age and a link to its message.

Every field is flattened (no newlines) and escaped, and cut to its own bound, so a line
stays short whatever the model wrote: LINE_MAX is below a section's 3000.
"""

from __future__ import annotations

import re

from agent_host.approvals import ApprovalRequest
from bot.blocks.arguments import arguments_summary
from bot.mrkdwn import date, inline_code, one_line, person, short

__all__ = ["LINE_MAX", "age", "link", "request_line", "safe_url"]

WHAT_MAX = 80  # a tool's name, or a question
AGENT_MAX = 60
SEVERITY_MAX = 20
ARGUMENTS_MAX = 150  # plain characters of the arguments' summary (escaped: at most 5x)
LINE_MAX = 2600  # every field at its bound, escaped (5x at most), with the link: under this
_URL = re.compile(r"^https?://[^\s<>|]{1,900}$")


def age(seconds: float) -> str:
    """`<1m`, `12m`, `3h`, `2d`: how long a request has waited."""
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "<1m"
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 24 else f"{hours // 24}d"


def safe_url(url: str) -> str:
    """`url` if it can sit in a mrkdwn link as it is (Slack's own permalinks can), else ""."""
    return url if _URL.fullmatch(url) else ""


def link(request: ApprovalRequest, url: str) -> str:
    """A link to the request's message, or why there is none."""
    if safe_url(url):
        return f"<{url}|open message>"
    return "not posted yet" if not request.message_ts else "message link unavailable"


def request_line(request: ApprovalRequest, now: float, url: str = "") -> str:
    """`• `req_…` *tool* by `agent` — severity, asked by … · waiting 12m · expires …` and,
    on a second line, the arguments in one line and the link to the message."""
    if request.kind == "question":  # the model's words, as code: never formatting
        what = inline_code(request.question, WHAT_MAX)
    else:
        what = inline_code(request.tool, WHAT_MAX)
    quorum = request.route.quorum
    progress = f" ({len(request.approvals)}/{quorum})" if quorum > 1 else ""
    head = (
        f"• {inline_code(request.request_id)} {what} by "
        f"{inline_code(request.agent, AGENT_MAX)} — "
        f"{short(one_line(request.severity), SEVERITY_MAX)}{progress}, asked by "
        f"{person(request.requested_by)} · waiting {age(now - request.created_at)} · "
        f"expires {date(request.expires_at)}"
    )
    detail = link(request, url)
    if request.kind != "question":
        # As code: nothing in the arguments is read as formatting (`*bold*`, `:emoji:`).
        summary = inline_code(arguments_summary(request.arguments, ARGUMENTS_MAX), ARGUMENTS_MAX)
        detail = f"{summary} · {detail}"
    return f"{head}\n      {detail}"
