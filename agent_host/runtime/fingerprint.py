"""What an approval binds to, in text: canonical JSON, an agent's fingerprint, and what
differs between two agents' fingerprint parts.

The fingerprint hashes what a reviewer's approval depends on: the tools, their schemas and
their policy (a native `Agent`'s or a hosted agent's `fingerprint_parts`). A run whose
agent's fingerprint changed while it waited is refused at resume with `describe_changes`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["canonical_json", "describe_changes", "fingerprint_of", "same_json"]


def canonical_json(value: Any) -> str:
    """`value` as JSON with sorted keys and no spaces: the same text for the same value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_json(first: Any, second: Any) -> bool:
    """Whether two values are the same JSON value. Python calls `1` and `True` equal, but a
    tool given one is not given the other; `250` and `250.0` are one JSON number (many
    languages write the second as the first)."""
    if isinstance(first, bool) or isinstance(second, bool):
        return type(first) is type(second) and first == second
    if isinstance(first, int | float) and isinstance(second, int | float):
        return first == second
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        return first.keys() == second.keys() and all(
            same_json(value, second[key]) for key, value in first.items()
        )
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        return len(first) == len(second) and all(map(same_json, first, second))
    return type(first) is type(second) and first == second


def fingerprint_of(parts: Mapping[str, Any]) -> str:
    """sha256 of an agent's fingerprint parts, as canonical JSON."""
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def describe_changes(old: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What differs between two agents' fingerprint parts, in words."""
    old_tools, new_tools = old.get("tools", {}), now.get("tools", {})
    changes = [f"tool {n} removed" for n in sorted(set(old_tools) - set(new_tools))]
    changes += [f"tool {n} added" for n in sorted(set(new_tools) - set(old_tools))]
    for name in sorted(set(old_tools) & set(new_tools)):
        for aspect in ("schema", "policy", "severity"):
            if old_tools[name].get(aspect) != new_tools[name].get(aspect):
                changes.append(f"{aspect} of tool {name} changed")
    if old.get("rules") != now.get("rules"):
        changes.append("operator policy rules changed")
    if old.get("framework") != now.get("framework"):
        changes.append("the agent's framework changed")
    return ", ".join(changes) or "the agent definition changed"
