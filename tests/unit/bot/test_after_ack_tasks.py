"""The work listeners start after their acks, at a stop: it is let end, the work it starts
meanwhile too, but not for ever (a platform kills a stop that takes too long, half-way
through closing Redis and Slack's session)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.listeners.after_ack import BackgroundTasks


async def test_a_drain_lets_each_task_end_and_the_ones_it_starts_meanwhile() -> None:
    tasks = BackgroundTasks()
    ended: list[str] = []

    async def later() -> None:
        await asyncio.sleep(0.05)
        ended.append("started meanwhile")

    async def first() -> None:
        await asyncio.sleep(0.05)
        tasks.spawn(later())
        ended.append("first")

    tasks.spawn(first())
    await asyncio.wait_for(tasks.drain(within=30), 10)
    assert ended == ["first", "started meanwhile"]


async def test_a_task_still_running_past_the_bound_is_cancelled_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks()
    cancelled = asyncio.Event()
    ended: list[str] = []

    async def stuck() -> None:
        try:
            await asyncio.sleep(3600)  # a Web API call that never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick() -> None:
        ended.append("quick")

    tasks.spawn(stuck())
    tasks.spawn(quick())
    await asyncio.wait_for(tasks.drain(within=0.2), 10)
    assert ended == ["quick"] and cancelled.is_set()
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "1 task(s) started after an ack were still running when the stop's grace ran out" in (
        warning.getMessage()
    )
    await asyncio.wait_for(tasks.drain(within=0.2), 10)  # nothing left: at once, nothing said
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
