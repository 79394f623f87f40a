"""Entries in flight, bounded: a stream consumer's handler holds one of a fixed number of
slots while it works, so that a backlog never takes every Redis connection (see
`outbox.IN_FLIGHT`).

A wait that uses no connection (a message's turn in its channel, Slack's "try again in a
second") sets the slot aside meanwhile, for an entry bound elsewhere to use: a burst into
one busy channel, paced at one post a second, no longer holds up every other channel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["handed_to", "holding", "set_aside"]


class _Slot:
    def __init__(self, slots: asyncio.Semaphore) -> None:
        self.slots, self.held = slots, False
        # Only the task that took it sets it aside: a task it starts inherits the context
        # var, and must not give back (or take back, for nobody) a slot it does not hold.
        self.owner = asyncio.current_task()

    async def take(self) -> None:
        await self.slots.acquire()
        self.held = True  # (not reached when cancelled while waiting: nothing to give back)

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


_current: ContextVar[_Slot | None] = ContextVar("countersign_slot", default=None)


@contextlib.asynccontextmanager
async def holding(slots: asyncio.Semaphore | None) -> AsyncIterator[None]:
    """Around the handling of one entry: one of `slots` (None: unbounded) is held."""
    if slots is None:
        yield
        return
    slot = _Slot(slots)
    await slot.take()
    token = _current.set(slot)
    try:
        yield
    finally:
        _current.reset(token)
        slot.give_back()


@contextlib.contextmanager
def handed_to(task: asyncio.Task[Any]) -> Iterator[None]:
    """The slot the current task holds (if any) is `task`'s to set aside meanwhile: the
    task its entry's handler runs in, apart from the consumer's (see `streams`); then the
    current task's again (giving the entry up sets it aside too)."""
    slot = _current.get()
    if slot is None:
        yield
        return
    owner, slot.owner = slot.owner, task
    try:
        yield
    finally:
        slot.owner = owner


@contextlib.asynccontextmanager
async def set_aside() -> AsyncIterator[None]:
    """Around a wait that uses no Redis connection: the slot this task holds (if any) is
    free for another entry meanwhile, and taken again, waiting for it if need be, after."""
    slot = _current.get()
    if slot is None or not slot.held or slot.owner is not asyncio.current_task():
        yield
        return
    slot.give_back()
    try:
        yield
    except asyncio.CancelledError:
        raise  # stopped: nothing to give back, so nothing to wait for
    except BaseException:
        await slot.take()
        raise
    await slot.take()
