"""The chat side of bulk messages, for the outbox: posting one, and keeping it up to date.

A bulk entry is delivered at least once and posts at most one message per delivery that
gets as far as recording it: the message's ts is recorded (`BulkBook.record_posted`)
before the entry is acknowledged, so a redelivered entry finds it and posts nothing again.
A channel that refuses the message for good gets each call on its own instead, through the
outbox's single-request path (rerouted to the default channel, admins told). Updates of one
bulk are coalesced: a burst of decisions (Approve all N) costs an update at a time, and
one more after the last, not N.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.notifier import Notifier
from agent_host.durable import keys as K
from agent_host.durable.bulks import BulkBook
from agent_host.durable.store import RunStore
from agent_host.errors import DeliveryFailed, RetryLater

__all__ = ["BulkDelivery", "Coalesced"]

log = logging.getLogger(__name__)

PostOne = Callable[[ApprovalRequest, dict[str, str]], Awaitable[None]]


class Coalesced:
    """One job per key at a time; a caller that arrives while a run of it waits to start
    joins that run (it will read the state after the caller's change) instead of queueing
    another. A joiner sees the run's failure, so its own entry is retried too."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._next: dict[str, asyncio.Future[None]] = {}

    async def run(self, key: str, job: Callable[[], Awaitable[None]]) -> None:
        waiting = self._next.get(key)
        if waiting is not None:
            await asyncio.shield(waiting)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._next[key] = future
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                self._next.pop(key, None)  # from now on, newcomers wait for the next run
                try:
                    await job()
                except BaseException as exc:
                    future.set_exception(exc)
                    future.exception()  # retrieved: nobody may have joined
                    raise
                future.set_result(None)
        finally:
            if not future.done():  # cancelled while waiting for the lock
                self._next.pop(key, None)
                future.cancel()
            if not lock.locked() and key not in self._next:
                self._locks.pop(key, None)


class BulkDelivery:
    def __init__(
        self, store: RunStore, notifier: Notifier, book: BulkBook, post_one: PostOne
    ) -> None:
        self.store, self.notifier, self.book = store, notifier, book
        self.post_one = post_one  # the outbox's path for one request
        self._updates = Coalesced()

    async def post(self, bulk_id: str, entry: dict[str, str]) -> None:
        """Post the bulk's message once; if its channel refuses it for good, each call on
        its own."""
        bulk = await self.book.get(bulk_id)
        if bulk is None or bulk.posted:  # gone, or posted already (a redelivery)
            return
        requests = await self.book.requests(bulk)
        if not bulk.fallback:
            try:
                ref = await self.notifier.bulk_posted(bulk, requests)
            except DeliveryFailed as refused:
                log.warning(
                    "bulk %s was refused by %s (%s): posting its calls one by one",
                    bulk_id,
                    refused.channel,
                    refused.code,
                )
                await self.book.record_fallback(bulk)
            else:
                if ref is not None:
                    await self.book.record_posted(bulk, ref.channel, ref.ts)
                    await self.store.count_delivered(bulk_id)
                return
        for request in requests:
            if request.decided or request.message_ts:
                continue
            single = {"type": "request_posted", "request_id": request.request_id}
            await self.post_one(
                self.store.open_context(request), entry | single | {"bulk_id": bulk_id}
            )

    async def post_apart(self, bulk_id: str) -> None:
        """The bulk's message given up (it kept failing with an error of ours): each call
        still waiting is queued to be posted on its own, and is then delivered, or given
        up and its administrators told, by itself."""
        bulk = await self.book.get(bulk_id)
        if bulk is None:
            return
        await self.book.record_fallback(bulk)
        requests = await self.book.requests(bulk)
        async with self.store.redis.pipeline(transaction=False) as pipe:
            for request in requests:
                if not (request.decided or request.message_ts):
                    single = {"type": "request_posted", "request_id": request.request_id}
                    entry = single | {"bulk_id": bulk_id}
                    pipe.xadd(K.Keys(bulk_id).shard.outbox, entry)  # type: ignore[arg-type]
            await pipe.execute()

    async def refresh(self, bulk_id: str) -> None:
        """Show the bulk's calls as they are now in its message."""
        await self._updates.run(bulk_id, lambda: self._refresh(bulk_id))

    async def _refresh(self, bulk_id: str) -> None:
        bulk = await self.book.get(bulk_id)
        if bulk is None or bulk.fallback:
            return  # nothing to update: each call has a message of its own
        if not bulk.posted:
            raise RetryLater(f"bulk {bulk_id} is not posted yet")
        requests = await self.book.requests(bulk)
        try:
            await self.notifier.bulk_updated(bulk, requests)
        except DeliveryFailed as failure:  # e.g. the message was deleted: drop it
            await self.store.record_delivery_failure(bulk_id, failure, "bulk_updated")
            return
        await self.store.count_delivered(bulk_id)
