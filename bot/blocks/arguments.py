"""A tool call's arguments as people see them: secrets masked at any depth, then shown."""

from __future__ import annotations

import json
import re
from typing import Any

from bot.blocks.elements import Block, section
from bot.blocks.limits import SECTION_TEXT_MAX, plain_within, truncation_note
from bot.mrkdwn import code_block_text, fit, one_line, units

__all__ = ["MASK", "arguments_block", "arguments_summary", "is_secret_key", "mask_secrets"]

MASK = "••••••"

_SECRET_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "credential",
    "privatekey",
)


def is_secret_key(key: object) -> bool:
    folded = re.sub(r"[\s_\-.]", "", str(key).lower())
    return any(word in folded for word in _SECRET_WORDS)


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with the value of every secret-looking key replaced by MASK."""
    if isinstance(value, dict):
        return {k: MASK if is_secret_key(k) else mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    return value


def _json(value: Any, *, indent: int | None = 2) -> str:
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular references and the like
        return repr(value)


def arguments_block(arguments: Any) -> Block:
    """The (masked) arguments as pretty JSON in a code block, cut to one section."""
    raw = _json(mask_secrets(arguments))
    prefix, suffix = "*Arguments*\n```\n", "\n```"
    text = prefix + code_block_text(raw) + suffix
    if units(text) > SECTION_TEXT_MAX:
        note = truncation_note(len(raw))
        budget = SECTION_TEXT_MAX - units(prefix) - units(suffix) - units(note)
        body, cut = fit(raw, code_block_text, budget)
        text = prefix + body + suffix + truncation_note(cut)
    return section(text)


def arguments_summary(arguments: Any, limit: int) -> str:
    """One line of (masked) arguments in plain text, cut to `limit`."""
    return plain_within(one_line(_json(mask_secrets(arguments), indent=None)), limit)
