"""A background task of the host (a resume worker, the outbox, the callbacks, the sweeper)
that ends while the host runs is work the process no longer does: said loudly, once, and
by /healthz failing (so that an orchestrator restarts the process); at a stop, nothing is
said."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host.http.application import create_app
from tests.support.host_env import make_host


async def test_a_background_task_ending_while_the_host_runs_is_said_loudly(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host, _ = make_host(Redis.from_url(redis_url), tmp_path)  # it closes its client
    host.start_background(1, sweeper=False)
    try:
        [outbox] = [task for task in host._tasks if task.get_name() == "outbox"]
        outbox.cancel()  # as a consumer ending by itself would
        await asyncio.gather(outbox, return_exceptions=True)
        await asyncio.sleep(0)  # its done callbacks
    finally:
        await host.stop()
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1, critical  # the outbox; nothing for the tasks the stop ended
    assert "outbox was cancelled while the host runs" in critical[0]
    assert host.ended_early == ["outbox"]  # what /healthz reports; not the tasks stopped


async def test_healthz_fails_once_a_background_task_ended_while_the_host_runs(
    redis_url: str, tmp_path: Path
) -> None:
    host, _ = make_host(Redis.from_url(redis_url), tmp_path)
    host.start_background(1, sweeper=False)
    try:
        async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
            assert (await client.get("/healthz")).status == 200
            [worker] = [task for task in host._tasks if task.get_name() == "resume-worker-0"]
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
            await asyncio.sleep(0)  # its done callbacks
            response = await client.get("/healthz")
            assert response.status == 503
            message = (await response.json())["error"]
            assert "resume-worker-0" in message and "restart" in message
    finally:
        await host.stop()
