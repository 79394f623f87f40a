"""Long polls waiting for decisions, watched together.

`GET /api/v1/approvals/{id}?wait=S` may keep an agent waiting up to a minute, and a fleet
of agents may wait at once. A waiter that held a Redis connection of its own (a blocked
BLPOP) would take one of the client's connections each: a thousand waiters would leave
none for the clicks, the resumes and the outbox, and the whole process would answer "try
again". So every waiter of a process is watched by one loop instead: each TICK it reads
the status of every request someone waits on, in one pipeline (one round trip, however
many wait), and wakes the waiters of those no longer pending. A waiter learns of its
decision within a tick, from any process that made it; the request itself is then read
afresh by the caller, so the watch only ever decides *when* to look, never what is seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals.requests import RequestStatus
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text

__all__ = ["TICK", "DecisionWatch"]

log = logging.getLogger(__name__)

TICK = 0.25  # seconds between two looks at the requests waited on


class DecisionWatch:
    def __init__(self, redis: Redis, tick: float = TICK) -> None:
        self.redis, self.tick = redis, tick
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._failing = False  # the last look failed (logged once, not every tick)

    def waiting(self, request_id: str) -> int:
        """How many wait on `request_id` now."""
        return len(self._waiters.get(request_id, ()))

    async def until_decided(self, request_id: str, seconds: float) -> bool:
        """Wait until `request_id` is no longer pending (or is gone), for at most `seconds`;
        True when that was seen. Costs no Redis connection while it waits."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(request_id, set()).add(woken)
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._watch())
        try:
            async with asyncio.timeout(seconds):
                await woken
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(request_id)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[request_id]

    async def _watch(self) -> None:
        """Look every tick while anyone waits; end when nobody does."""
        while self._waiters:
            await asyncio.sleep(self.tick)
            try:
                await self._look()
            except Exception as exc:  # never the end of the watch: its waiters rely on it
                # They still end at their deadline and read the request themselves.
                if not self._failing:
                    log.warning("watching long polls failed (%r); retrying every tick", exc)
                self._failing = True
            else:
                self._failing = False

    async def _look(self) -> None:
        """Wake the waiters of every request waited on that is no longer pending."""
        ids = list(self._waiters)
        if not ids:
            return
        statuses = await self._statuses(ids)
        for request_id, status in zip(ids, statuses, strict=True):
            # Decided, or gone: either way, worth a fresh read.
            if status is None or as_text(status) != RequestStatus.PENDING:
                self._wake(request_id)

    async def close(self) -> None:
        """Stop watching (the process is stopping): the waiters end at their deadlines."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task

    async def _statuses(self, request_ids: list[str]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for request_id in request_ids:
                pipe.hget(K.Keys(request_id).request(request_id), "status")
            replies: list[Any] = await pipe.execute()
        return replies

    def _wake(self, request_id: str) -> None:
        for woken in self._waiters.get(request_id, ()):
            with contextlib.suppress(asyncio.InvalidStateError):
                woken.set_result(None)
