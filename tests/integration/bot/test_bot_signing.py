"""Every request to /slack/events must carry a valid, fresh Slack signature."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from agent_host.approvals import ApprovalRequest
from agent_host.durable.route_book import parse_spec
from bot import blocks
from bot.listeners.budget import LISTENER_BUDGET
from slack_sandbox.blockkit import find_element
from slack_sandbox.payloads import (
    block_actions_payload,
    button_action,
    form_body,
    home_actions_payload,
    payload_body,
    slash_command_fields,
)
from slack_sandbox.shapes import message_json
from slack_sandbox.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_request
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    REVIEWER,
    REVIEWER2,
    SECRET,
    Stack,
    running_stack,
)

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def click_body(
    stack: Stack,
    user_id: str,
    request: ApprovalRequest,
    action_id: str,
    at: tuple[str, str] | None = None,
    *,
    forged: bool = False,
) -> bytes:
    """The exact body the stand-in would send for this click: of a button of the request's
    message, on that message or, `at` (channel, ts), as though it sat on another one (a
    copy that does not offer it); `forged`: one the message never showed (see `button`)."""
    core = stack.standin.core
    ws = core.workspace
    channel_id, ts = at or (request.message_channel, request.message_ts)
    user, channel = ws.user(user_id), ws.channel(channel_id)
    original = ws.message(request.message_channel, request.message_ts)
    message = ws.message(channel_id, ts)
    assert user is not None and channel is not None
    assert original is not None and message is not None
    payload = block_actions_payload(
        core,
        user=user,
        channel=channel,
        message_ts=message.ts,
        message=message_json(ws, message),
        thread_ts=None,
        action=button(original.blocks, action_id, forged=forged),
        trigger_id=core.triggers.issue(user.id),
        response_url=core.new_response_url(channel.id, user.id, message.ts, is_ephemeral=False),
    )
    return payload_body(payload)


def home_click_body(
    stack: Stack, user_id: str, request: ApprovalRequest, action_id: str, *, forged: bool = False
) -> bytes:
    """The body of a click in `user_id`'s App Home tab, as published, on a button of the
    request's message, whether or not their tab offers it (a forged or stale click);
    `forged`: one the message never showed either (see `button`)."""
    core = stack.standin.core
    user, home = core.workspace.user(user_id), core.workspace.home(user_id)
    original = core.workspace.message(request.message_channel, request.message_ts)
    assert user is not None and home is not None and original is not None
    action = button(original.blocks, action_id, forged=forged)
    payload = home_actions_payload(
        core, user=user, view=home.view, action=action, trigger_id=core.triggers.issue(user.id)
    )
    return payload_body(payload)


def button(shown: list[dict[str, Any]], action_id: str, *, forged: bool = False) -> dict[str, Any]:
    """The action of the button `action_id` among the blocks `shown`; `forged`, of one they
    do not show: their Approve button under that action id (what a stale render or a
    hand-made payload would carry)."""
    found = find_element(shown, action_id, "button")
    if found is None and forged:
        approve = find_element(shown, blocks.APPROVE, "button")
        assert approve is not None
        block_id, element = approve
        found = block_id, {**element, "action_id": action_id}
    assert found is not None, f"no {action_id} button"
    return button_action(*found)


def slash_body(stack: Stack, user_id: str, text: str) -> bytes:
    core = stack.standin.core
    ws = core.workspace
    user, channel = ws.user(user_id), ws.channel(CHANNEL)
    assert user is not None and channel is not None
    fields = slash_command_fields(
        core,
        user=user,
        channel=channel,
        command="/approvals",
        text=text,
        trigger_id=core.triggers.issue(user.id),
        response_url=core.new_response_url(channel.id, user.id, None, is_ephemeral=True),
    )
    return form_body(fields)


async def post(stack: Stack, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{stack.url}/slack/events", data=body, headers={**FORM, **headers}
        ) as response,
    ):
        return response.status, await response.text()


async def assert_untouched(stack: Stack, request: ApprovalRequest) -> None:
    current = await stack.host.store.get_request(request.request_id)
    assert current is not None
    assert current.status == "pending" and current.approvals == []
    assert stack.effects.count("refund") == 0
    assert stack.ephemerals(REVIEWER) == []
    assert stack.standin.calls_to("chat.update") == []
    assert stack.standin.calls_to("chat.postEphemeral") == []
    info = await stack.host.store.run_info(request.run_id)
    assert info is not None and info.status == "waiting"


async def test_forged_and_stale_clicks_get_401_and_change_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        body = click_body(stack, REVIEWER, request, blocks.APPROVE)
        now = int(time.time())

        wrong_secret = sign_request("not-the-signing-secret", now, body)
        assert (await post(stack, body, wrong_secret))[0] == 401

        garbage = {TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: "v0=" + "0" * 64}
        assert (await post(stack, body, garbage))[0] == 401

        stale = sign_request(SECRET, now - 6 * 60, body)  # correctly signed, 6 minutes old
        assert (await post(stack, body, stale))[0] == 401

        future = sign_request(SECRET, now + 6 * 60, body)
        assert (await post(stack, body, future))[0] == 401

        tampered = body.replace(b"U0REVIEWER", b"U0ADMIN")
        assert tampered != body
        assert (await post(stack, tampered, sign_request(SECRET, now, body)))[0] == 401

        assert (await post(stack, body, {}))[0] == 401  # no signature at all

        await assert_untouched(stack, request)

        # The very same body, correctly signed and fresh, is accepted: the 401s were
        # about the signature and nothing else.
        status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200
        await stack.run_status(run_id, "succeeded")
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.decided_by == REVIEWER
        assert stack.effects.count("refund") == 1


async def test_forged_slash_command_cannot_change_routing(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        body = slash_body(stack, ADMIN, f"route add channel={CHANNEL} self=yes")
        now = int(time.time())
        status, text = await post(stack, body, sign_request("forged", now, body))
        assert status == 401
        assert "Added route" not in text
        status, _ = await post(stack, body, sign_request(SECRET, now - 6 * 60, body))
        assert status == 401
        assert await stack.bot.routes.rules() == []
        assert stack.ephemerals(ADMIN) == []

        status, text = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200 and "Added route" in text
        assert len(await stack.bot.routes.rules()) == 1


# -- replays: a signed request is taken once ------------------------------------------------


async def test_a_refused_click_sent_again_decides_nothing(redis_url: str, tmp_path: Path) -> None:
    """The first copy of a click changed nothing (its reviewer group could not be checked),
    so the compare-and-set cannot tell a replayed copy from a first decision: the copy is
    refused at the door, by its signature."""
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} reviewers=S0REVIEWERS"), ADMIN)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)
        stack.standin.inject("usergroups.users.list", status=500, times=1)
        body = click_body(stack, REVIEWER2, request, blocks.APPROVE)
        headers = sign_request(SECRET, int(time.time()), body)
        status, _ = await post(stack, body, headers)
        assert status == 200
        (told,) = await stack.wait_ephemerals(REVIEWER2)
        assert "Nothing was changed" in told

        status, text = await post(stack, body, headers)  # the same bytes, still fresh
        assert status == 200 and text == ""
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and current.approvals == []

        # The reviewer's own second click is a request of its own, and decides.
        again = click_body(stack, REVIEWER2, request, blocks.APPROVE)
        status, _ = await post(stack, again, sign_request(SECRET, int(time.time()), again))
        assert status == 200
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER2
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1


async def test_a_route_removed_does_not_come_back_with_its_command_sent_again(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        body = slash_body(stack, ADMIN, f"route add tool=issue_refund channel={CHANNEL}")
        headers = sign_request(SECRET, int(time.time()), body)
        status, text = await post(stack, body, headers)
        assert status == 200 and "Added route `r1`" in text
        removed = await stack.standin.slash(ADMIN, CHANNEL, "/approvals", "route remove r1")
        assert "Removed route" in (removed.json() or {})["text"]

        status, text = await post(stack, body, headers)
        assert status == 200 and text == ""
        assert await stack.bot.routes.rules() == []


async def test_a_request_the_guard_cannot_check_in_time_is_refused_not_let_through(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """Redis slower than the replay guard's time, but up (a command's half second; a
    decision click's, the listener's 2 s budget, which bounds its own read beside it): the
    guard cannot tell a copy from a first request, and a listener going on would still
    have its writes taken (a removed route back, a refused click deciding). Each is
    refused, told to try again."""
    server = redis_server_factory()
    assert server.pid is not None
    pid = server.pid

    async def while_redis_stalls(body: str, seconds: float = 0.9) -> tuple[int, str]:
        os.kill(pid, signal.SIGSTOP)  # resumed once the guard gave up, within the budget
        try:
            sent = asyncio.ensure_future(post(stack, body, sign_request(SECRET, now, body)))
            await asyncio.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return await sent

    async with running_stack(server.url, tmp_path) as stack:
        now = int(time.time())
        command = slash_body(stack, ADMIN, f"route add tool=issue_refund channel={CHANNEL}")
        status, text = await post(stack, command, sign_request(SECRET, now, command))
        assert status == 200 and "Added route `r1`" in text
        removed = await stack.standin.slash(ADMIN, CHANNEL, "/approvals", "route remove r1")
        assert "Removed route" in (removed.json() or {})["text"]
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)

        status, text = await while_redis_stalls(command)  # the captured copy
        assert status == 200 and "try again" in text
        assert await stack.bot.routes.rules() == []

        click = click_body(stack, REVIEWER, request, blocks.APPROVE)
        status, _ = await while_redis_stalls(click, seconds=LISTENER_BUDGET + 0.4)
        assert status == 200
        (told,) = await stack.wait_ephemerals(REVIEWER)
        assert "Nothing was changed" in told
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and current.approvals == []

        again = click_body(stack, REVIEWER, request, blocks.APPROVE)  # clicked again: decides
        status, _ = await post(stack, again, sign_request(SECRET, int(time.time()), again))
        assert status == 200
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER


async def test_a_click_waits_for_its_guard_as_long_as_for_its_own_read(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """Redis stalls past a command's half second but within the listener's budget: a
    decision click, whose listener reads the request beside the guard in that budget, is
    decided, not refused for the guard alone (eight reviewers clicking at once on a loaded
    machine met exactly that)."""
    server = redis_server_factory()
    assert server.pid is not None
    async with running_stack(server.url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)
        click = click_body(stack, REVIEWER, request, blocks.APPROVE)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            sent = asyncio.ensure_future(
                post(stack, click, sign_request(SECRET, int(time.time()), click))
            )
            await asyncio.sleep(0.9)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        status, _ = await sent
        assert status == 200
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER
        assert not any("could not record" in text for text in stack.ephemerals(REVIEWER))


async def test_slack_gets_its_answer_in_time_from_a_redis_that_answers_nothing(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """The replay guard asks Redis before any listener runs, and the client has no socket
    timeout: the guard's own deadline keeps a click and a command within Slack's 3 s."""
    server = redis_server_factory()
    async with running_stack(server.url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)
        click = click_body(stack, REVIEWER, request, blocks.APPROVE)
        command = slash_body(stack, ADMIN, "pending")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            answers = []
            for body in (click, command):
                started = time.monotonic()
                status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
                answers.append((status, time.monotonic() - started))
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert all(status == 200 and took < 3 for status, took in answers), answers
