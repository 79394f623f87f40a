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

from redis.exceptions import ResponseError

from agent_host.approvals import ApprovalService
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, is_full, say_full
from agent_host.durable.crashpoints import NEVER, CrashPoints
from agent_host.durable.due import due_now
from agent_host.durable.every import Every
from agent_host.durable.ladder import Ladder
from agent_host.durable.poison import TRANSIENT
from agent_host.durable.store import RunStore
from agent_host.durable.streams import trim_acknowledged
from agent_host.runtime.decisions import Expired

__all__ = ["EXPIRED_BY", "Sweeper"]

log = logging.getLogger(__name__)

EXPIRED_BY = "countersign (expired)"
OWN_ERROR_SAID_EVERY = 60.0  # seconds between logs of one recurring error of its own
TRIM_EVERY_SECONDS = 60.0
RETRY_SECONDS = 60  # before a request that could not be read is tried again


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
        self._own_error = Every(OWN_ERROR_SAID_EVERY)  # each half's, logged once a minute

    async def sweep(self) -> int:
        """Expire every request whose deadline passed; returns how many this sweeper decided.

        "Passed" by Redis's clock, the one the compare-and-set checks: a sweeper whose own
        clock runs ahead cannot expire anything early. One entry that cannot be expired
        holds up none of the others: it is dropped when it names no request of its shard,
        or tried again RETRY_SECONDS later when its request cannot be read."""
        shards = K.shards()
        due = await due_now(self.store.redis, [shard.deadlines for shard in shards], self.batch)
        if any(due):
            self.crash.reached("sweeper_after_due")
        expired = 0
        for shard, members in zip(shards, due, strict=True):
            for member in members:
                expired += await self._expire(shard, as_text(member))
        return expired

    async def _expire(self, shard: K.Shard, request_id: str) -> bool:
        """Expire one entry of `shard`'s deadlines; True when this sweeper decided it."""
        redis = self.store.redis
        try:
            k = K.Keys(request_id)
        except ValueError:
            k = None
        if k is None or k.shard != shard:  # its own shard's entry, if any, is what counts
            log.warning("dropped a deadline entry naming no request of its shard: %r", request_id)
            await redis.zrem(shard.deadlines, request_id)
            return False
        try:
            result = await self.approvals.decide(
                request_id, Expired(decided_by=EXPIRED_BY), via="sweeper"
            )
        except Exception as exc:
            if isinstance(exc, TRANSIENT) and not _damaged(exc):
                raise  # Redis is away: the whole sweep is tried again
            log.exception(
                "request %s is past its deadline but could not be read to expire it (tried "
                "again in %gs): repair or delete its hash %s",
                request_id,
                RETRY_SECONDS,
                k.request(request_id),
            )
            seconds, _ = await redis.time()
            await redis.zadd(
                shard.deadlines, {request_id: (seconds + RETRY_SECONDS) * 1000}, xx=True
            )
            return False
        if result.outcome in ("not_found", "already_decided"):  # nothing left to expire
            await redis.zrem(shard.deadlines, request_id)
        return result.outcome == "decided"

    async def trim(self) -> int:
        """Trim the shards' resume, outbox and callback streams of acknowledged entries."""
        trimmed = 0
        for shard in K.shards():
            trimmed += await trim_acknowledged(self.store.redis, shard.resume, K.RESUME_GROUP)
            trimmed += await trim_acknowledged(self.store.redis, shard.outbox, K.OUTBOX_GROUP)
            trimmed += await trim_acknowledged(self.store.redis, shard.callbacks, K.CALLBACK_GROUP)
        return trimmed

    def _failed(self, what: str, exc: Exception) -> None:
        """Redis away passes, and is said in a line; an error of countersign's own would fail
        every round the same way, so it is logged as an error, with its traceback, once a
        minute (not every round)."""
        if is_full(exc):
            say_full(exc)  # the operator's error, once a minute
            return
        if isinstance(exc, TRANSIENT):
            log.warning("%s failed (%s); retrying", what, exc)
            return
        if self._own_error.due(what):
            log.error("%s failed; retrying each round until fixed", what, exc_info=exc)

    async def run(self, stop: asyncio.Event) -> None:
        last_trim = 0.0
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception as exc:  # keep sweeping through Redis outages, and our bugs
                self._failed("sweep (requests past their deadline are not expired)", exc)
            # Apart from expiry, so that neither can hold the other up.
            try:
                await self.ladder.climb()
            except Exception as exc:
                self._failed("escalation ladder (no reminder or escalation is sent)", exc)
            if self.store.clock() - last_trim > self.trim_every:
                last_trim = self.store.clock()
                # Apart from the sweep: trimming is housekeeping, and whatever goes wrong
                # in it must neither stop expiry nor be mistaken for a failed sweep.
                try:
                    await self.trim()
                except Exception as exc:
                    log.warning("stream trim failed (%s); next try in %gs", exc, self.trim_every)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await stop.wait()


def _damaged(exc: BaseException) -> bool:
    """Redis answered, about the data: a request key holding another type than a hash."""
    cause = exc if isinstance(exc, ResponseError) else exc.__cause__
    return isinstance(cause, ResponseError) and str(cause).startswith("WRONGTYPE")
