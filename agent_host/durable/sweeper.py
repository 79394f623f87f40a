"""The expiry sweeper: requests past their deadline are decided `expired`; before that, it
climbs each request's escalation ladder (`ladder`: the reminder, the escalation).

Deadlines live in a sorted set and are decided through the same compare-and-set as a
click, so two sweepers, or a sweeper racing a reviewer, still give exactly one outcome.
Key-expiry events are never used: they are not delivered reliably.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from agent_host.approvals import ApprovalService
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crashpoints import NEVER, CrashPoints
from agent_host.durable.due import due_now
from agent_host.durable.ladder import Ladder
from agent_host.durable.store import RunStore
from agent_host.durable.streams import trim_acknowledged
from agent_host.runtime.decisions import Expired

__all__ = ["EXPIRED_BY", "Sweeper"]

log = logging.getLogger(__name__)

EXPIRED_BY = "countersign (expired)"
TRIM_EVERY_SECONDS = 60.0


class Sweeper:
    def __init__(
        self,
        store: RunStore,
        approvals: ApprovalService | None = None,
        *,
        interval: float = 1.0,
        batch: int = 100,
        crash: CrashPoints = NEVER,
        trim_every: float = TRIM_EVERY_SECONDS,
    ) -> None:
        self.store, self.interval, self.batch, self.crash = store, interval, batch, crash
        self.trim_every = trim_every  # seconds between trims of acknowledged stream entries
        self.approvals = approvals or ApprovalService(store)
        self.ladder = Ladder(store.redis, batch=batch)

    async def sweep(self) -> int:
        """Expire every request whose deadline passed; returns how many this sweeper decided.

        "Passed" by Redis's clock, the one the compare-and-set checks: a sweeper whose own
        clock runs ahead cannot expire anything early."""
        schedules = [shard.deadlines for shard in K.shards()]
        due: list[Any] = []
        for members in await due_now(self.store.redis, schedules, self.batch):
            due += members
        if due:
            self.crash.reached("sweeper_after_due")
        expired = 0
        for raw in due:
            request_id = as_text(raw)
            result = await self.approvals.decide(
                request_id, Expired(decided_by=EXPIRED_BY), via="sweeper"
            )
            if result.outcome == "decided":
                expired += 1
            elif result.outcome == "not_found":
                await self.store.redis.zrem(K.Keys(request_id).shard.deadlines, request_id)
        return expired

    async def trim(self) -> int:
        """Trim the shards' resume, outbox and callback streams of acknowledged entries."""
        trimmed = 0
        for shard in K.shards():
            trimmed += await trim_acknowledged(self.store.redis, shard.resume, K.RESUME_GROUP)
            trimmed += await trim_acknowledged(self.store.redis, shard.outbox, K.OUTBOX_GROUP)
            trimmed += await trim_acknowledged(self.store.redis, shard.callbacks, K.CALLBACK_GROUP)
        return trimmed

    async def run(self, stop: asyncio.Event) -> None:
        last_trim = 0.0
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception as exc:  # keep sweeping through Redis outages
                log.warning("sweep failed (%s); retrying", exc)
            # Apart from expiry, so that neither can hold the other up.
            try:
                await self.ladder.climb()
            except Exception as exc:
                log.warning("escalation ladder failed (%s); retrying", exc)
            if self.store.clock() - last_trim > self.trim_every:
                last_trim = self.store.clock()
                # Apart from the sweep: trimming is housekeeping, and whatever goes wrong
                # in it must neither stop expiry nor be mistaken for a failed sweep.
                try:
                    await self.trim()
                except Exception as exc:
                    log.warning("stream trim failed (%s); next try in %gs", exc, self.trim_every)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
