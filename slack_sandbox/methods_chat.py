"""``chat.*`` Web API methods of the local Slack sandbox (a stand-in for Slack, not Slack).

Argument names, error strings and response fields follow Slack's method reference pages for
chat.postMessage, chat.update, chat.postEphemeral and chat.getPermalink.
"""

from __future__ import annotations

from typing import Any

from slack_sandbox.blockkit import MAX_MESSAGE_BLOCKS, check_blocks, normalize_blocks
from slack_sandbox.core import SandboxCore
from slack_sandbox.params import as_str
from slack_sandbox.shapes import api_error, message_json, permalink

JsonDict = dict[str, Any]
MAX_TEXT_LENGTH = 40_000


def read_content(
    params: JsonDict, *, require: bool = True
) -> tuple[str, list[JsonDict]] | JsonDict:
    """``(text, blocks)`` of a message call, or the Slack error answer."""
    markdown = as_str(params.get("markdown_text"))
    text = as_str(params.get("text"))
    blocks: Any = params.get("blocks")
    if markdown:
        if text or blocks:
            return api_error("markdown_text_conflict")
        text = markdown
    if blocks in (None, "", []):
        blocks = []
    elif isinstance(blocks, str):
        return api_error("invalid_blocks_format", problem="blocks must be a JSON array")
    else:
        problem = check_blocks(blocks, limit=MAX_MESSAGE_BLOCKS)
        if problem is not None:
            return api_error("invalid_blocks", problem=problem)
    if require and not text and not blocks and not params.get("attachments"):
        return api_error("no_text")
    if len(text) > MAX_TEXT_LENGTH:
        return api_error("msg_too_long")
    return text, normalize_blocks(blocks)


def post_message(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    channel = ws.seen_by_bot(ws.resolve_channel(as_str(params.get("channel"))))
    if channel is None:
        return api_error("channel_not_found")
    if channel.is_archived:
        return api_error("is_archived")
    if ws.bot.user_id not in channel.members:
        return api_error("not_in_channel")
    content = read_content(params)
    if isinstance(content, dict):
        return content
    text, blocks = content
    thread_ts = as_str(params.get("thread_ts")) or None
    message = ws.add_bot_message(channel.id, text, blocks, thread_ts)
    core.commit(
        {
            "type": "message",
            "channel": channel.id,
            "ts": message.ts,
            "thread_ts": message.thread_ts,
        }
    )
    return {
        "ok": True,
        "channel": channel.id,
        "ts": message.ts,
        "message": message_json(ws, message),
    }


def update_message(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    channel = ws.channel(as_str(params.get("channel")))
    if channel is None:
        return api_error("channel_not_found")
    message = ws.message(channel.id, as_str(params.get("ts")))
    if message is None:
        return api_error("message_not_found")
    if message.bot_id != ws.bot.bot_id:
        return api_error("cant_update_message")
    content = read_content(params, require=False)
    if isinstance(content, dict):
        return content
    text, blocks = content
    has_text = bool(as_str(params.get("text")) or as_str(params.get("markdown_text")))
    if not has_text and "blocks" not in params and not params.get("attachments"):
        return api_error("no_text")
    if has_text or "blocks" in params:
        message.text = text  # chat.update replaces the text; it is "" when only blocks come
    if "blocks" in params:
        message.blocks = blocks  # an empty array removes them; leaving it out keeps them
    message.edited = {"user": ws.bot.user_id, "ts": ws.next_ts()}
    core.commit({"type": "message_changed", "channel": channel.id, "ts": message.ts})
    return {
        "ok": True,
        "channel": channel.id,
        "ts": message.ts,
        "text": message.text,
        "message": message_json(ws, message),
    }


def post_ephemeral(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    channel = ws.seen_by_bot(ws.resolve_channel(as_str(params.get("channel"))))
    if channel is None:
        return api_error("channel_not_found")
    user = ws.user(as_str(params.get("user")))
    if user is None:
        return api_error("user_not_found")
    if user.id not in channel.members:
        return api_error("user_not_in_channel")
    content = read_content(params)
    if isinstance(content, dict):
        return content
    text, blocks = content
    thread_ts = as_str(params.get("thread_ts")) or None
    ephemeral = ws.add_ephemeral(channel.id, user.id, text, blocks, thread_ts)
    core.commit({"type": "ephemeral", "channel": channel.id, "user": user.id, "ts": ephemeral.ts})
    return {"ok": True, "message_ts": ephemeral.ts}


def get_permalink(core: SandboxCore, params: JsonDict) -> JsonDict:
    ws = core.workspace
    channel = ws.channel(as_str(params.get("channel")))
    if channel is None:
        return api_error("channel_not_found")
    message = ws.message(channel.id, as_str(params.get("message_ts")))
    if message is None:
        return api_error("message_not_found")
    return {
        "ok": True,
        "channel": channel.id,
        "permalink": permalink(ws, core.permalink_base(), message),
    }
