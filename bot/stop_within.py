"""Ending owned tasks at a stop within a bound: what outlives it is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["REQUESTS_END_WITHIN", "end_within"]

# How long a stop waits for the Slack and API requests being handled (over HTTP or Socket
# Mode) to be answered, within the stop's grace. Slack waits 3 s for an ack, and a
# listener acks within its 2 s budget; long polls are answered at once.
REQUESTS_END_WITHIN = 10.0


async def end_within(tasks: Callable[[], Collection[asyncio.Task[Any]]], within: float) -> int:
    """Wait up to `within` seconds for the tasks `tasks()` names (asked again as they end,
    so that the ones they start meanwhile are waited for too); then cancel those left and
    wait until they have ended. Returns how many were cancelled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (running := list(tasks())) and (left := deadline - loop.time()) > 0:
        await asyncio.wait(running, timeout=left)
    unfinished = list(tasks())
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*unfinished, return_exceptions=True)
    return len(unfinished)
