"""What a person reads in a reply with blocks (`/approvals pending`), as one text: the
fallback text, then each section and context on its lines, a button as `[label:value]`."""

from __future__ import annotations

from typing import Any

__all__ = ["flat", "flat_body"]


def flat(text: str, shown: list[dict[str, Any]] | None) -> str:
    parts = [text]
    for block in shown or []:
        if block["type"] == "section":
            parts.append(block["text"]["text"])
        elif block["type"] == "context":
            parts += [e["text"] for e in block["elements"]]
        elif block["type"] == "actions":
            parts += [f"[{e['text']['text']}:{e.get('value', '')}]" for e in block["elements"]]
    return "\n".join(parts)


def flat_body(body: dict[str, Any]) -> str:
    """`flat` of a JSON reply (`{"text": ..., "blocks": [...]}`)."""
    return flat(str(body.get("text", "")), body.get("blocks"))
