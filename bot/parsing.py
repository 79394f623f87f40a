"""Reading Slack's interaction payloads: only the fields countersign uses, checked.

A signed payload can still be malformed or hostile (a value naming another request, another
channel, another team); these parsers return None for anything not shaped as Slack sends
it, so a listener never fails on a missing field. The team is checked before any listener
runs, by `bot.middleware`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "METADATA_SEPARATOR",
    "Click",
    "Submission",
    "first_input",
    "input_value",
    "modal_metadata",
    "parse_click",
    "parse_submission",
    "well_formed",
]

METADATA_SEPARATOR = "|"


def modal_metadata(request_id: str, pause_id: str) -> str:
    """A modal's private_metadata: the request and the pause it was opened in."""
    return f"{request_id}{METADATA_SEPARATOR}{pause_id}"


@dataclass(frozen=True)
class Click:
    user: str
    channel: str
    message_ts: str
    block_id: str
    action_id: str
    message_block_ids: frozenset[str]
    request_id: str
    trigger_id: str
    # Clicked in the App Home tab: no channel, no message; `message_block_ids` are then the
    # tab's blocks, as published.
    from_home: bool = False


@dataclass(frozen=True)
class Submission:
    user: str
    request_id: str
    pause_id: str  # the pause the form was opened in: a form of a pause that is over is stale
    values: dict[str, Any]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_click(body: Any) -> Click | None:
    """A button of a Block Kit message or of the App Home tab; None for anything else (Bolt
    routes an attachment's `interactive_message` by the same id to the same listener)."""
    body = _dict(body)
    if body.get("type") != "block_actions":
        return None
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return None
    action = _dict(actions[0])
    container = _dict(body.get("container"))
    view = _dict(body.get("view"))
    from_home = container.get("type") == "view" and view.get("type") == "home"
    shown = view if from_home else _dict(body.get("message"))
    click = Click(
        user=_text(_dict(body.get("user")).get("id")),
        channel="" if from_home else _text(_dict(body.get("channel")).get("id")),
        message_ts="" if from_home else _text(container.get("message_ts")),
        block_id=_text(action.get("block_id")),
        action_id=_text(action.get("action_id")),
        message_block_ids=frozenset(
            _text(_dict(b).get("block_id"))
            for b in _list(shown.get("blocks"))
            if isinstance(b, dict)
        ),
        request_id=_text(action.get("value")),
        trigger_id=_text(body.get("trigger_id")),
        from_home=from_home,
    )
    if not (click.user and (click.channel or from_home) and click.action_id and click.request_id):
        return None
    return click


def parse_submission(body: Any, view: Any) -> Submission | None:
    body, view = _dict(body), _dict(view)
    values = _dict(_dict(view.get("state")).get("values"))
    request_id, _, pause_id = _text(view.get("private_metadata")).partition(METADATA_SEPARATOR)
    submission = Submission(
        user=_text(_dict(body.get("user")).get("id")),
        request_id=request_id,
        pause_id=pause_id,
        values=values,
    )
    if not (submission.user and submission.request_id):
        return None
    return submission


def well_formed(body: Any) -> bool:
    """Shaped as Slack sends it, as far as Bolt's own routing relies on: a block action
    with actions, a view submission with a view, a slash command with its command."""
    if not isinstance(body, dict):
        return False
    kind = body.get("type")
    if kind == "block_actions":
        actions = body.get("actions")
        return (
            isinstance(actions, list)
            and bool(actions)
            and all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions)
            and _message_well_formed(body.get("message"))
            and _message_well_formed(body.get("view"))
        )
    if kind == "event_callback":
        event = body.get("event")
        return isinstance(event, dict) and isinstance(event.get("type"), str)
    if kind in ("view_submission", "view_closed"):
        view = body.get("view")
        return isinstance(view, dict) and isinstance(view.get("callback_id", ""), str)
    if "command" in body:
        return isinstance(body.get("command"), str)
    return kind is None or isinstance(kind, str)


def _message_well_formed(message: Any) -> bool:
    """The clicked message (or view), when present, is an object whose blocks are a list of
    objects: a click is matched to its request by those blocks, so any other shape is
    refused."""
    if message is None:
        return True
    if not isinstance(message, dict):
        return False
    message_blocks = message.get("blocks", [])
    return isinstance(message_blocks, list) and all(isinstance(b, dict) for b in message_blocks)


def input_value(values: dict[str, Any], block_id: str, action_id: str) -> str:
    """The text typed into a modal's input, or "" when absent."""
    return _text(_dict(_dict(values.get(block_id)).get(action_id)).get("value"))


def first_input(view: Any) -> str:
    """The block id of a form's first input: where Slack shows an error."""
    shown = _dict(view).get("blocks")
    for block in shown if isinstance(shown, list) else []:
        if isinstance(block, dict) and block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return ""
