"""JSON as RFC 8259 defines it: no `NaN`, `Infinity` or `-Infinity`.

Python's `json` reads those three by default (and `1e999` as infinity), then writes them back
as text no other JSON parser accepts; and a NaN slips past numeric policies, since it compares
false with every limit. So every JSON entry point (HTTP bodies, a model's tool arguments)
parses with :func:`loads`, and values that arrive already parsed are checked with
:func:`non_finite_path`.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NonFiniteNumber", "loads", "non_finite_path"]


class NonFiniteNumber(ValueError):
    """JSON input held NaN or ±Infinity; the message says where and what to send instead."""


def loads(text: str | bytes) -> Any:
    """`json.loads`, refusing NaN, Infinity, -Infinity and numbers too large for a float."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def non_finite_path(value: Any) -> str | None:
    """Where a float NaN or ±Infinity sits in parsed JSON (`amount`, `items[2].price`,
    `(value)` for the value itself), or None when there is none."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path or "(value)"
        if isinstance(item, dict):
            stack += [(f"{path}.{key}" if path else str(key), v) for key, v in item.items()]
        elif isinstance(item, list | tuple):
            stack += [(f"{path}[{n}]", v) for n, v in enumerate(item)]
    return None


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON number: send a finite number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NonFiniteNumber(f"{text[:40]} is too large for a number: send a finite number")
    return number
