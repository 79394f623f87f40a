"""The Block Kit pieces every view is built from: text objects, sections, headers, buttons."""

from __future__ import annotations

from typing import Any

from bot.blocks.limits import BUTTON_TEXT_MAX, HEADER_TEXT_MAX, plain_within
from bot.mrkdwn import one_line

__all__ = ["Block", "button", "context", "field", "header", "section", "text", "written"]

Block = dict[str, Any]


def text(content: str, kind: str = "mrkdwn") -> Block:
    if kind == "plain_text":
        return {"type": "plain_text", "text": content, "emoji": True}
    return {"type": "mrkdwn", "text": content}


def section(content: str) -> Block:
    return {"type": "section", "text": text(content)}


def written(label: str, words: str, limit: int) -> list[Block]:
    """Words countersign did not write (a tool's reason, a question, what the agent said),
    under the bold `label`: shown exactly as written, in plain text, so that they can make
    nothing look like countersign's own (no bold, no quote, no emoji from a :code:, no
    mention or link). None when there are no words."""
    if not words.strip():
        return []
    shown = {"type": "plain_text", "text": plain_within(words, limit), "emoji": False}
    return [section(f"*{label}*"), {"type": "section", "text": shown}]


def header(content: str) -> Block:
    return {
        "type": "header",
        "text": text(plain_within(one_line(content), HEADER_TEXT_MAX), "plain_text"),
    }


def context(content: str) -> Block:
    return {"type": "context", "elements": [text(content)]}


def field(label: str, value: str) -> Block:
    """A `*label*\\nvalue` field; `value` is trusted, bounded mrkdwn (see `bot.mrkdwn.short`)."""
    return text(f"*{label}*\n{value}")


def button(
    label: str,
    action_id: str,
    request_id: str,
    style: str | None = None,
    confirm: Block | None = None,
) -> Block:
    element: Block = {
        "type": "button",
        "action_id": action_id,
        "text": text(plain_within(label, BUTTON_TEXT_MAX), "plain_text"),
        "value": request_id,
    }
    if style is not None:
        element["style"] = style
    if confirm is not None:
        element["confirm"] = confirm
    return element
