"""A bounded wait hears a stop that comes just as what it waits for ends: the task is told
it is cancelled, rather than going on as if nothing had happened (what `asyncio.wait_for`
does on Python 3.11 in that moment, and why countersign's code does not use it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_host.durable.streams import _sleep_or_stop
from bot.slack_notifier import SlackNotifier


async def _cancelled_as_it_ends(waiting: asyncio.Task[Any], end: Any) -> None:
    """Cancel `waiting` in the same turn of the loop as `end()` lets its wait finish."""
    await asyncio.sleep(0)  # it is waiting now
    await asyncio.sleep(0)
    end()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_consumer_s_pause_hears_a_stop_that_comes_as_the_stop_event_is_set() -> None:
    stop = asyncio.Event()
    pausing = asyncio.create_task(_sleep_or_stop(stop, 5.0))
    await _cancelled_as_it_ends(pausing, stop.set)


async def test_a_web_api_call_hears_a_stop_that_comes_as_slack_answers() -> None:
    answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def send() -> dict[str, Any]:
        return await answer

    notifier = SlackNotifier(client=None, default_channel="C0DEFAULT")
    calling = asyncio.create_task(notifier._call(None, send))
    await _cancelled_as_it_ends(calling, lambda: answer.set_result({"ok": True}))
