"""``views.open``, ``views.update`` and ``views.publish`` of the local Slack sandbox (a
stand-in, not Slack).

As Slack does, ``views.open`` needs a ``trigger_id`` the sandbox issued with an interaction
less than three seconds ago (each usable once), and ``views.update`` takes ``view_id`` or
``external_id`` plus an optional ``hash`` that must match the view's current one.
``views.publish`` sets a user's App Home tab: a ``home`` view, ``user_id`` and an optional
``hash`` of the tab it replaces.
"""

from __future__ import annotations

import copy
import secrets
import string
import time
from typing import Any

from slack_sandbox.blockkit import check_view, normalize_blocks
from slack_sandbox.core import SandboxCore
from slack_sandbox.params import as_str
from slack_sandbox.shapes import api_error
from slack_sandbox.triggers import TriggerError
from slack_sandbox.workspace import View

JsonDict = dict[str, Any]
_ID_ALPHABET = string.ascii_uppercase + string.digits
_HASH_ALPHABET = string.ascii_letters + string.digits


def _new_view_id() -> str:
    return "V" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


def _new_hash() -> str:
    suffix = "".join(secrets.choice(_HASH_ALPHABET) for _ in range(8))
    return f"{int(time.time())}.{suffix}"


def _view_json(
    core: SandboxCore, raw: JsonDict, view_id: str, root_view_id: str, previous: str | None
) -> JsonDict:
    ws = core.workspace
    return {
        "id": view_id,
        "team_id": ws.team.id,
        "type": raw["type"],
        "blocks": normalize_blocks(list(raw.get("blocks") or [])),
        "private_metadata": as_str(raw.get("private_metadata")),
        "callback_id": as_str(raw.get("callback_id")),
        "state": {"values": {}},
        "hash": "",
        "title": copy.deepcopy(raw.get("title")),
        "clear_on_close": bool(raw.get("clear_on_close", False)),
        "notify_on_close": bool(raw.get("notify_on_close", False)),
        "close": copy.deepcopy(raw.get("close")),
        "submit": copy.deepcopy(raw.get("submit")),
        "previous_view_id": previous,
        "root_view_id": root_view_id,
        "app_id": ws.bot.app_id,
        "external_id": as_str(raw.get("external_id")),
        "app_installed_team_id": ws.team.id,
        "bot_id": ws.bot.bot_id,
    }


def create_view(core: SandboxCore, user_id: str, raw: JsonDict, previous: View | None) -> View:
    """Store a newly opened (or pushed, when ``previous`` is set) view."""
    view_id = _new_view_id()
    root = str(previous.view.get("root_view_id") or previous.id) if previous else view_id
    body = _view_json(core, raw, view_id, root, previous.id if previous else None)
    view = View(id=view_id, user=user_id, hash=_new_hash(), view=body)
    view.view["hash"] = view.hash
    core.workspace.views.append(view)
    return view


def replace_view(core: SandboxCore, view: View, raw: JsonDict) -> None:
    """Give an open view new content (same id, stack position; new hash)."""
    root = str(view.view.get("root_view_id") or view.id)
    previous = view.view.get("previous_view_id")
    view.view = _view_json(core, raw, view.id, root, previous)
    view.hash = _new_hash()
    view.view["hash"] = view.hash
    view.errors = {}


def _check_new_view(core: SandboxCore, raw: Any, replacing: View | None) -> JsonDict | None:
    problem = check_view(raw)
    if problem is not None:
        return api_error("invalid_arguments", problem=problem)
    external_id = as_str(raw.get("external_id"))
    other = core.workspace.view_by_external_id(external_id)
    if other is not None and other is not replacing:
        return api_error("duplicate_external_id")
    return None


def open_view(core: SandboxCore, params: JsonDict) -> JsonDict:
    trigger_id = as_str(params.get("trigger_id") or params.get("interactivity_pointer"))
    if not trigger_id:
        return api_error("invalid_arguments", problem="missing required field: trigger_id")
    raw: Any = params.get("view")
    rejected = _check_new_view(core, raw, None)
    if rejected is not None:
        return rejected
    try:
        user_id = core.triggers.exchange(trigger_id)
    except TriggerError as exc:
        return api_error(exc.code)
    view = create_view(core, user_id, raw, None)
    core.commit({"type": "view_opened", "view_id": view.id, "user": user_id})
    return {"ok": True, "view": copy.deepcopy(view.view)}


def update_view(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    view_id = as_str(params.get("view_id"))
    external_id = as_str(params.get("external_id"))
    if not view_id and not external_id:
        return api_error("invalid_arguments", problem="either view_id or external_id is required")
    view = ws.view(view_id) if view_id else ws.view_by_external_id(external_id)
    if view is None or view.closed:
        return api_error("not_found")
    expected_hash = as_str(params.get("hash"))
    if expected_hash and expected_hash != view.hash:
        return api_error("hash_conflict")
    raw: Any = params.get("view")
    rejected = _check_new_view(core, raw, view)
    if rejected is not None:
        return rejected
    replace_view(core, view, raw)
    core.commit({"type": "view_updated", "view_id": view.id, "user": view.user})
    return {"ok": True, "view": copy.deepcopy(view.view)}


def publish_view(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    user_id = as_str(params.get("user_id"))
    if not user_id:
        return api_error("invalid_arguments", problem="missing required field: user_id")
    if ws.user(user_id) is None:
        return api_error("user_not_found")
    raw: Any = params.get("view")
    problem = check_view(raw)
    if problem is not None:
        return api_error("invalid_arguments", problem=problem)
    if raw.get("type") != "home":
        return api_error("invalid_arguments", problem="views.publish takes a home view")
    current = ws.home(user_id)
    expected_hash = as_str(params.get("hash"))
    if current is not None and expected_hash and expected_hash != current.hash:
        return api_error("hash_conflict")
    if current is None:
        view_id = _new_view_id()
        current = View(id=view_id, user=user_id, hash="", view={})
        ws.homes.append(current)
    current.view = _view_json(core, raw, current.id, current.id, None)
    current.hash = _new_hash()
    current.view["hash"] = current.hash
    core.commit({"type": "home_published", "view_id": current.id, "user": user_id})
    return {"ok": True, "view": copy.deepcopy(current.view)}
