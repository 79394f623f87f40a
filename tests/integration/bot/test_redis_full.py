"""Redis full (`maxmemory` reached under `noeviction`) refuses every write: clicking again
does not help until an admin makes room. So nobody is told "in a moment": the reviewer, the
person typing a command and the HTTP API caller are told the database is full and who must
act; the operator's log has the error, with what to change; nothing is changed meanwhile;
and once there is room, the same click decides."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from agent_host.durable import connections
from agent_host.durable.every import Every
from bot import blocks
from bot.listeners.replies import FULL, FULL_CLICK, FULL_COMMAND, FULL_FORM, form_error
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.stack import API_TOKEN, REVIEWER, Stack, running_stack
from tests.support.waiting import eventually

from .test_bot_bulk import SEVEN, bulk_of
from .test_bot_commands import approvals


def _said_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The once-a-minute error, as in a process that has not said it yet."""
    monkeypatch.setattr(connections, "_full_said", Every(connections.FULL_SAID_EVERY))


async def _api_run(stack: Stack) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    body = {"agent": "refund-agent", "input": "refund order 125"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.url}/api/v1/runs", json=body, headers=headers) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


async def test_a_full_redis_is_said_to_be_full_to_everyone_and_a_click_decides_once_room_is_made(
    redis_server_factory: RedisServerFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _said_afresh(monkeypatch)
    server = redis_server_factory()
    async with running_stack(server.url, tmp_path) as stack, Redis.from_url(server.url) as redis:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("maxmemory", 1)  # every write refused from now on

        with caplog.at_level(logging.ERROR, logger="agent_host.durable.connections"):
            reply = await stack.click(REVIEWER, request, blocks.APPROVE)
            assert reply.status == 200
            assert await stack.wait_ephemerals(REVIEWER) == [FULL]
            said = await approvals(stack, REVIEWER, "")
            status, text, headers = await _api_run(stack)

        assert said == FULL_COMMAND
        assert status == 503, text
        assert "Redis is full" in text and "raise Redis's maxmemory" in text, text
        assert "never countersign's cs:* keys" in text, text
        assert headers["Retry-After"] == "30"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors  # once a minute, however many were refused
        assert "Redis refuses writes: its memory is full" in errors[0]
        assert "raise Redis's maxmemory" in errors[0]
        await stack.assert_still_waiting(run_id, request.request_id)

        await redis.config_set("maxmemory", 0)  # an admin made room
        await stack.click(REVIEWER, request, blocks.APPROVE)
        decided = await stack.decided(request.request_id)
        assert (decided.status, decided.decided_by) == ("approved", REVIEWER)
        await stack.run_status(run_id, "succeeded")


async def test_a_form_an_approve_all_and_an_event_refused_by_a_full_redis_say_so(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """Refused before their listeners run (the replay guard's write), as Slack lets each be
    answered: a form under its input, a click on a message for its clicker only, an event
    with a 200 (Slack would only send it again); and a decision click in App Home in the
    tab."""
    server = redis_server_factory()
    async with running_stack(server.url, tmp_path) as stack, Redis.from_url(server.url) as redis:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        (request,) = await stack.pending_requests(run_id)
        bulk_run = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        bulk = await bulk_of(stack, bulk_run)
        await stack.click(REVIEWER, request, blocks.REJECT)
        form = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        await stack.standin.open_home(REVIEWER)  # the tab, as published before Redis filled
        await eventually(lambda: stack.standin.home_view(REVIEWER))
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("maxmemory", 1)

        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "wrong amount"}}
        submitted = await stack.standin.submit_view(REVIEWER, form["id"], reason)
        assert submitted.status == 200, submitted.body
        assert submitted.json() == {
            "response_action": "errors",
            "errors": {blocks.REASON_BLOCK: form_error(FULL_FORM)},
        }
        clicked = await stack.standin.click(
            REVIEWER, bulk[0].message_channel, bulk[0].bulk_ts, blocks.BULK_APPROVE
        )
        assert clicked.status == 200, clicked.body
        assert await stack.wait_ephemerals(REVIEWER) == [FULL_CLICK]
        # A response URL Slack no longer takes (404): Slack's own error, not silence.
        real_hook = stack.standin.core.use_response_hook
        stack.standin.core.use_response_hook = lambda token: "expired_url"  # type: ignore[method-assign]
        again = await stack.standin.click(
            REVIEWER, bulk[0].message_channel, bulk[0].bulk_ts, blocks.BULK_APPROVE
        )
        stack.standin.core.use_response_hook = real_hook  # type: ignore[method-assign]
        assert again.status == 503, again.body
        opened = await stack.standin.open_home(REVIEWER)
        assert opened.status == 200, opened.body
        # A decision click in App Home is answered in the tab (published again: reads work).
        block = blocks.actions_block_id(request.request_id)
        home_click = await stack.standin.click_home(REVIEWER, blocks.APPROVE, block)
        assert home_click.status == 200, home_click.body

        async def tab_says_full() -> bool | None:
            return FULL in json.dumps(stack.standin.home_view(REVIEWER) or {}) or None

        assert await eventually(tab_says_full)

        await stack.assert_still_waiting(run_id, request.request_id)
        await stack.assert_still_waiting(bulk_run, *(r.request_id for r in bulk))
        await redis.config_set("maxmemory", 0)


async def test_a_process_started_on_a_full_redis_says_so_once_then_works_once_there_is_room(
    redis_server_factory: RedisServerFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every stream consumer (resume, outbox, callbacks, per shard) retries its reads each
    second while Redis refuses them: the operator is told once a minute, not a traceback
    a second from each."""
    _said_afresh(monkeypatch)
    server = redis_server_factory()
    async with Redis.from_url(server.url) as redis:
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("maxmemory", 1)
        with caplog.at_level(logging.INFO):
            async with running_stack(server.url, tmp_path) as stack:
                await asyncio.sleep(2.5)  # two retries of each consumer, and the sweeper's
                said = [r for r in caplog.records if r.levelno >= logging.WARNING]
                await redis.config_set("maxmemory", 0)
                run_id = await stack.start_run("refund-agent", "refund order 123")
                (request,) = await stack.pending_requests(run_id)
                await stack.click(REVIEWER, request, blocks.APPROVE)
                await stack.run_status(run_id, "succeeded")
    assert [(r.levelno, r.exc_info) for r in said] == [(logging.ERROR, None)], [
        r.getMessage() for r in said
    ]
    assert said[0].getMessage().startswith("Redis refuses writes: its memory is full")
