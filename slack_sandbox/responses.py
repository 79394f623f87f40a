"""How the local Slack sandbox applies what an app sends back (a stand-in for Slack).

* ``response_url`` posts: ``delete_original`` removes the message the interaction came from,
  ``replace_original`` replaces it, otherwise ``response_type: in_channel`` posts a channel
  message and anything else (the default) shows an ephemeral message to the user.
* A slash command's immediate answer: JSON with ``text``/``blocks``/``response_type``, or
  plain text, which Slack shows ephemerally.
* A ``view_submission`` acknowledgement: empty closes the view; ``response_action`` is one
  of ``errors``, ``update``, ``push``, ``clear``.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sandbox.app_client import AppReply
from slack_sandbox.blockkit import check_view
from slack_sandbox.core import SandboxCore
from slack_sandbox.methods_chat import read_content
from slack_sandbox.methods_views import create_view, replace_view
from slack_sandbox.params import as_bool, as_str
from slack_sandbox.workspace import ResponseHook, View

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]


def _deliver(
    core: SandboxCore,
    channel: str,
    user: str,
    text: str,
    blocks: list[JsonDict],
    *,
    in_channel: bool,
    thread_ts: str | None = None,
) -> None:
    ws = core.workspace
    if in_channel:
        message = ws.add_bot_message(channel, text, blocks, thread_ts)
        event = {"type": "message", "channel": channel, "ts": message.ts}
    else:
        ephemeral = ws.add_ephemeral(channel, user, text, blocks, thread_ts)
        event = {"type": "ephemeral", "channel": channel, "user": user, "ts": ephemeral.ts}
    core.commit(event)


def apply_response_url(core: SandboxCore, hook: ResponseHook, data: Any) -> tuple[int, JsonDict]:
    """Apply one ``response_url`` post; returns the HTTP status and JSON answer."""
    ws = core.workspace
    if not isinstance(data, dict):
        return 400, {"ok": False, "error": "invalid_payload"}
    if as_bool(data.get("delete_original")):
        if hook.message_ts is None:
            return 404, {"ok": False, "error": "message_not_found"}
        if hook.is_ephemeral:
            ws.delete_ephemeral(hook.channel, hook.message_ts)
        else:
            ws.delete_message(hook.channel, hook.message_ts)
        core.commit({"type": "message_deleted", "channel": hook.channel, "ts": hook.message_ts})
        return 200, {"ok": True}
    content = read_content(data)
    if isinstance(content, dict):
        return 400, content
    text, blocks = content
    if as_bool(data.get("replace_original")) and hook.message_ts is not None:
        if not _replace_original(core, hook, text, blocks):
            return 404, {"ok": False, "error": "message_not_found"}
        return 200, {"ok": True}
    in_channel = as_str(data.get("response_type")) == "in_channel"
    thread_ts = as_str(data.get("thread_ts")) or None
    _deliver(
        core, hook.channel, hook.user, text, blocks, in_channel=in_channel, thread_ts=thread_ts
    )
    return 200, {"ok": True}


def _replace_original(
    core: SandboxCore, hook: ResponseHook, text: str, blocks: list[JsonDict]
) -> bool:
    ws = core.workspace
    ts = hook.message_ts or ""
    if hook.is_ephemeral:
        ephemeral = ws.find_ephemeral(hook.channel, ts, hook.user)
        if ephemeral is None:
            return False
        ephemeral.text, ephemeral.blocks = text, blocks
        event = {"type": "ephemeral_changed", "channel": hook.channel, "user": hook.user, "ts": ts}
    else:
        message = ws.message(hook.channel, ts)
        if message is None:
            return False
        message.text, message.blocks = text, blocks
        message.edited = {"user": ws.bot.user_id, "ts": ws.next_ts()}
        event = {"type": "message_changed", "channel": hook.channel, "ts": ts}
    core.commit(event)
    return True


def apply_slash_reply(core: SandboxCore, user: str, channel: str, reply: AppReply) -> None:
    """Show a slash command's immediate answer the way Slack would."""
    if reply.status != 200 or not reply.body.strip():
        return
    data = reply.json()
    if not isinstance(data, dict):
        _deliver(core, channel, user, reply.body, [], in_channel=False)
        return
    content = read_content(data)
    if isinstance(content, dict):
        logger.warning("slash command answer rejected (%s): %s", content["error"], reply.body)
        return
    text, blocks = content
    in_channel = as_str(data.get("response_type")) == "in_channel"
    _deliver(core, channel, user, text, blocks, in_channel=in_channel)


def apply_view_reply(core: SandboxCore, view: View, reply: AppReply) -> None:
    """Apply a ``view_submission`` acknowledgement to the submitted view."""
    if reply.status != 200:
        logger.warning("app answered view_submission with HTTP %d; view stays open", reply.status)
        return
    parsed = reply.json()
    data: JsonDict = parsed if isinstance(parsed, dict) else {}
    action = as_str(data.get("response_action"))
    if not action:
        view.closed = True
        core.commit({"type": "view_closed", "view_id": view.id, "user": view.user})
    elif action == "errors":
        view.errors = {str(k): str(v) for k, v in dict(data.get("errors") or {}).items()}
        core.commit({"type": "view_errors", "view_id": view.id, "user": view.user})
    elif action in ("update", "push"):
        problem = check_view(data.get("view"))
        if problem is not None:
            logger.warning("app's response_action=%s view is invalid: %s", action, problem)
            return
        if action == "update":
            replace_view(core, view, data["view"])
            core.commit({"type": "view_updated", "view_id": view.id, "user": view.user})
        else:
            pushed = create_view(core, view.user, data["view"], view)
            core.commit({"type": "view_opened", "view_id": pushed.id, "user": view.user})
    elif action == "clear":
        root = view.view.get("root_view_id") or view.id
        for other in core.workspace.views:
            if (other.view.get("root_view_id") or other.id) == root:
                other.closed = True
        core.commit({"type": "view_closed", "view_id": view.id, "user": view.user})
    else:
        logger.warning("app answered view_submission with unknown response_action %r", action)
