"""JSON as RFC 8259 defines it: no `NaN`, `Infinity` or `-Infinity`.

Python's `json` reads those three by default (and `1e999` as infinity), then writes them back
as text no other JSON parser accepts; and a NaN slips past numeric policies, since it compares
false with every limit. So every JSON entry point (HTTP bodies, a model's tool arguments)
parses with :func:`loads`, and values that arrive already parsed are checked with
:func:`non_finite_path`.

Tool arguments are also held to MAX_DEPTH levels of nesting (:func:`too_deep_path`): far
deeper than any tool's arguments need, and far from the depth at which showing them to a
reviewer, or encoding them, would exhaust Python's recursion.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "NonFiniteNumber",
    "NotText",
    "TooDeep",
    "loads",
    "non_finite_path",
    "not_text_path",
    "too_deep_path",
    "too_deep_text",
]

MAX_DEPTH = 32  # levels of objects and arrays within one another


class NonFiniteNumber(ValueError):
    """JSON input held NaN or ±Infinity; the message says where and what to send instead."""


class TooDeep(ValueError):
    """JSON nested too deeply to read or to take (MAX_DEPTH levels)."""


class NotText(ValueError):
    """JSON bytes were not UTF-8, or a JSON string held a lone UTF-16 surrogate (`\\ud800`):
    no text can be made of it."""


# An escaped surrogate: only then can a parsed string hold a lone one.
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def loads(text: str | bytes) -> Any:
    """`json.loads`, refusing NaN, Infinity, -Infinity and numbers too large for a float,
    text nested too deeply for Python's parser, and strings that are not text. Bytes must
    be UTF-8, as JSON between systems is (RFC 8259 8.1): `json.loads` would also guess
    UTF-16 or UTF-32, in which an escaped surrogate looks like no `\\ud800`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8").removeprefix("\ufeff")  # a BOM may be ignored
        except UnicodeDecodeError as exc:
            raise NotText(f"it is not UTF-8 (byte {exc.start}): send JSON as UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise TooDeep(f"JSON nested too deeply: send at most {MAX_DEPTH} levels") from None
    if _SURROGATE.search(text) and (where := _first(value, _not_text)) is not None:
        raise NotText(f"{where} holds a lone UTF-16 surrogate, which is not text")
    return value


def not_text_path(value: Any) -> str | None:
    """Where in `value` (parsed without `loads`) a string or a key holds a lone UTF-16
    surrogate, or None."""
    return _first(value, _not_text)


def non_finite_path(value: Any) -> str | None:
    """Where a float NaN or ±Infinity sits in parsed JSON (`amount`, `items[2].price`,
    `(value)` for the value itself), or None when there is none."""
    return _first(value, lambda item, key, depth: _non_finite(item))


def too_deep_path(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Where parsed JSON nests objects and arrays more than `limit` levels deep (the path of
    the first value past it), or None when it does not."""
    return _first(value, lambda item, key, depth: depth >= limit and _container(item))


def too_deep_text(where: str) -> str:
    """The end of a refusal of arguments nested too deeply, saying where."""
    return f"nested more than {MAX_DEPTH} levels deep (at {where[:120]}); send flatter ones"


# A value's place in a walk: the place of its container and its key there (a linked list,
# so that a path is spelt out only for the value it is asked for).
_Place = tuple["_Place", Any] | None


def _first(value: Any, problem: Any) -> str | None:
    """The path of the first value for which `problem(value, its key, its depth)` holds,
    depth first; containers within the first bad one are not walked."""
    stack: list[tuple[Any, _Place, int]] = [(value, None, 0)]
    while stack:
        item, place, depth = stack.pop()
        if problem(item, None if place is None else place[1], depth):
            return _path(place)
        if isinstance(item, dict):
            stack += [(v, (place, k), depth + 1) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            stack += [(v, (place, n), depth + 1) for n, v in enumerate(item)]
    return None


def _path(place: _Place) -> str:
    keys: list[Any] = []
    while place is not None:
        place, key = place
        keys.append(key)
    path = ""
    for key in reversed(keys):
        if isinstance(key, int):
            path += f"[{key}]"
        else:
            path += f".{_shown(key)}" if path else _shown(key)
    return path or "(value)"


def _shown(key: Any) -> str:
    """A key as a path shows it (a lone surrogate as its escape, so the path is text)."""
    return str(key).encode("utf-8", "backslashreplace").decode()


def _container(item: Any) -> bool:
    return isinstance(item, dict | list | tuple)


def _non_finite(item: Any) -> bool:
    return isinstance(item, float) and not math.isfinite(item)


def _not_text(item: Any, key: Any, depth: int) -> bool:
    """A string, or a key, that holds a lone surrogate."""
    if isinstance(key, str) and not _is_text(key):
        return True
    return isinstance(item, str) and not _is_text(item)


def _is_text(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON number: send a finite number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NonFiniteNumber(f"{text[:40]} is too large for a number: send a finite number")
    return number
