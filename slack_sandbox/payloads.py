"""Interaction request bodies, built as Slack documents them, for the local Slack sandbox.

* ``block_actions`` and ``view_submission``: form-encoded, one field ``payload`` holding JSON.
* slash commands: plain form fields (``token``, ``team_id``, ``command``, ``text``, ...).
* Events API deliveries (``event_callback``, here ``app_home_opened``): a JSON body.
Field names follow Slack's interaction payload and slash command reference pages.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any
from urllib.parse import urlencode

from slack_sandbox.core import SandboxCore
from slack_sandbox.workspace import Channel, User

JsonDict = dict[str, Any]


def action_ts() -> str:
    return f"{time.time():.6f}"


def form_body(fields: dict[str, str]) -> bytes:
    return urlencode(fields).encode("utf-8")


def payload_body(payload: JsonDict) -> bytes:
    return form_body({"payload": json.dumps(payload, separators=(",", ":"))})


def user_ref(core: SandboxCore, user: User) -> JsonDict:
    return {
        "id": user.id,
        "username": user.name,
        "name": user.name,
        "team_id": core.workspace.team.id,
    }


def team_ref(core: SandboxCore) -> JsonDict:
    return {"id": core.workspace.team.id, "domain": core.workspace.team.domain}


def button_action(block_id: str, element: JsonDict) -> JsonDict:
    action: JsonDict = {
        "action_id": element.get("action_id"),
        "block_id": block_id,
        "text": copy.deepcopy(element.get("text")),
        "type": "button",
        "action_ts": action_ts(),
    }
    if "value" in element:
        action["value"] = element["value"]
    if "style" in element:
        action["style"] = element["style"]
    if "url" in element:
        action["url"] = element["url"]
    return action


def block_actions_payload(
    core: SandboxCore,
    *,
    user: User,
    channel: Channel,
    message_ts: str,
    message: JsonDict | None,
    thread_ts: str | None,
    action: JsonDict,
    trigger_id: str,
    response_url: str,
) -> JsonDict:
    """A ``block_actions`` payload for a click on a message (``message`` None: ephemeral)."""
    container: JsonDict = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel.id,
        "is_ephemeral": message is None,
    }
    if thread_ts is not None:
        container["thread_ts"] = thread_ts
    payload: JsonDict = {
        "type": "block_actions",
        "user": user_ref(core, user),
        "api_app_id": core.workspace.bot.app_id,
        "token": core.config.verification_token,
        "container": container,
        "trigger_id": trigger_id,
        "team": team_ref(core),
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel.id, "name": channel.name},
    }
    if message is not None:
        payload["message"] = message
    payload["state"] = {"values": {}}
    payload["response_url"] = response_url
    payload["actions"] = [action]
    return payload


def view_submission_payload(
    core: SandboxCore, *, user: User, view: JsonDict, trigger_id: str
) -> JsonDict:
    return {
        "type": "view_submission",
        "team": team_ref(core),
        "user": user_ref(core, user),
        "api_app_id": core.workspace.bot.app_id,
        "token": core.config.verification_token,
        "trigger_id": trigger_id,
        "view": view,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_command_fields(
    core: SandboxCore,
    *,
    user: User,
    channel: Channel,
    command: str,
    text: str,
    trigger_id: str,
    response_url: str,
) -> dict[str, str]:
    ws = core.workspace
    return {
        "token": core.config.verification_token,
        "team_id": ws.team.id,
        "team_domain": ws.team.domain,
        "channel_id": channel.id,
        "channel_name": "directmessage" if channel.is_im else channel.name,
        "user_id": user.id,
        "user_name": user.name,
        "command": command,
        "text": text,
        "api_app_id": ws.bot.app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def home_actions_payload(
    core: SandboxCore, *, user: User, view: JsonDict, action: JsonDict, trigger_id: str
) -> JsonDict:
    """A ``block_actions`` payload for a click in the user's App Home tab: the container
    is the view, and there is no channel, message or response_url."""
    return {
        "type": "block_actions",
        "user": user_ref(core, user),
        "api_app_id": core.workspace.bot.app_id,
        "token": core.config.verification_token,
        "container": {"type": "view", "view_id": view.get("id")},
        "trigger_id": trigger_id,
        "team": team_ref(core),
        "enterprise": None,
        "is_enterprise_install": False,
        "view": view,
        "actions": [action],
    }


def event_callback(
    core: SandboxCore, event: JsonDict, *, event_id: str, event_time: int
) -> JsonDict:
    """An Events API delivery of ``event``, as Slack wraps it."""
    ws = core.workspace
    return {
        "token": core.config.verification_token,
        "team_id": ws.team.id,
        "context_team_id": ws.team.id,
        "context_enterprise_id": None,
        "api_app_id": ws.bot.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": ws.team.id,
                "user_id": ws.bot.user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }
