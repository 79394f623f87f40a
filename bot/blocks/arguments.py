"""A tool call's arguments as people see them: secrets masked at any depth, then shown."""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from typing import Any

from bot.blocks.elements import Block, section
from bot.blocks.limits import SECTION_TEXT_MAX, plain_within, truncation_note
from bot.mrkdwn import code_block_text, fit, one_line, units

__all__ = [
    "MASK",
    "arguments_block",
    "arguments_in_full",
    "arguments_sections",
    "arguments_summary",
    "hides",
    "hides_characters",
    "is_secret_key",
    "mask_secrets",
    "shown_json",
    "summary_in_full",
    "visible",
]

MASK = "••••••"
# Sections of a view the arguments may take when shown whole (`arguments_sections`): about
# 110,000 characters of JSON, well within a modal's 100 blocks.
WHOLE_SECTIONS_MAX = 40
_FENCED = "```\n", "\n```"
_TITLED = "*Arguments*\n```\n", "\n```"

# Words that make a key name a credential, alone or two run together (`api_key`,
# `X-Api-Key`, `private_key_pem`, `GitHubToken`, `aws_secret_access_key`, `ssh_key`).
_SECRET_WORDS = frozenset(
    {
        "password",
        "passwords",
        "passwd",
        "secret",
        "secrets",
        "token",
        "apikey",
        "apikeys",
        "authorization",
        "credential",
        "credentials",
        "privatekey",
        "privatekeys",
        "accesskey",
        "accesskeys",
        "signingkey",
        "signingkeys",
        "sshkey",
        "sshkeys",
        "passphrase",
        "passphrases",
        "cookie",
        "cookies",
        "bearer",
        "bearers",
        "authorizations",
    }
)
# Words that name a credential only after another word (`db_pwd`): alone, `pwd` is more
# often a working directory, which a reviewer must see.
_SECRET_AFTER_A_NAME = frozenset({"pwd", "pwds"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def is_secret_key(key: object) -> bool:
    """Whether `key` names a credential: one of its words, or two of them run together,
    is a credential's (case- and separator-insensitive). Words, not letters: `max_tokens`
    or `secretary_note` do not."""
    words = [word.lower() for word in _WORDS.findall(str(key))]
    pairs = (first + second for first, second in itertools.pairwise(words))
    if len(words) > 1 and words[-1] in _SECRET_AFTER_A_NAME:
        return True
    return any(word in _SECRET_WORDS for word in (*words, *pairs))


def hides(key: object, value: Any) -> bool:
    """Whether `value`, under `key`, is shown as MASK: anything under a key naming a
    credential but a number, a flag or null (a count or a switch is no credential, and
    hiding it would hide what the call does)."""
    shown_as_is = value is None or isinstance(value, bool | int | float)
    return is_secret_key(key) and not shown_as_is


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with every credential under a credential's key replaced by MASK."""
    if isinstance(value, dict):
        return {k: MASK if hides(k, v) else mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    return value


# Characters that change how the text around them looks without showing themselves: format
# characters (bidirectional controls, which can make `/srv/prod` read as something else,
# zero-width ones, tags that smuggle hidden text), controls, line separators a one-line
# summary would drop, unassigned and private-use code points, and fillers and selectors
# that show as nothing. Shown as their JSON escapes.
_HIDING = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
_BLANK = frozenset("\u034f\u115f\u1160\u3164\uffa0")
_SHOWN_AS_IS = re.compile(r"[^\x00-\x7e]")  # past printable ASCII: DEL, then non-ASCII


def _hides(char: str) -> bool:
    point = ord(char)
    return (
        unicodedata.category(char) in _HIDING
        or char in _BLANK
        or 0xFE00 <= point <= 0xFE0F  # variation selectors
        or 0xE0100 <= point <= 0xE01EF
    )


def visible(text: str) -> str:
    """`text` with each character that hides or reorders text written as its JSON escape."""
    if text.isascii() and "\x7f" not in text:  # (JSON has escaped the other controls)
        return text
    return _SHOWN_AS_IS.sub(
        lambda m: json.dumps(m.group())[1:-1] if _hides(m.group()) else m.group(), text
    )


def hides_characters(text: str) -> bool:
    """Whether `text` holds a character that hides or reorders text (shown as its escape)."""
    return visible(text) != text


def _json(value: Any, *, indent: int | None = 2) -> str:
    try:
        text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular references and the like
        text = repr(value)
    return visible(text)


# What is shown of arguments nested too deeply to render (only stored before such
# arguments were refused, `strict_json.MAX_DEPTH`): never approved from Slack.
TOO_DEEP = "[arguments nested too deeply to show]"


def shown_json(arguments: Any, *, indent: int | None = 2) -> str | None:
    """The (masked) arguments as JSON as they are shown, characters that hide escaped; None
    when they nest too deeply to render."""
    try:
        return _json(mask_secrets(arguments), indent=indent)
    except RecursionError:
        return None


def _in_one_section(arguments: Any) -> tuple[str, bool]:
    """The text of `arguments_block`, and whether it holds the arguments whole."""
    raw = shown_json(arguments)
    prefix, suffix = _TITLED
    text = prefix + code_block_text(raw or TOO_DEEP) + suffix
    if units(text) <= SECTION_TEXT_MAX:
        return text, raw is not None
    note = truncation_note(len(raw or ""))
    budget = SECTION_TEXT_MAX - units(prefix) - units(suffix) - units(note)
    body, cut = fit(raw or "", code_block_text, budget)
    return prefix + body + suffix + truncation_note(cut), False


def arguments_block(arguments: Any) -> Block:
    """The (masked) arguments as pretty JSON in a code block, cut to one section."""
    return section(_in_one_section(arguments)[0])


def arguments_in_full(arguments: Any) -> bool:
    """Whether `arguments_block` shows the arguments whole."""
    return _in_one_section(arguments)[1]


def arguments_sections(arguments: Any) -> list[Block] | None:
    """The (masked) arguments whole, as pretty JSON over as many code blocks as it takes;
    None when that is more than WHOLE_SECTIONS_MAX."""
    prefix, suffix = _FENCED
    budget = SECTION_TEXT_MAX - units(prefix) - units(suffix)
    whole = shown_json(arguments)
    if whole is None:
        return None
    rest, sections = whole, list[Block]()
    while rest:
        if len(sections) == WHOLE_SECTIONS_MAX:
            return None
        # A rendering is never shorter than the text, so a section holds at most `budget`
        # characters of it: only that much is tried.
        window = rest[:budget]
        body, cut = fit(window, code_block_text, budget)
        sections.append(section(prefix + body + suffix))
        rest = rest[len(window) - cut :]
    return sections


def arguments_summary(arguments: Any, limit: int) -> str:
    """One line of (masked) arguments in plain text, cut to `limit`."""
    return plain_within(one_line(shown_json(arguments, indent=None) or TOO_DEEP), limit)


def summary_in_full(arguments: Any, limit: int) -> bool:
    """Whether `arguments_summary`, shown as inline code, shows the arguments whole and as
    they are: not cut, no run of whitespace in a value made one, no backtick (which would
    end the code and let the rest be read as formatting)."""
    flat = shown_json(arguments, indent=None)
    if flat is None or "`" in flat:
        return False
    return one_line(flat) == flat and units(flat) <= limit
