"""The work a listener starts after its ack: ephemeral answers and forms, as owned tasks.

A listener acks first and returns; whatever is slow (a Web API call) runs afterwards as a
task `BackgroundTasks` owns, so shutting down waits for it and a failure is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from bot.slack_notifier import SlackNotifier
from bot.stop_within import end_within

__all__ = ["BackgroundTasks", "Replies"]

log = logging.getLogger(__name__)

VIEWS_OPEN_TIMEOUT = 2.5  # a trigger id is valid for 3 s after the click


class BackgroundTasks:
    """Owns the work a listener starts after its ack."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def drain(self, within: float) -> None:
        """Let the tasks (and the ones they start meanwhile) end, for up to `within`
        seconds (what is left of a stop's grace); then cancel what is left, saying how
        many. Each is safe to cut: an Approve all cut half-way leaves the rest of its calls
        waiting, as a process that dies then does."""
        if cancelled := await end_within(lambda: self._tasks, within):
            log.warning(
                "%d task(s) started after an ack were still running when the stop's grace "
                "ran out; cancelled (an Approve all cut short leaves the rest of its calls "
                "waiting: its message's tally shows which)",
                cancelled,
            )


class Replies:
    """Answers only the clicking user sees, and forms, sent after the ack."""

    def __init__(self, client: Any, notifier: SlackNotifier, tasks: BackgroundTasks) -> None:
        self.client, self.notifier, self.tasks = client, notifier, tasks

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        if text and channel:
            self.tasks.spawn(self._post_ephemeral(channel, user, text))

    def open_form(self, trigger_id: str, view: dict[str, Any], channel: str, user: str) -> None:
        self.tasks.spawn(self._open_view(trigger_id, view, channel, user))

    async def _post_ephemeral(self, channel: str, user: str, text: str) -> None:
        try:
            await self.notifier.post_ephemeral(channel, user, text)
        except Exception as exc:  # retried already; a lost answer must not end the task noisily
            log.warning("ephemeral reply to %s failed: %s", user, exc)

    async def _open_view(
        self, trigger_id: str, view: dict[str, Any], channel: str, user: str
    ) -> None:
        try:
            async with asyncio.timeout(VIEWS_OPEN_TIMEOUT):
                await self.client.views_open(trigger_id=trigger_id, view=view)
        except Exception as exc:
            log.warning("views.open failed: %s", exc)
            await self._post_ephemeral(
                channel, user, "Could not open the form; click the button again."
            )
