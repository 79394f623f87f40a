"""The Web API methods the local Slack sandbox answers, by Slack method name.

Anything else answers ``{"ok": false, "error": "unknown_method"}`` as Slack does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_sandbox import methods_chat, methods_info, methods_views
from slack_sandbox.core import SandboxCore
from slack_sandbox.params import as_str

Handler = Callable[[SandboxCore, dict[str, Any]], dict[str, Any]]

METHODS: dict[str, Handler] = {
    "api.test": methods_info.api_test,
    "auth.test": methods_info.auth_test,
    "chat.postMessage": methods_chat.post_message,
    "chat.update": methods_chat.update_message,
    "chat.postEphemeral": methods_chat.post_ephemeral,
    "chat.getPermalink": methods_chat.get_permalink,
    "views.open": methods_views.open_view,
    "views.update": methods_views.update_view,
    "views.publish": methods_views.publish_view,
    "users.info": methods_info.users_info,
    "usergroups.users.list": methods_info.usergroup_users,
    "conversations.info": methods_info.conversation_info,
    "users.conversations": methods_info.users_conversations,
    "conversations.members": methods_info.conversation_members,
}

NO_AUTH_METHODS = frozenset({"api.test"})


def needed_scope(core: SandboxCore, method: str, params: dict[str, Any]) -> str | None:
    """The scope `method` needs that the bot token lacks, where the stand-in checks it
    (reviewer groups and channel lookups); None when it has them. Slack then answers
    `missing_scope`, naming the scope needed and those the token has."""
    granted = core.config.scopes
    if method == "usergroups.users.list":
        wanted = ["usergroups:read"]
    elif method in ("conversations.info", "conversations.members"):
        ws = core.workspace
        channel = ws.seen_by_bot(ws.channel(as_str(params.get("channel"))))
        if channel is None:
            return None  # the method answers `channel_not_found`
        wanted = [_read_scope(channel.is_im, channel.is_private)]
    elif method == "users.conversations":
        types = {t.strip() for t in (as_str(params.get("types")) or "public_channel").split(",")}
        wanted = [scope for kind, scope in _READ_SCOPES if kind in types]
    else:
        return None
    return next((scope for scope in wanted if scope not in granted), None)


_READ_SCOPES = (
    ("public_channel", "channels:read"),
    ("private_channel", "groups:read"),
    ("im", "im:read"),
    ("mpim", "mpim:read"),
)


def _read_scope(is_im: bool, is_private: bool) -> str:
    if is_im:
        return "im:read"
    return "groups:read" if is_private else "channels:read"
