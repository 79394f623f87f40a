"""The outbox: notifications for the chat side, delivered at least once.

Entries are written by the store's scripts in the same step as the change they announce;
this loop hands each to the notifier and acknowledges it only once the notifier succeeded.
"""

from __future__ import annotations

from . import keys as K
from .crashpoints import NEVER, CrashPoints
from .notifier import Notifier, RunSummary
from .store import RunStore
from .streams import RetryLater, ShardedConsumer, StreamConsumer

__all__ = ["Outbox", "RetryLater"]


class Outbox:
    def __init__(
        self,
        store: RunStore,
        notifier: Notifier,
        consumer: str,
        *,
        idle_ms: int = 5_000,
        crash: CrashPoints = NEVER,
    ) -> None:
        self.store, self.notifier, self.crash = store, notifier, crash
        self.consumer = ShardedConsumer(
            [
                StreamConsumer(
                    store.redis,
                    shard.outbox,
                    K.OUTBOX_GROUP,
                    consumer,
                    self.handle,
                    idle_ms=idle_ms,
                    count=100,
                    concurrent=True,
                )
                for shard in K.shards()
            ]
        )

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        kind = fields.get("type")
        if kind == "run_finished":
            await self._run_finished(fields["run_id"])
            return
        request = await self.store.get_request(fields.get("request_id", ""))
        if request is None:
            return
        if kind == "request_posted":
            if request.message_ts:  # posted already (a redelivery after the ts was saved)
                return
            self.crash.reached("after_pause_saved")
            ref = await self.notifier.request_posted(request)
            self.crash.reached("after_post")
            if ref is not None:
                await self.store.set_message_ref(request.request_id, ref.channel, ref.ts)
        elif kind in ("request_decided", "request_progress"):
            await self.notifier.request_updated(request)

    async def _run_finished(self, run_id: str) -> None:
        info = await self.store.run_info(run_id)
        if info is None:
            return
        summary = RunSummary(
            run_id=run_id,
            agent=info.agent,
            status=str(info.status),
            output=info.output,
            error=info.error,
            requested_by=info.requested_by,
        )
        await self.notifier.run_finished(summary, await self.store.run_requests(run_id))
