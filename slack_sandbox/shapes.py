"""Slack-shaped JSON for the local sandbox's objects (field names as Slack's method docs show).

The sandbox is a stand-in, not Slack; these functions only make its answers look the same.
"""

from __future__ import annotations

import copy
from typing import Any

from slack_sandbox.workspace import Channel, EphemeralMessage, Message, User, Workspace

JsonDict = dict[str, Any]


def bot_profile(ws: Workspace) -> JsonDict:
    return {
        "id": ws.bot.bot_id,
        "app_id": ws.bot.app_id,
        "name": ws.bot.name,
        "deleted": False,
        "team_id": ws.team.id,
    }


def message_json(ws: Workspace, message: Message) -> JsonDict:
    data: JsonDict = {"type": "message", "text": message.text, "ts": message.ts}
    if message.user is not None:
        data["user"] = message.user
    if message.bot_id is not None:
        data["bot_id"] = message.bot_id
        data["app_id"] = ws.bot.app_id
        data["bot_profile"] = bot_profile(ws)
    data["team"] = ws.team.id
    if message.blocks:
        data["blocks"] = copy.deepcopy(message.blocks)
    if message.thread_ts is not None:
        data["thread_ts"] = message.thread_ts
        if message.thread_ts != message.ts:
            parent = ws.message(message.channel, message.thread_ts)
            if parent is not None and parent.user is not None:
                data["parent_user_id"] = parent.user
    if message.reply_count:
        data["reply_count"] = message.reply_count
        data["reply_users_count"] = len(message.reply_users)
        data["reply_users"] = list(message.reply_users)
        data["latest_reply"] = message.latest_reply
    if message.edited is not None:
        data["edited"] = dict(message.edited)
    return data


def ephemeral_json(ws: Workspace, ephemeral: EphemeralMessage) -> JsonDict:
    data: JsonDict = {
        "type": "message",
        "subtype": "bot_message",
        "text": ephemeral.text,
        "ts": ephemeral.ts,
        "bot_id": ws.bot.bot_id,
        "user": ws.bot.user_id,
        "team": ws.team.id,
    }
    if ephemeral.blocks:
        data["blocks"] = copy.deepcopy(ephemeral.blocks)
    if ephemeral.thread_ts is not None:
        data["thread_ts"] = ephemeral.thread_ts
    return data


def _images(seed: str) -> JsonDict:
    return {f"image_{size}": f"https://avatars.invalid/{seed}_{size}.png" for size in (24, 48, 72)}


def user_json(ws: Workspace, user: User) -> JsonDict:
    return {
        "id": user.id,
        "team_id": ws.team.id,
        "name": user.name,
        "deleted": False,
        "color": "9f69e7",
        "real_name": user.real_name,
        "tz": user.tz,
        "tz_label": "Greenwich Mean Time",
        "tz_offset": 0,
        "profile": {
            "title": user.role,
            "real_name": user.real_name,
            "real_name_normalized": user.real_name,
            "display_name": user.name,
            "display_name_normalized": user.name,
            "email": user.email,
            "team": ws.team.id,
            **_images(user.id),
        },
        "is_admin": user.is_admin,
        "is_owner": False,
        "is_primary_owner": False,
        "is_restricted": False,
        "is_ultra_restricted": False,
        "is_bot": False,
        "is_app_user": False,
        "updated": 1_700_000_000,
    }


def bot_user_json(ws: Workspace) -> JsonDict:
    return {
        "id": ws.bot.user_id,
        "team_id": ws.team.id,
        "name": ws.bot.name,
        "deleted": False,
        "real_name": ws.bot.name,
        "profile": {
            "real_name": ws.bot.name,
            "display_name": "",
            "bot_id": ws.bot.bot_id,
            "api_app_id": ws.bot.app_id,
            "always_active": False,
            "team": ws.team.id,
            **_images(ws.bot.bot_id),
        },
        "is_admin": False,
        "is_owner": False,
        "is_bot": True,
        "is_app_user": False,
        "updated": 1_700_000_000,
    }


def channel_json(ws: Workspace, channel: Channel, *, include_num_members: bool) -> JsonDict:
    if channel.is_im:
        data: JsonDict = {
            "id": channel.id,
            "created": channel.created,
            "is_im": True,
            "is_org_shared": False,
            "user": channel.im_user,
            "is_open": True,
        }
    else:
        data = {
            "id": channel.id,
            "name": channel.name,
            "is_channel": not channel.is_private,
            "is_group": channel.is_private,
            "is_im": False,
            "is_mpim": False,
            "is_private": channel.is_private,
            "created": channel.created,
            "creator": ws.users[0].id if ws.users else ws.bot.user_id,
            "is_archived": channel.is_archived,
            "is_general": channel.is_general,
            "unlinked": 0,
            "name_normalized": channel.name,
            "is_shared": False,
            "is_ext_shared": False,
            "is_org_shared": False,
            "pending_shared": [],
            "is_pending_ext_shared": False,
            "is_member": ws.bot.user_id in channel.members,
            "topic": {"value": channel.topic, "creator": "", "last_set": 0},
            "purpose": {"value": channel.purpose, "creator": "", "last_set": 0},
            "previous_names": [],
        }
    if include_num_members:
        data["num_members"] = len(channel.members)
    return data


def permalink(ws: Workspace, base: str, message: Message) -> str:
    link = f"{base.rstrip('/')}/archives/{message.channel}/p{message.ts.replace('.', '')}"
    if message.thread_ts is not None and message.thread_ts != message.ts:
        link += f"?thread_ts={message.thread_ts}&cid={message.channel}"
    return link


def api_error(code: str, *, problem: str | None = None, **extra: Any) -> JsonDict:
    """A Slack error answer: ``{"ok": false, "error": code}`` plus Slack's detail fields."""
    data: JsonDict = {"ok": False, "error": code, **extra}
    if problem is not None:
        data.setdefault("errors", [problem])
        data["response_metadata"] = {"messages": [f"[ERROR] {problem}"]}
    return data
