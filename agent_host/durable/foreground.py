"""Clicks first: background work yields to the requests someone is waiting on.

One `serve` process answers Slack's requests and runs the outbox and the resume workers on
the same event loop. A click's ack is due within 3 s and its latency is what a reviewer
feels; a message update or a resume can wait a few milliseconds. So the Slack endpoint
marks each request it serves (`serving`), and the background consumers, before they start
on an entry, wait while any is in flight (`wait_turn`), for at most `max_wait` seconds, so
a steady stream of clicks can delay background work but never starve it. Work already
started is not interrupted: each of its steps is short.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ["Foreground"]


class Foreground:
    def __init__(self, max_wait: float = 0.05) -> None:
        self.max_wait = max_wait
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around the handling of one request someone waits on."""
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def wait_turn(self) -> None:
        """Before a background step: wait while requests are in flight (bounded)."""
        if self._in_flight:
            with contextlib.suppress(TimeoutError):  # (not wait_for: on 3.11 it can swallow
                async with asyncio.timeout(self.max_wait):  # a stop that comes as it ends)
                    await self._idle.wait()
