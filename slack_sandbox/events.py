"""In-process change notifications from the local Slack sandbox (for a live page, later).

Each subscriber gets its own bounded :class:`asyncio.Queue` of small dicts such as
``{"type": "message", "channel": "C0APPROVALS", "ts": "1700000000.000100"}``. A subscriber
that falls behind loses its oldest events rather than slowing the stand-in down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

logger = logging.getLogger(__name__)

ChangeEvent = dict[str, Any]


class ChangeHub:
    def __init__(self, maxsize: int = 1000) -> None:
        self._maxsize = maxsize
        self._queues: list[asyncio.Queue[ChangeEvent]] = []

    def subscribe(self) -> asyncio.Queue[ChangeEvent]:
        queue: asyncio.Queue[ChangeEvent] = asyncio.Queue(maxsize=self._maxsize)
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[ChangeEvent]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    def publish(self, event: ChangeEvent) -> None:
        for queue in self._queues:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                logger.warning("sandbox change subscriber is behind; dropped its oldest event")
            queue.put_nowait(dict(event))
