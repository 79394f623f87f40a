"""The Slack → app direction of the local Slack sandbox: a person clicks a button, submits
a modal, runs a slash command or opens the app's Home tab, and the sandbox POSTs the signed
request Slack would send to the app's request URL, then applies the app's answer. A local
stand-in, not Slack.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import time
from typing import Any

from slack_sandbox.app_client import JSON_CONTENT_TYPE, AppReply, post_signed
from slack_sandbox.blockkit import (
    action_ids,
    block_elements,
    find_element,
    initial_value,
    input_elements,
    state_value,
)
from slack_sandbox.core import SandboxCore
from slack_sandbox.payloads import (
    block_actions_payload,
    button_action,
    event_callback,
    form_body,
    home_actions_payload,
    payload_body,
    slash_command_fields,
    view_submission_payload,
)
from slack_sandbox.responses import apply_slash_reply, apply_view_reply
from slack_sandbox.shapes import message_json
from slack_sandbox.workspace import Channel, User

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]


def _user(core: SandboxCore, user_id: str) -> User:
    user = core.workspace.user(user_id)
    if user is None:
        raise LookupError(f"no user {user_id!r} in the sandbox workspace")
    return user


def _channel(core: SandboxCore, channel_id: str) -> Channel:
    channel = core.workspace.channel(channel_id)
    if channel is None:
        raise LookupError(f"no channel {channel_id!r} in the sandbox workspace")
    return channel


async def _send(
    core: SandboxCore,
    body: bytes,
    *,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> AppReply:
    url = core.config.events_url
    secret = core.config.signing_secret
    if not url or not secret:
        raise RuntimeError("the Slack stand-in needs events_url and signing_secret to call the app")
    extra: dict[str, Any] = {"extra_headers": headers}
    if content_type is not None:
        extra["content_type"] = content_type
    return await post_signed(
        core.session(),
        url,
        body,
        signing_secret=secret,
        answer_within=core.config.app_timeout,
        **extra,
    )


async def click(
    core: SandboxCore, user_id: str, channel_id: str, ts: str, action_id: str
) -> AppReply:
    """``user_id`` clicks the button ``action_id`` on message ``ts`` (or their ephemeral)."""
    user = _user(core, user_id)
    channel = _channel(core, channel_id)
    ws = core.workspace
    message = ws.message(channel.id, ts)
    ephemeral = ws.find_ephemeral(channel.id, ts, user.id) if message is None else None
    if message is None and ephemeral is None:
        raise LookupError(f"no message {ts} in {channel.id} that {user.id} can see")
    blocks = message.blocks if message is not None else ephemeral.blocks if ephemeral else []
    found = find_element(blocks, action_id, "button")
    if found is None:
        raise LookupError(
            f"no button {action_id!r} on message {ts}; its elements: {action_ids(blocks)}"
        )
    block_id, element = found
    thread_ts = (
        message.thread_ts if message is not None else ephemeral.thread_ts if ephemeral else None
    )
    response_url = core.new_response_url(channel.id, user.id, ts, is_ephemeral=message is None)
    core.commit()
    payload = block_actions_payload(
        core,
        user=user,
        channel=channel,
        message_ts=ts,
        message=message_json(ws, message) if message is not None else None,
        thread_ts=thread_ts if thread_ts != ts else None,
        action=button_action(block_id, element),
        trigger_id=core.triggers.issue(user.id),
        response_url=response_url,
    )
    logger.info("sandbox: %s clicks %r on %s/%s", user.name, action_id, channel.id, ts)
    return await _send(core, payload_body(payload))


def build_state(view_blocks: list[JsonDict], values: dict[str, dict[str, Any]]) -> JsonDict:
    """``state.values`` for a submission, refusing what the Slack client would refuse. An
    input not in ``values`` is submitted as it was pre-filled, as Slack does."""
    state: JsonDict = {}
    for block_id, element, optional in input_elements(view_blocks):
        action_id = str(element.get("action_id"))
        given = values.get(block_id, {})
        value = given[action_id] if action_id in given else initial_value(element)
        if value in (None, "", []) and not optional:
            raise ValueError(
                f"input {block_id}/{action_id} is required; Slack would not submit the view"
            )
        state[block_id] = {action_id: state_value(element, value)}
    for block_id, actions in values.items():
        unknown = [a for a in actions if a not in state.get(block_id, {})]
        if unknown:
            raise ValueError(f"the view has no input {block_id}/{unknown[0]}")
    return state


async def submit_view(
    core: SandboxCore, user_id: str, view_id: str, values: dict[str, dict[str, Any]]
) -> AppReply:
    """``user_id`` submits open view ``view_id`` with ``values[block_id][action_id]``."""
    user = _user(core, user_id)
    view = core.workspace.view(view_id)
    if view is None or view.closed:
        raise LookupError(f"no open view {view_id!r}")
    if view.user != user.id:
        raise PermissionError(f"view {view_id} is open for {view.user}, not {user.id}")
    shown = copy.deepcopy(view.view)
    shown["state"] = {"values": build_state(list(shown.get("blocks") or []), values)}
    payload = view_submission_payload(
        core, user=user, view=shown, trigger_id=core.triggers.issue(user.id)
    )
    logger.info("sandbox: %s submits view %s (%s)", user.name, view.id, shown.get("callback_id"))
    reply = await _send(core, payload_body(payload))
    apply_view_reply(core, view, reply)
    return reply


async def slash(
    core: SandboxCore, user_id: str, channel_id: str, command: str, text: str
) -> AppReply:
    """``user_id`` runs ``command text`` in ``channel_id``."""
    user = _user(core, user_id)
    channel = _channel(core, channel_id)
    if not command.startswith("/"):
        raise ValueError(f"slash commands start with '/', got {command!r}")
    response_url = core.new_response_url(channel.id, user.id, None, is_ephemeral=True)
    core.commit()
    fields = slash_command_fields(
        core,
        user=user,
        channel=channel,
        command=command,
        text=text,
        trigger_id=core.triggers.issue(user.id),
        response_url=response_url,
    )
    logger.info("sandbox: %s runs %s in %s", user.name, command, channel.id)
    reply = await _send(core, form_body(fields))
    apply_slash_reply(core, user.id, channel.id, reply)
    return reply


EVENTS_KEPT = 1000  # deliveries remembered for retries


def new_event_id() -> str:
    return "Ev" + secrets.token_hex(5).upper()


async def open_home(
    core: SandboxCore, user_id: str, *, event_id: str | None = None, retry: int = 0
) -> AppReply:
    """``user_id`` opens the app's Home tab: an ``app_home_opened`` event, delivered as the
    Events API does. ``retry`` > 0 delivers event ``event_id`` again as Slack's retry number
    ``retry``: the same body, with ``X-Slack-Retry-Num`` and ``X-Slack-Retry-Reason`` (an id
    never delivered before is delivered for the first time, as a retry)."""
    user = _user(core, user_id)
    ws = core.workspace
    headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    sent = core.events_sent.get(event_id or "")
    if retry and sent is not None:  # a retry is the very delivery again
        logger.info("sandbox: event %s delivered again (retry %d)", event_id, retry)
        return await _send(core, sent, content_type=JSON_CONTENT_TYPE, headers=headers)
    home = ws.home(user.id)
    event: JsonDict = {
        "type": "app_home_opened",
        "user": user.id,
        "channel": ws.im_channel(user.id).id,
        "tab": "home",
        "event_ts": f"{time.time():.6f}",
    }
    if home is not None:
        event["view"] = copy.deepcopy(home.view)
    event_id = event_id or new_event_id()
    payload = event_callback(core, event, event_id=event_id, event_time=int(time.time()))
    logger.info("sandbox: %s opens the app's Home tab (retry %d)", user.name, retry)
    body = json.dumps(payload, separators=(",", ":")).encode()
    if len(core.events_sent) >= EVENTS_KEPT:
        core.events_sent.pop(next(iter(core.events_sent)))
    core.events_sent[event_id] = body
    return await _send(
        core, body, content_type=JSON_CONTENT_TYPE, headers=headers if retry else None
    )


async def click_home(
    core: SandboxCore, user_id: str, action_id: str, block_id: str | None = None
) -> AppReply:
    """``user_id`` clicks the button ``action_id`` (in block ``block_id``, when several
    blocks hold one) of their App Home tab as the app last published it."""
    user = _user(core, user_id)
    home = core.workspace.home(user.id)
    if home is None:
        raise LookupError(f"the app has published no Home tab for {user.id}")
    blocks = list(home.view.get("blocks") or [])
    found = next(
        (
            (str(b.get("block_id", "")), e)
            for b in blocks
            if block_id in (None, b.get("block_id"))
            for e in block_elements(b)
            if e.get("action_id") == action_id and e.get("type") == "button"
        ),
        None,
    )
    if found is None:
        raise LookupError(
            f"no button {action_id!r} in block {block_id!r} of {user.id}'s Home tab; its "
            f"elements: {action_ids(blocks)}"
        )
    payload = home_actions_payload(
        core,
        user=user,
        view=copy.deepcopy(home.view),
        action=button_action(*found),
        trigger_id=core.triggers.issue(user.id),
    )
    logger.info("sandbox: %s clicks %r in their Home tab", user.name, action_id)
    return await _send(core, payload_body(payload))
