"""Slack mrkdwn from untrusted text: escaping, mentions, dates, inline code and shortening.

The one home of these rules: messages, modals, command replies and refusals all render a
name, an id or a date through here, so each looks the same everywhere and nothing a user
or the model wrote can turn into markup.

Text is escaped (`&`, `<`, `>`) before it reaches mrkdwn, so it never forms a mention, a
link or a `<!channel>`. Only an id shaped like Slack's own becomes a mention: a user
(`U…`, `W…`), a user group (`S…`), a channel (`C…`, `G…`, `D…`); anything else is shown as
escaped text. Lengths are measured in UTF-16 code units, which is never less than the
number of characters and is how Slack's clients count at most.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

__all__ = [
    "NAME_MAX",
    "NOBODY",
    "channel_link",
    "code_block_text",
    "date",
    "escape",
    "fit",
    "inline_code",
    "mention",
    "mentions",
    "one_line",
    "person",
    "short",
    "units",
]

USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
GROUP_ID = re.compile(r"^S[A-Z0-9]+$")
CHANNEL_ID = re.compile(r"^[CDG][A-Z0-9]+$")

NOBODY = "—"  # shown for an empty name, id or date
NAME_MAX = 300  # agent and tool names, ids: shown whole up to this, then cut
MENTION_TEXT_MAX = 100  # a name that is not a Slack id, shown as text
DATE_FORMAT = "{date_short_pretty} at {time}"
_FENCE_TICK = re.compile("`(?=`)")


def escape(text: str) -> str:
    """Escape `&`, `<` and `>` as Slack's mrkdwn requires (`&amp;`, `&lt;`, `&gt;`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def units(text: str) -> int:
    """Length as Slack's clients count it at most: UTF-16 code units."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def fit(raw: str, render: Callable[[str], str], budget: int) -> tuple[str, int]:
    """The longest prefix of `raw` whose rendering fits `budget`: (rendered, characters cut)."""
    rendered = render(raw)
    if units(rendered) <= budget:
        return rendered, 0
    low, high = 0, len(raw)  # render(raw[:low]) fits, render(raw[:high]) does not
    while high - low > 1:
        middle = (low + high) // 2
        if units(render(raw[:middle])) <= budget:
            low = middle
        else:
            high = middle
    return render(raw[:low]), len(raw) - low


def one_line(text: str) -> str:
    return " ".join(text.split())


def code_block_text(text: str) -> str:
    """Escaped text safe inside a ``` block: no run of backticks can close it early."""
    return _FENCE_TICK.sub("`\u200b", escape(text))


def short(raw: str, limit: int = NAME_MAX) -> str:
    """Escaped mrkdwn of a short value (a name, an id), cut with an ellipsis to `limit`.

    Runs of backticks are broken up (see `code_block_text`): a name never opens a code block.
    """
    rendered = code_block_text(raw)
    if units(rendered) <= limit:
        return rendered
    body, _ = fit(raw, code_block_text, limit - 1)
    return body + "…"


def inline_code(raw: str, limit: int = NAME_MAX) -> str:
    """`raw` as inline code, on one line, cut to `limit` characters (at most 5x that once
    escaped), so nothing in it is formatting, whoever wrote it (a tool's or agent's name, a
    model's question, arguments): a backtick, which would end the code early, is shown as
    the look-alike U+02CB (modifier letter grave accent), and a line break, which inline
    code cannot span, as a space (other spaces stay as they are: they may be the value)."""
    raw = " ".join(raw.splitlines()).replace("`", "\u02cb")
    if not raw:
        return NOBODY
    if len(raw) > limit:
        raw = raw[: limit - 1] + "…"
    return f"`{escape(raw)}`"


def mention(who: str) -> str:
    """A mention of a Slack user or user-group id, otherwise the escaped name, or a dash."""
    who = who.strip()
    if not who:
        return NOBODY
    if USER_ID.match(who):
        return f"<@{who}>"
    if GROUP_ID.match(who):
        return f"<!subteam^{who}>"
    return short(who, MENTION_TEXT_MAX)


def person(who: str) -> str:
    """`mention`, for one person only (a requester, a decider): a user id becomes a mention,
    anything else (a user-group id too: it would notify the whole group) its escaped name."""
    who = who.strip()
    if GROUP_ID.match(who):
        return short(who, MENTION_TEXT_MAX)
    return mention(who)


def mentions(ids: Sequence[str], most: int = 10) -> str:
    """`mention` of each of the first `most`, then how many more; a dash for none."""
    shown = ", ".join(mention(who) for who in ids[:most]) or NOBODY
    if len(ids) > most:
        shown += f" and {len(ids) - most} more"
    return shown


def channel_link(channel_id: str) -> str:
    """A link to a Slack channel id (`<#C…>`), otherwise the escaped text, or a dash."""
    channel_id = channel_id.strip()
    if not channel_id:
        return NOBODY
    if CHANNEL_ID.match(channel_id):
        return f"<#{channel_id}>"
    return short(channel_id, MENTION_TEXT_MAX)


def date(timestamp: float | None, token: str = DATE_FORMAT) -> str:
    """`<!date^unix^token|fallback>`: shown in each reader's own time zone, UTC as fallback."""
    if timestamp is None:
        return NOBODY
    try:
        moment = datetime.fromtimestamp(timestamp, UTC)
        unix = int(timestamp)
    except (OverflowError, OSError, ValueError):
        return escape(str(timestamp))
    return f"<!date^{unix}^{token}|{moment:%Y-%m-%d %H:%M} UTC>"
