"""The "Edit & approve" form, both ways: a modal pre-filled with the editable arguments, one
input per argument from the tool's JSON schema, and the edited arguments read back from
what Slack submits (each element kind has its own shape in `view.state.values`).

    text     plain_text_input          number, integer   number_input
    choice   static_select (an enum)   boolean           checkboxes (one box)
    json     plain_text_input, multiline JSON (objects, arrays, unions, long enums)

An argument the message masks (`arguments.hides`: a credential under a credential's name)
is never pre-filled (the form is no place to show it): left empty it keeps its value. An
argument whose value does not fit an input (Block Kit caps it at 3000 characters) is listed
as not editable here and keeps its value.
Reading the form back gives the arguments to change, or a problem per input, in words for
the reviewer; the approval service then validates them with the tool and judges them again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from agent_host.approvals import ApprovalRequest, EditableField, EditForm
from agent_host.runtime import strict_json
from bot.blocks.arguments import hides, hides_characters
from bot.blocks.elements import Block, context, section, text
from bot.blocks.ids import COMMENT_BLOCK, EDIT_INPUT, EDIT_MODAL, edit_block_id
from bot.blocks.limits import (
    CONTEXT_TEXT_MAX,
    INPUT_MAX_LENGTH,
    PLACEHOLDER_MAX,
    escaped_within,
    plain_within,
)
from bot.blocks.modals import call_context, comment_input, modal_view
from bot.mrkdwn import inline_code
from bot.parsing import modal_metadata

__all__ = ["EditInput", "block_of", "edit_inputs", "edit_modal", "read_edit"]

LABEL_MAX = 2000  # an input block's label and hint
OPTIONS_MAX = 100  # a static_select's options
OPTION_TEXT_MAX = 75
OPTION_VALUE_MAX = 150
ID_MAX = 255  # block ids
VIEW_INPUTS_MAX = 90  # a view holds 100 blocks; the rest are the header, notes and comment
TRUE = "true"


@dataclass(frozen=True)
class EditInput:
    """One argument's input in the form: its field, and the element kind chosen for it."""

    field: EditableField
    element: str  # plain_text_input, number_input, static_select, checkboxes
    secret: bool = False

    @property
    def block_id(self) -> str:
        return edit_block_id(self.field.name)


def _as_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _choice_value(value: Any) -> str:
    return _as_json(value)


def _element_kind(field: EditableField) -> str:
    if field.kind in ("number", "integer"):
        return "number_input"
    if field.kind == "boolean":
        return "checkboxes"
    if field.kind == "choice" and _choices_fit(field):
        return "static_select"
    return "plain_text_input"


def _choices_fit(field: EditableField) -> bool:
    return 0 < len(field.choices) <= OPTIONS_MAX and all(
        len(_choice_value(c)) <= OPTION_VALUE_MAX for c in field.choices
    )


def _initial_text(field: EditableField, value: Any) -> str | None:
    """What a text input starts with; None when the value does not fit one, or holds a
    character that hides or reorders text (an input would show it as it looks, not as it
    is: the message shows its escape)."""
    if value is None:
        return ""
    shown = value if field.kind == "text" and isinstance(value, str) else _as_json(value, 2)
    return shown if len(shown) <= INPUT_MAX_LENGTH and not hides_characters(shown) else None


def edit_inputs(form: EditForm) -> tuple[list[EditInput], list[str]]:
    """The inputs the form shows, and the names of editable arguments it cannot show."""
    shown: list[EditInput] = []
    left_out: list[str] = []
    for field in form.fields:
        element = _element_kind(field)
        value = form.arguments.get(field.name)
        secret = hides(field.name, value)  # masked on the message too: typed, never shown
        fits = len(edit_block_id(field.name)) <= ID_MAX and len(shown) < VIEW_INPUTS_MAX
        if not secret and element == "plain_text_input" and _initial_text(field, value) is None:
            fits = False
        if fits:
            plain = "plain_text_input" if secret else element  # a secret is typed, never shown
            shown.append(EditInput(field, plain, secret))
        else:
            left_out.append(field.name)
    return shown, left_out


def _number_text(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    text = repr(value)
    return None if "e" in text.lower() else text  # Slack reads plain decimals only


def _option(value: Any) -> Block:
    return {
        "text": text(plain_within(_choice_value(value), OPTION_TEXT_MAX), "plain_text"),
        "value": _choice_value(value),
    }


def _element(item: EditInput, value: Any) -> Block:
    field = item.field
    element: Block = {"type": item.element, "action_id": EDIT_INPUT}
    if item.secret:
        hidden = "Hidden. Leave empty to keep it, or type a new value."
        element["placeholder"] = text(plain_within(hidden, PLACEHOLDER_MAX), "plain_text")
        element["max_length"] = INPUT_MAX_LENGTH
    elif item.element == "number_input":
        element["is_decimal_allowed"] = field.kind == "number"
        if (initial := _number_text(value)) is not None:
            element["initial_value"] = initial
        for key, bound in (("min_value", field.minimum), ("max_value", field.maximum)):
            if bound is not None and (shown := _number_text(bound)) is not None:
                element[key] = shown
    elif item.element == "static_select":
        element["options"] = [_option(c) for c in field.choices]
        element["placeholder"] = text("Choose one", "plain_text")
        if value in field.choices:
            element["initial_option"] = _option(value)
    elif item.element == "checkboxes":
        element["options"] = [_option_yes()]
        if value is True:
            element["initial_options"] = [_option_yes()]
    else:
        initial = _initial_text(field, value) or ""
        element["multiline"] = field.kind != "text" or "\n" in initial or len(initial) > 150
        element["max_length"] = INPUT_MAX_LENGTH
        if initial:
            element["initial_value"] = initial
        if field.kind != "text":
            shown = "JSON, or null" if field.nullable else "JSON"
            element["placeholder"] = text(plain_within(shown, PLACEHOLDER_MAX), "plain_text")
    return element


def _option_yes() -> Block:
    return {"text": text("Yes", "plain_text"), "value": TRUE}


def _input_block(item: EditInput, value: Any) -> Block:
    field = item.field
    block: Block = {
        "type": "input",
        "block_id": item.block_id,
        # Slack may not submit an empty required input; a boolean left unticked is false,
        # and a secret left empty keeps its value, so those are never required.
        "optional": item.secret or field.kind == "boolean" or field.nullable or not field.required,
        "label": text(plain_within(field.name, LABEL_MAX), "plain_text"),
        "element": _element(item, value),
    }
    hint = field.description
    if item.element == "plain_text_input" and field.kind != "text":  # typed as JSON
        hint = (hint + " " if hint else "") + "Enter JSON."
    if hint:
        block["hint"] = text(plain_within(hint, LABEL_MAX), "plain_text")
    return block


def edit_modal(request: ApprovalRequest, form: EditForm) -> Block:
    """The `views.open` view to edit `request`'s editable arguments, then approve."""
    inputs, left_out = edit_inputs(form)
    lead = (
        f"Change what {inline_code(request.tool)} runs with, then approve. The edit is "
        "checked against the tool and its policy again; the agent is told what you changed."
    )
    blocks: list[Block] = [section(lead), call_context(request)]
    if left_out:
        names = ", ".join(left_out)
        blocks.append(
            context(
                escaped_within(
                    names,
                    CONTEXT_TEXT_MAX,
                    "Not editable here (cannot be shown as it is in a form): ",
                )
            )
        )
    blocks += [_input_block(item, form.arguments.get(item.field.name)) for item in inputs]
    blocks.append(comment_input(optional=True))
    metadata = modal_metadata(request.request_id, request.pause_id)
    return modal_view(EDIT_MODAL, metadata, "Edit & approve", "Approve edited", blocks)


def _state(values: dict[str, Any], block_id: str) -> dict[str, Any] | None:
    block = values.get(block_id)
    entry = block.get(EDIT_INPUT) if isinstance(block, dict) else None
    return entry if isinstance(entry, dict) else None


def _typed(entry: dict[str, Any]) -> str:
    value = entry.get("value")
    return value if isinstance(value, str) else ""


def _empty(field: EditableField) -> tuple[Any, str]:
    """An emptied input: null where the argument may be null, else a problem."""
    if field.nullable:
        return None, ""
    if field.kind == "text":
        return "", ""
    return None, "Enter a value."


def _parse(item: EditInput, entry: dict[str, Any]) -> tuple[Any, str]:
    """(value, problem) of one submitted input."""
    field = item.field
    if item.element == "checkboxes":
        chosen = entry.get("selected_options")
        return bool(chosen) and isinstance(chosen, list), ""
    if item.element == "static_select":
        option = entry.get("selected_option")
        if not isinstance(option, dict):
            return _empty(field) if field.nullable else (None, "Choose one.")
        return _json_value(str(option.get("value", "")))
    typed = _typed(entry)
    if not typed.strip():
        return _empty(field)
    if item.element == "number_input":
        return _number(field, typed.strip())
    if field.kind == "text":
        return typed, ""
    return _json_value(typed)  # JSON text, or a secret typed for a non-text argument


def _number(field: EditableField, typed: str) -> tuple[Any, str]:
    try:
        number: float = int(typed) if field.kind == "integer" else float(typed)
    except ValueError:
        return None, "Enter a whole number." if field.kind == "integer" else "Enter a number."
    if isinstance(number, float) and not math.isfinite(number):
        return None, "Enter a finite number."
    return number, ""


def _json_value(typed: str) -> tuple[Any, str]:
    try:
        return strict_json.loads(typed), ""
    except (ValueError, RecursionError) as exc:
        return None, f"Not valid JSON: {str(exc)[:80]}"


def read_edit(form: EditForm, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The edited arguments (by name) from a submitted edit form, and the problems by block
    id. An input missing from the submission, or a secret left empty, changes nothing."""
    inputs, _ = edit_inputs(form)
    edited: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for item in inputs:
        entry = _state(values, item.block_id)
        if entry is None or (item.secret and not _typed(entry).strip()):
            continue
        value, problem = _parse(item, entry)
        if problem:
            problems[item.block_id] = problem
        else:
            edited[item.field.name] = value
    return edited, problems


def block_of(form: EditForm, argument: str) -> str:
    """The block an argument's problem is shown under: its input, else the comment's."""
    inputs, _ = edit_inputs(form)
    names = {item.field.name for item in inputs}
    return edit_block_id(argument) if argument in names else COMMENT_BLOCK
