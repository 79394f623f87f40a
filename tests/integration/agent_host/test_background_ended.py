"""A background task of the host (a resume worker, the outbox, the callbacks, the sweeper)
that ends while the host runs is work the process no longer does: said loudly, once; at a
stop, nothing is said."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from redis.asyncio import Redis

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
