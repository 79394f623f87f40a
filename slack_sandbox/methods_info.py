"""Read-only Web API methods of the local Slack sandbox (a stand-in, not Slack):
``api.test``, ``auth.test``, ``users.info``, ``usergroups.users.list``, ``conversations.info``,
``users.conversations``, ``conversations.members``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, TypeVar

from slack_sandbox.core import SandboxCore
from slack_sandbox.params import as_bool, as_str
from slack_sandbox.shapes import api_error, bot_user_json, channel_json, user_json
from slack_sandbox.workspace import Channel

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
    channel = ws.seen_by_bot(ws.channel(as_str(params.get("channel"))))
    if channel is None:  # a private channel the bot is not in, too
        return api_error("channel_not_found")
    include = as_bool(params.get("include_num_members"))
    return {"ok": True, "channel": channel_json(ws, channel, include_num_members=include)}


_TYPES = {"public_channel", "private_channel", "im", "mpim"}


def users_conversations(core: SandboxCore, params: JsonDict) -> JsonDict:
    """The conversations a user is in; private ones only where the bot is a member too, as
    Slack answers a bot token. Paged by ``limit`` and ``cursor``."""
    ws = core.workspace
    user_id = as_str(params.get("user")) or ws.bot.user_id
    if user_id != ws.bot.user_id and ws.user(user_id) is None:
        return api_error("user_not_found")
    types = {t.strip() for t in (as_str(params.get("types")) or "public_channel").split(",")}
    if not types <= _TYPES:
        return api_error("invalid_types")
    archived_too = not as_bool(params.get("exclude_archived"))

    def kind(channel: Channel) -> str:
        return (
            "im"
            if channel.is_im
            else "private_channel"
            if channel.is_private
            else ("public_channel")
        )

    found = [
        c
        for c in ws.channels
        if user_id in c.members
        and kind(c) in types
        and (archived_too or not c.is_archived)
        and (kind(c) == "public_channel" or ws.bot.user_id in c.members)
    ]
    paged = _page(found, params)
    if paged is None:
        return api_error("invalid_cursor")
    page, next_cursor = paged
    return {
        "ok": True,
        "channels": [channel_json(ws, c, include_num_members=False) for c in page],
        "response_metadata": {"next_cursor": next_cursor},
    }


def conversation_members(core: SandboxCore, params: JsonDict) -> JsonDict:
    """The user ids of a conversation's members, paged by ``limit`` and ``cursor``; a
    private one only if the bot is in it (else ``channel_not_found``, as Slack answers)."""
    ws = core.workspace
    channel = ws.seen_by_bot(ws.channel(as_str(params.get("channel"))))
    if channel is None:
        return api_error("channel_not_found")
    paged = _page(list(channel.members), params)
    if paged is None:
        return api_error("invalid_cursor")
    page, next_cursor = paged
    return {"ok": True, "members": page, "response_metadata": {"next_cursor": next_cursor}}


T = TypeVar("T")


def _page(items: list[T], params: JsonDict) -> tuple[list[T], str] | None:
    """The page ``limit`` (1-1000, default 100) and ``cursor`` ask for, with the cursor of
    the next one ("" at the end); None for a cursor this sandbox did not hand out."""
    try:
        limit = int(as_str(params.get("limit")) or 100)
        cursor = as_str(params.get("cursor"))
        start = int(base64.b64decode(cursor).decode().removeprefix("offset:")) if cursor else 0
    except (ValueError, binascii.Error):
        return None
    limit = max(1, min(limit, 1000))
    more = start + limit < len(items)
    next_cursor = base64.b64encode(f"offset:{start + limit}".encode()).decode() if more else ""
    return items[start : start + limit], next_cursor
