"""Block Kit handling for the local Slack sandbox: ids, checks, and finding elements.

Slack gives every block without a ``block_id`` a generated one and every interactive
element without an ``action_id`` a generated one, and rejects blocks that break its
documented limits (50 blocks per message, 100 per view, ids up to 255 characters, unique
``block_id``s, section text up to 3000 characters and 10 fields of up to 2000, header text
up to 150, 10 context elements, button text up to 75 and values up to 2000 characters,
modal titles up to 24, ``private_metadata`` up to 3000). The checks here are the subset a
bot is likely to trip.
"""

from __future__ import annotations

import copy
import secrets
import string
from collections.abc import Iterator
from typing import Any

JsonDict = dict[str, Any]

MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_ID_LENGTH = 255
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
_ID_ALPHABET = string.ascii_letters + string.digits
_SINGLE_SELECTS = ("static_select", "external_select", "radio_buttons")


def _generated_id(length: int = 5) -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def block_elements(block: JsonDict) -> list[JsonDict]:
    """The interactive elements a block holds (actions elements, accessory, input element)."""
    kind = block.get("type")
    if kind == "actions":
        return [e for e in block.get("elements") or [] if isinstance(e, dict)]
    if kind == "section" and isinstance(block.get("accessory"), dict):
        accessory: JsonDict = block["accessory"]
        return [] if accessory.get("type") == "image" else [accessory]
    if kind == "input" and isinstance(block.get("element"), dict):
        return [block["element"]]
    return []


def normalize_blocks(blocks: list[JsonDict]) -> list[JsonDict]:
    """A copy with generated ``block_id``s and ``action_id``s filled in, as Slack stores it."""
    result = copy.deepcopy(blocks)
    for block in result:
        block.setdefault("block_id", _generated_id())
        for element in block_elements(block):
            element.setdefault("action_id", _generated_id())
    return result


def _text_of(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("text", ""))
    return "" if value is None else str(value)


def check_blocks(blocks: Any, *, limit: int) -> str | None:
    """Why Slack would reject ``blocks``, or None when they pass."""
    if not isinstance(blocks, list):
        return "blocks must be a JSON array"
    if len(blocks) > limit:
        return f"no more than {limit} items allowed [json-pointer:/blocks]"
    seen: set[str] = set()
    for index, block in enumerate(blocks):
        where = f"[json-pointer:/blocks/{index}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return f"missing required field: type {where}"
        block_id = block.get("block_id")
        if block_id is not None:
            if not isinstance(block_id, str) or len(block_id) > MAX_ID_LENGTH:
                return f"must be a string of at most {MAX_ID_LENGTH} characters {where}/block_id"
            if block_id in seen:
                return f"duplicate block_id {block_id!r} {where}/block_id"
            seen.add(block_id)
        if block["type"] == "actions" and not block.get("elements"):
            return f"missing required field: elements {where}"
        problem = _check_text(block)
        if problem:
            return f"{problem} {where}"
        for element in block_elements(block):
            problem = _check_element(element)
            if problem:
                return f"{problem} {where}"
    return None


def _check_text(block: JsonDict) -> str | None:
    """The text limits of sections, headers and context blocks (counted in characters, as
    Slack's error messages state them)."""
    kind = block["type"]
    if kind == "section":
        if len(_text_of(block.get("text"))) > MAX_SECTION_TEXT:
            return f"must be less than {MAX_SECTION_TEXT + 1} characters /text"
        fields = block.get("fields") or []
        if len(fields) > MAX_FIELDS:
            return f"no more than {MAX_FIELDS} items allowed /fields"
        if any(len(_text_of(f)) > MAX_FIELD_TEXT for f in fields):
            return f"must be less than {MAX_FIELD_TEXT + 1} characters /fields"
    elif kind == "header" and len(_text_of(block.get("text"))) > MAX_HEADER_TEXT:
        return f"must be less than {MAX_HEADER_TEXT + 1} characters /text"
    elif kind == "context" and len(block.get("elements") or []) > MAX_CONTEXT_ELEMENTS:
        return f"no more than {MAX_CONTEXT_ELEMENTS} items allowed /elements"
    return None


def _check_element(element: JsonDict) -> str | None:
    action_id = element.get("action_id")
    if action_id is not None and (not isinstance(action_id, str) or len(action_id) > 255):
        return f"action_id must be a string of at most {MAX_ID_LENGTH} characters"
    if element.get("type") == "button":
        if len(_text_of(element.get("text"))) > MAX_BUTTON_TEXT:
            return f"button text must be at most {MAX_BUTTON_TEXT} characters"
        if len(str(element.get("value", ""))) > MAX_BUTTON_VALUE:
            return f"button value must be at most {MAX_BUTTON_VALUE} characters"
        if element.get("style") not in (None, "primary", "danger"):
            return "button style must be primary or danger"
    return None


def check_view(view: Any) -> str | None:
    """Why ``views.open``/``views.update`` would reject ``view``, or None when it passes."""
    if not isinstance(view, dict):
        return "view must be a JSON object [json-pointer:/view]"
    kind = view.get("type")
    if kind not in ("modal", "home"):
        return "must be one of modal, home [json-pointer:/view/type]"
    if kind == "modal":
        title = view.get("title")
        if not isinstance(title, dict) or not _text_of(title):
            return "missing required field: title [json-pointer:/view/title]"
        if len(_text_of(title)) > MAX_MODAL_TITLE:
            return f"must be less than {MAX_MODAL_TITLE + 1} characters [json-pointer:/view/title]"
        raw_blocks = view.get("blocks")
        blocks: list[Any] = raw_blocks if isinstance(raw_blocks, list) else []
        has_input = any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
        if has_input and not view.get("submit"):
            return "submit is required when a view has input blocks [json-pointer:/view/submit]"
    if len(str(view.get("private_metadata") or "")) > MAX_PRIVATE_METADATA:
        where = "[json-pointer:/view/private_metadata]"
        return f"must be at most {MAX_PRIVATE_METADATA} characters {where}"
    if len(str(view.get("callback_id") or "")) > MAX_ID_LENGTH:
        return f"must be at most {MAX_ID_LENGTH} characters [json-pointer:/view/callback_id]"
    return check_blocks(view.get("blocks"), limit=MAX_VIEW_BLOCKS)


def find_element(
    blocks: list[JsonDict], action_id: str, kind: str | None = None
) -> tuple[str, JsonDict] | None:
    """``(block_id, element)`` of the element with ``action_id`` (of type ``kind``)."""
    for block in blocks:
        for element in block_elements(block):
            if element.get("action_id") == action_id and kind in (None, element.get("type")):
                return str(block.get("block_id", "")), element
    return None


def action_ids(blocks: list[JsonDict]) -> list[str]:
    return [str(e.get("action_id")) for b in blocks for e in block_elements(b)]


def input_elements(blocks: list[JsonDict]) -> Iterator[tuple[str, JsonDict, bool]]:
    """``(block_id, element, optional)`` for each input block of a view."""
    for block in blocks:
        if block.get("type") == "input" and isinstance(block.get("element"), dict):
            yield str(block.get("block_id", "")), block["element"], bool(block.get("optional"))


def state_value(element: JsonDict, value: Any) -> JsonDict:
    """One ``state.values[block_id][action_id]`` entry, shaped as Slack sends it."""
    kind = str(element.get("type", "plain_text_input"))
    if kind in _SINGLE_SELECTS:
        return {"type": kind, "selected_option": _option(element, value)}
    if kind in ("checkboxes", "multi_static_select"):
        values = value if isinstance(value, list) else [] if value is None else [value]
        return {"type": kind, "selected_options": [_option(element, v) for v in values]}
    if kind in ("users_select", "conversations_select", "channels_select"):
        field = {"users_select": "selected_user", "channels_select": "selected_channel"}.get(
            kind, "selected_conversation"
        )
        return {"type": kind, field: value}
    if kind == "datepicker":
        return {"type": kind, "selected_date": value}
    return {"type": kind, "value": value}  # text inputs and anything else with a value


def initial_value(element: JsonDict) -> Any:
    """What an input holds before anyone types, in `state_value`'s terms: Slack submits a
    pre-filled input as it was filled unless the person changed it."""
    kind = str(element.get("type", ""))
    if kind in _SINGLE_SELECTS:
        option = element.get("initial_option")
        return option.get("value") if isinstance(option, dict) else None
    if kind in ("checkboxes", "multi_static_select"):
        options = element.get("initial_options") or []
        return [o.get("value") for o in options if isinstance(o, dict)]
    if kind == "datepicker":
        return element.get("initial_date")
    return element.get("initial_value")


def _option(element: JsonDict, value: Any) -> JsonDict | None:
    if value is None or value == "":  # nothing chosen (the page sends "" for that)
        return None
    for option in element.get("options") or []:
        if isinstance(option, dict) and option.get("value") == value:
            return copy.deepcopy(option)
    return {"text": {"type": "plain_text", "text": str(value), "emoji": True}, "value": value}
