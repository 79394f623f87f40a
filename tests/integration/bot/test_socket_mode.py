"""Socket Mode: with SLACK_APP_TOKEN the bot opens a websocket to the (stand-in) Slack and the
same Bolt listeners answer clicks, modal submissions and slash commands sent as envelopes.

The stand-in here has no events_url and the bot's HTTP server has no /slack/events, so every
interaction below can only have travelled over the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_host.approvals import ApprovalRequest
from agent_host.durable.redis_server import free_port
from agent_host.errors import ConfigurationError
from agent_host.examples import ExampleEffects
from bot import blocks
from bot.cli import _serve
from bot.composition import Service, build_service
from bot.slack_settings import ServiceSettings as Settings
from bot.slash_commands import help_text
from slack_sandbox import AppUnreachable, SlackStandIn, open_workspace, workspace_to_dict
from tests.support.stack import (
    CHANNEL,
    REVIEWER,
    SECRET,
    TOKEN,
    Stack,
    quicken,
    stack_settings,
)
from tests.support.waiting import eventually

APP_TOKEN = "xapp-1-A0SANDBOX-1-socket-mode-test"


def _standin(tmp_path: Path, **options: Any) -> SlackStandIn:
    return SlackStandIn(
        open_workspace(tmp_path / "slack"),
        token=TOKEN,
        signing_secret=SECRET,
        app_token=APP_TOKEN,
        **options,
    )


def _settings(standin: SlackStandIn, redis_url: str, tmp_path: Path, app_token: str) -> Settings:
    return stack_settings(standin, redis_url, tmp_path, SLACK_APP_TOKEN=app_token)


@asynccontextmanager
async def socket_stack(redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Like stack.running_stack, but the bot takes Slack's requests over Socket Mode."""
    async with _standin(tmp_path) as standin:
        assert standin.events_url is None
        settings = _settings(standin, redis_url, tmp_path, APP_TOKEN)
        service = await build_service(settings)  # Socket Mode: no /slack/events is mounted
        quicken(service.host)
        try:
            await service.start(http=("127.0.0.1", 0), workers=1)
            effects = ExampleEffects(settings.example_journal)
            yield Stack(standin, service.host, service.bot, service.url, effects)
        finally:
            await service.stop()


def _envelopes(standin: SlackStandIn, kind: str) -> list[dict[str, Any]]:
    return [e for e in standin.socket_mode.envelopes if e["type"] == kind]


async def test_approve_click_travels_over_the_socket_and_the_refund_runs_once(
    redis_url: str, tmp_path: Path
) -> None:
    async with socket_stack(redis_url, tmp_path) as stack:
        assert stack.standin.socket_mode.connected
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        posted = stack.message(CHANNEL, request.message_ts)
        assert any(b["type"] == "actions" for b in posted["blocks"])

        reply = await stack.click(REVIEWER, request, blocks.APPROVE)
        assert reply.status == 200

        [envelope] = _envelopes(stack.standin, "interactive")
        assert envelope["accepts_response_payload"] is True
        assert envelope["payload"]["type"] == "block_actions"
        assert envelope["payload"]["actions"][0]["action_id"] == blocks.APPROVE
        assert envelope["payload"]["user"]["id"] == REVIEWER
        acked = [a["envelope_id"] for a in stack.standin.socket_mode.acks]
        assert acked == [envelope["envelope_id"]]

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert stack.effects.count("refund") == 1
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert REVIEWER in str(message["blocks"])
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert "Refund issued" in outcome["text"]

        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{stack.url}/slack/events", data=b"") as response,
        ):
            assert response.status == 404  # not served in Socket Mode
        assert stack.effects.count("refund") == 1


async def test_slash_command_over_the_socket_answers_ephemerally(
    redis_url: str, tmp_path: Path
) -> None:
    async with socket_stack(redis_url, tmp_path) as stack:
        reply = await stack.standin.slash(REVIEWER, CHANNEL, "/approvals", "help")
        assert reply.status == 200
        assert reply.json() == {"response_type": "ephemeral", "text": help_text()}

        [envelope] = _envelopes(stack.standin, "slash_commands")
        assert envelope["payload"]["command"] == "/approvals"
        assert envelope["payload"]["text"] == "help"
        assert envelope["payload"]["user_id"] == REVIEWER
        assert stack.ephemerals(REVIEWER) == [help_text()]
        assert stack.channel_messages(CHANNEL) == []  # shown to the caller only


async def test_reject_modal_submission_over_the_socket(redis_url: str, tmp_path: Path) -> None:
    reason = "amount looks wrong"
    async with socket_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        clicked = await stack.click(REVIEWER, request, blocks.REJECT)
        assert clicked.status == 200
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
        )
        assert submitted.status == 200 and submitted.json() is None  # a bare ack
        assert stack.view_state(view["id"])["closed"] is True

        kinds = [e["payload"]["type"] for e in _envelopes(stack.standin, "interactive")]
        assert kinds == ["block_actions", "view_submission"]

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded" and reason in info.output
        assert stack.effects.count("refund") == 0
        decided = await stack.decided(request.request_id)
        assert decided.status == "rejected" and decided.decided_by == REVIEWER


async def test_over_the_socket_a_malformed_payload_is_refused_and_requests_go_first(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As at POST /slack/events: a payload not shaped as Slack sends it never reaches Bolt
    (the HTTP endpoint answers 400; here it is not acknowledged), and while a request is
    handled, the outbox and the workers wait their turn."""
    async with socket_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        served: list[str] = []
        serving = stack.bot.foreground.serving

        @contextlib.contextmanager
        def noted() -> Iterator[None]:
            with serving():
                served.append("in flight")
                yield

        stack.bot.foreground.serving = noted  # type: ignore[method-assign]
        assert (await stack.click(REVIEWER, request, blocks.REJECT)).status == 200
        assert served == ["in flight"]
        [envelope] = _envelopes(stack.standin, "interactive")
        malformed = copy.deepcopy(envelope["payload"])
        malformed["message"]["blocks"] = {"not": "a list of blocks"}

        with pytest.raises(TimeoutError):
            await stack.standin.socket_mode.deliver("interactive", malformed, within=1.0)

        assert "refused a malformed Socket Mode interactive payload" in caplog.text
        assert served == ["in flight"]  # it never reached Bolt
        assert len(stack.standin.socket_mode.acks) == 1  # the first click's only
        await stack.assert_still_waiting(run_id, request.request_id)
        assert stack.effects.count("refund") == 0


async def test_wrong_app_token_is_refused_and_serve_fails_with_a_clear_error(
    redis_url: str, tmp_path: Path
) -> None:
    async with _standin(tmp_path) as standin:
        settings = _settings(standin, redis_url, tmp_path, "xapp-1-A0SANDBOX-1-wrong")
        with pytest.raises(ConfigurationError) as refused:
            await _serve(settings, "127.0.0.1", free_port(), 1)
        text = str(refused.value)
        assert "SLACK_APP_TOKEN was refused" in text and "'invalid_auth'" in text
        assert len(standin.calls_to("apps.connections.open")) == 1  # no retry loop
        assert not standin.socket_mode.connected

        async with aiohttp.ClientSession() as session:
            wrong = {"Authorization": "Bearer xapp-1-A0SANDBOX-1-wrong"}
            async with session.post(standin.url + "apps.connections.open", headers=wrong) as r:
                assert await r.json() == {"ok": False, "error": "invalid_auth"}

        bot_token = settings.model_copy(update={"slack_app_token": TOKEN})
        with pytest.raises(ConfigurationError, match=r"not_allowed_token_type.*xapp-"):
            await _serve(bot_token, "127.0.0.1", free_port(), 1)


async def test_serve_with_app_token_connects_over_socket_mode(
    redis_url: str, tmp_path: Path
) -> None:
    async with _standin(tmp_path) as standin:
        settings = _settings(standin, redis_url, tmp_path, APP_TOKEN)
        port = free_port()
        serving = asyncio.create_task(_serve(settings, "127.0.0.1", port, 1))
        try:

            async def connected() -> bool:
                assert not serving.done(), serving
                return standin.socket_mode.connected

            await eventually(connected)
            reply = await standin.slash(REVIEWER, CHANNEL, "/approvals", "help")
            assert reply.json() == {"response_type": "ephemeral", "text": help_text()}
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    assert response.status == 200
                async with session.post(f"http://127.0.0.1:{port}/slack/events") as response:
                    assert response.status == 404
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving

        async def disconnected() -> bool:
            return not standin.socket_mode.connected

        await eventually(disconnected)
        assert standin.events_url is None


async def test_socket_mode_needs_no_signing_secret_but_http_does(
    redis_url: str, tmp_path: Path
) -> None:
    """Over Socket Mode nothing arrives by HTTP to verify, so SLACK_SIGNING_SECRET is not
    required there; without SLACK_APP_TOKEN it is, and start-up says so."""
    async with _standin(tmp_path) as standin:
        settings = _settings(standin, redis_url, tmp_path, APP_TOKEN)
        socket = await build_service(settings.model_copy(update={"slack_signing_secret": None}))
        try:
            await socket.start(http=("127.0.0.1", 0), workers=0)
            reply = await standin.slash(REVIEWER, CHANNEL, "/approvals", "help")
            assert reply.json() == {"response_type": "ephemeral", "text": help_text()}
        finally:
            await socket.stop()
        over_http = settings.model_copy(
            update={"slack_signing_secret": None, "slack_app_token": None}
        )
        with pytest.raises(ConfigurationError, match="SLACK_SIGNING_SECRET must be set"):
            await build_service(over_http)


async def test_standin_envelopes_acks_timeouts_and_http_fallback(tmp_path: Path) -> None:
    """The stand-in's side alone, with a bare websocket client playing the app."""
    async with _standin(tmp_path, app_timeout=0.5) as standin, aiohttp.ClientSession() as session:
        open_url = standin.url + "apps.connections.open"
        for headers, error in (
            ({}, "not_authed"),
            ({"Authorization": f"Bearer {TOKEN}"}, "not_allowed_token_type"),
            ({"Authorization": "Bearer xapp-other"}, "invalid_auth"),
        ):
            async with session.post(open_url, headers=headers) as response:
                assert await response.json() == {"ok": False, "error": error}
        async with session.post(open_url, headers={"Authorization": f"Bearer {APP_TOKEN}"}) as r:
            opened = await r.json()
        assert opened["ok"] is True
        url = opened["url"]
        assert url.startswith(f"ws://{standin.base_url.removeprefix('http://')}/_sandbox/socket?")

        async with session.ws_connect(url) as ws:
            hello = await ws.receive_json(timeout=2)
            assert hello["type"] == "hello"
            assert hello["connection_info"]["app_id"] == "A0SANDBOX"
            assert standin.socket_mode.connected

            # An ack with a payload is the response body.
            asked = asyncio.create_task(standin.slash(REVIEWER, CHANNEL, "/approvals", "x"))
            envelope = await ws.receive_json(timeout=2)
            assert envelope["type"] == "slash_commands"
            assert envelope["accepts_response_payload"] is True
            assert envelope["payload"]["text"] == "x"
            answer = {"response_type": "ephemeral", "text": "over the socket"}
            await ws.send_json({"envelope_id": "not-this-one"})  # ignored
            await ws.send_json({"envelope_id": envelope["envelope_id"], "payload": answer})
            reply = await asked
            assert reply.status == 200 and reply.json() == answer
            ephemerals = workspace_to_dict(standin.workspace)["ephemerals"]
            assert ephemerals[-1]["text"] == "over the socket"

            # No ack within the app timeout: the app could not be reached, as over HTTP.
            unanswered = asyncio.create_task(standin.slash(REVIEWER, CHANNEL, "/approvals", "y"))
            assert (await ws.receive_json(timeout=2))["payload"]["text"] == "y"
            with pytest.raises(AppUnreachable):
                await asyncio.wait_for(unanswered, 3)

        # The ticket was used; and once the client left, HTTP is back (no events_url here).
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await session.ws_connect(url)

        async def left() -> bool:
            return not standin.socket_mode.connected

        await eventually(left)
        assert standin.events_url is None
        with pytest.raises(RuntimeError, match="events_url"):
            await standin.slash(REVIEWER, CHANNEL, "/approvals", "z")


@asynccontextmanager
async def service_to_stop(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Service, Stack]]:
    """A service taking Slack's requests over Socket Mode, for a test that stops it itself
    (stopped at the end if it did not); the settings are the service's."""
    async with _standin(tmp_path) as standin:
        service = await build_service(_settings(standin, redis_url, tmp_path, APP_TOKEN))
        quicken(service.host)
        try:
            await service.start(http=("127.0.0.1", 0), workers=1)
            effects = ExampleEffects(service.settings.example_journal)
            yield service, Stack(standin, service.host, service.bot, service.url, effects)
        finally:
            await service.stop()


async def as_the_next_process_reads(service: Service, request_id: str) -> ApprovalRequest:
    again = await build_service(service.settings)
    try:
        request = await again.host.store.get_request(request_id)
        assert request is not None, request_id
        return request
    finally:
        await again.stop()


async def approve_held_in_bolt(
    release: asyncio.Event, service: Service, stack: Stack, request: ApprovalRequest
) -> tuple[asyncio.Task[Any], list[asyncio.Task[Any] | None]]:
    """REVIEWER's Approve on `request`, once Bolt holds it (until `release` is set, before
    its listener: nothing decided yet); and the task it is being handled in."""
    held = asyncio.Event()
    handled_in: list[asyncio.Task[Any] | None] = []

    async def hold(next_: Any) -> None:
        handled_in.append(asyncio.current_task())
        held.set()
        await release.wait()
        await next_()

    service.bot.bolt.middleware(hold)
    click = asyncio.create_task(stack.click(REVIEWER, request, blocks.APPROVE))
    await asyncio.wait_for(held.wait(), 10)
    return click, handled_in


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_click_being_handled_at_a_stop_is_decided_and_answered_and_a_later_one_not_taken(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deploy's stop waits for the requests the socket is handling, as an HTTP server's
    does: their acks go back over the socket before it closes (slack_sdk starts each as a
    task nobody kept, which went on against a closed Redis, its ack lost). A request
    arriving meanwhile is not taken: Slack tells the person it failed."""
    async with service_to_stop(redis_url, tmp_path) as (service, stack):
        first = await stack.start_run("refund-agent", "refund order 123")
        second = await stack.start_run("refund-agent", "refund order 124")
        [clicked] = await stack.pending_requests(first)
        [late] = await stack.pending_requests(second)
        assert service._socket_mode is not None
        handler = service._socket_mode.handler
        release = asyncio.Event()
        click, _ = await approve_held_in_bolt(release, service, stack, clicked)
        stopping = asyncio.create_task(service.stop())
        await eventually(lambda: handler._stopping)
        late_click = asyncio.create_task(stack.click(REVIEWER, late, blocks.APPROVE))
        await eventually(lambda: "arrived while stopping: not taken" in caplog.text)
        assert not click.done() and not stopping.done()  # the stop waits for the click
        release.set()
        reply = await asyncio.wait_for(click, 10)
        await asyncio.wait_for(stopping, 30)
        late_reply = await asyncio.wait_for(late_click, 10)

        assert reply.status == 200, reply  # acknowledged over the socket
        assert not logged_errors(caplog), logged_errors(caplog)
        assert late_reply.status != 200, late_reply
        assert "arrived while stopping: not taken" in caplog.text
        assert len(_envelopes(stack.standin, "interactive")) == 2
        assert len(stack.standin.socket_mode.acks) == 1  # the first click's only

    decided = await as_the_next_process_reads(service, clicked.request_id)
    assert decided.status == "approved" and decided.decided_by == REVIEWER, decided
    waiting = await as_the_next_process_reads(service, late.request_id)
    assert waiting.status == "pending", waiting


async def test_a_request_still_handled_when_the_stop_s_grace_runs_out_is_cancelled_and_said(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop waits for the requests being handled within its grace, not for ever: one
    still going then is cancelled, unacknowledged, with a warning, and nothing it had not
    done is taken as done."""
    async with service_to_stop(redis_url, tmp_path) as (service, stack):
        service.host.stop_grace = 0.5
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert service._socket_mode is not None
        client = service._socket_mode.handler.client
        click, handled_in = await approve_held_in_bolt(asyncio.Event(), service, stack, request)
        await asyncio.wait_for(service.stop(), 30)
        reply = await asyncio.wait_for(click, 10)

        assert reply.status != 200, reply  # not acknowledged: Slack says it failed
        assert "still being handled when the stop's wait for them ran out" in caplog.text
        assert not logged_errors(caplog), logged_errors(caplog)
        assert stack.standin.socket_mode.acks == []
        # what was cancelled was that request's own task, not the socket's loops (slack_sdk
        # starts a task per request: what the stop relies on)
        [task] = handled_in
        assert task is not None and task.cancelled()
        assert task not in (client.message_processor, client.message_receiver)

    waiting = await as_the_next_process_reads(service, request.request_id)
    assert waiting.status == "pending", waiting
