"""Redis full (`maxmemory` reached under `noeviction`) refuses every write: clicking again
does not help until an admin makes room. So nobody is told "in a moment": the reviewer, the
person typing a command and the HTTP API caller are told the database is full and who must
act; the operator's log has the error, with what to change; nothing is changed meanwhile;
and once there is room, the same click decides."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from agent_host.durable import connections
from agent_host.durable.every import Every
from bot import blocks
from bot.listeners.replies import FULL, FULL_COMMAND
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.stack import API_TOKEN, REVIEWER, Stack, running_stack

from .test_bot_commands import approvals


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
    monkeypatch.setattr(connections, "_full_said", Every(connections.FULL_SAID_EVERY))
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
        assert "Redis is full" in text and "raise its maxmemory" in text, text
        assert headers["Retry-After"] == "30"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors  # once a minute, however many were refused
        assert "Redis refuses writes: its memory is full" in errors[0]
        assert "raises its maxmemory" in errors[0]
        await stack.assert_still_waiting(run_id, request.request_id)

        await redis.config_set("maxmemory", 0)  # an admin made room
        await stack.click(REVIEWER, request, blocks.APPROVE)
        decided = await stack.decided(request.request_id)
        assert (decided.status, decided.decided_by) == ("approved", REVIEWER)
        await stack.run_status(run_id, "succeeded")
