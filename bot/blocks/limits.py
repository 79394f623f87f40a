"""Block Kit's size limits, and fitting text into them.

Every text is cut to fit Block Kit's documented limits (section text 3000, header 150,
button 75, confirm-dialog title 100 and text 300, modal title 24), so a huge or hostile tool
call still produces a message Slack accepts. A cut is noted, and a code fence left open by a
cut is closed.
"""

from __future__ import annotations

from bot.mrkdwn import escape, fit, units

__all__ = ["escaped_within", "plain_within"]

# Block Kit's documented limits; slack_sandbox/blockkit.py checks views against the same.
SECTION_TEXT_MAX = 3000
FIELDS_MAX = 10
HEADER_TEXT_MAX = 150
BUTTON_TEXT_MAX = 75
CONFIRM_TITLE_MAX = 100
CONFIRM_TEXT_MAX = 300
CONTEXT_TEXT_MAX = 3000
MODAL_TITLE_MAX = 24
INPUT_MAX_LENGTH = 3000
PLACEHOLDER_MAX = 150
MESSAGE_BLOCKS_MAX = 50
FALLBACK_TEXT_MAX = 300  # the notification text; Slack allows far more, people read less
OUTCOME_TEXT_MAX = 3000
OUTCOME_LISTING_MAX = 1500  # the list of calls not run gets at most half of the reply

FENCE = "```"


def truncation_note(cut: int) -> str:
    return f"\n… (truncated, {cut} more characters)"


def _balance_fences(text: str) -> str:
    return text + "\n" + FENCE if text.count(FENCE) % 2 else text


def escaped_within(raw: str, limit: int, prefix: str = "", suffix: str = "") -> str:
    """`prefix + escape(raw) + suffix` cut to `limit`, code fences balanced, cut noted.

    `prefix` and `suffix` are trusted mrkdwn (already escaped) and are kept whole.
    """
    whole = _balance_fences(prefix + escape(raw)) + suffix
    if units(whole) <= limit:
        return whole
    reserve = units(prefix) + units(suffix) + len(FENCE) + 1
    reserve += units(truncation_note(len(raw)))
    body, cut = fit(raw, escape, max(0, limit - reserve))
    return _balance_fences(prefix + body) + truncation_note(cut) + suffix


def plain_within(text: str, limit: int) -> str:
    """Plain text (never escaped) cut to `limit` with an ellipsis."""
    if units(text) <= limit:
        return text
    body, _ = fit(text, lambda s: s, limit - 1)
    return body + "…"
