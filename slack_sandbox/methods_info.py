"""Read-only Web API methods of the local Slack sandbox (a stand-in, not Slack):
``api.test``, ``auth.test``, ``users.info``, ``usergroups.users.list``, ``conversations.info``.
"""

from __future__ import annotations

from typing import Any

from slack_sandbox.core import SandboxCore
from slack_sandbox.params import as_bool, as_str
from slack_sandbox.shapes import api_error, bot_user_json, channel_json, user_json

JsonDict = dict[str, Any]


def api_test(core: SandboxCore, params: JsonDict) -> JsonDict:
    if "error" in params:
        return api_error(as_str(params["error"]), args=dict(params))
    return {"ok": True, "args": dict(params)} if params else {"ok": True}


def auth_test(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    return {
        "ok": True,
        "url": f"{core.permalink_base()}/",
        "team": ws.team.name,
        "user": ws.bot.name,
        "team_id": ws.team.id,
        "user_id": ws.bot.user_id,
        "bot_id": ws.bot.bot_id,
        "is_enterprise_install": False,
    }


def users_info(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    user_id = as_str(params.get("user"))
    if user_id == ws.bot.user_id:
        return {"ok": True, "user": bot_user_json(ws)}
    user = ws.user(user_id)
    if user is None:
        return api_error("user_not_found")
    return {"ok": True, "user": user_json(ws, user)}


def usergroup_users(core: SandboxCore, params: JsonDict) -> JsonDict:
    group = core.workspace.usergroup(as_str(params.get("usergroup")))
    if group is None:
        return api_error("no_such_subteam")
    return {"ok": True, "users": list(group.users)}


def conversation_info(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    channel = ws.channel(as_str(params.get("channel")))
    if channel is None:
        return api_error("channel_not_found")
    include = as_bool(params.get("include_num_members"))
    return {"ok": True, "channel": channel_json(ws, channel, include_num_members=include)}
