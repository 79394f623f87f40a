"""The outbox: notifications for the chat side, delivered at least once.

Entries are written by the store's scripts in the same step as the change they announce;
this loop hands each to the notifier and acknowledges it only once the notifier succeeded,
or once the chat side refused it for good (`DeliveryFailed`): retrying that would only
hide it. Such a refusal is recorded (audit entry, counter); a request that could not be
posted is also marked undeliverable, its entry copied to the shard's dead-letter stream,
and it is posted to the fallback destination with the administrators told. The ladder's
steps (a reminder, an escalation) are delivered by `escalations.LadderDelivery`, and the
messages of many calls at once (bulks) by `bulk_delivery.BulkDelivery`.

The notifier says "not now" (`RetryLater`) or "never" (`DeliveryFailed`); Redis being away
is retried too. An entry failing with an error of countersign's own is given up after
`poison.POISON_AFTER` attempts (recorded like a refusal, a request marked undeliverable and
dead-lettered, the administrators told) rather than retried for ever.
"""

from __future__ import annotations

import asyncio
import logging

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.notifier import Notifier, RunSummary
from agent_host.durable import keys as K
from agent_host.durable.bulk_delivery import BulkDelivery
from agent_host.durable.bulks import BULK_POSTED, BULK_UPDATED, BulkBook
from agent_host.durable.crashpoints import NEVER, CrashPoints
from agent_host.durable.escalations import LadderDelivery
from agent_host.durable.foreground import Foreground
from agent_host.durable.ladder import ESCALATED, REMINDED, Ladder
from agent_host.durable.poison import POISON_AFTER, TRANSIENT, NeverFinished
from agent_host.durable.store import RunStore
from agent_host.durable.streams import (
    RetryLater,
    ShardedConsumer,
    StreamConsumer,
    WithAck,
    send_now,
)
from agent_host.durable.suspects import SuspectGate
from agent_host.errors import DeliveryFailed

__all__ = ["IN_FLIGHT", "POISON_AFTER", "Outbox", "RetryLater"]

log = logging.getLogger(__name__)

# Entries of all shards delivered at once. A backlog (serve restarted after an outage, a
# burst of pauses) is read 100 entries per shard at a time; unbounded, its first reads
# alone would ask for more Redis connections than the client has (1024), and clicks would
# fail for want of one. Deliveries mostly wait on chat's pace, so this is not what limits
# how fast a backlog drains: chat's one post per second per channel is.
IN_FLIGHT = 256


class Outbox:
    def __init__(
        self,
        store: RunStore,
        notifier: Notifier,
        consumer: str,
        *,
        idle_ms: int = 5_000,
        crash: CrashPoints = NEVER,
        foreground: Foreground | None = None,
        gate: SuspectGate | None = None,
    ) -> None:
        self.store, self.notifier, self.crash = store, notifier, crash
        self.book = BulkBook(store)
        self.ladder = LadderDelivery(store, notifier, Ladder(store.redis), self.book)
        self.bulks = BulkDelivery(store, notifier, self.book, self._post)
        in_flight = asyncio.Semaphore(IN_FLIGHT)
        shared_gate = gate if gate is not None else SuspectGate()  # its shards share it
        self.consumer = ShardedConsumer(
            [
                StreamConsumer(
                    store.redis,
                    shard.outbox,
                    K.OUTBOX_GROUP,
                    consumer,
                    self.handle_entry,
                    idle_ms=idle_ms,
                    count=100,
                    concurrent=True,
                    foreground=foreground,
                    in_flight=in_flight,
                    give_up=self._give_up,
                    gate=shared_gate,
                )
                for shard in K.shards()
            ]
        )

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        """Deliver one entry to its end (the consumer acknowledges it; called directly, it
        is not acknowledged)."""
        await send_now(self.store.redis, await self.handle_entry(entry_id, fields))

    async def _give_up(self, entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        """An entry that failed POISON_AFTER times with an error of ours: recorded like a
        refusal (a post also marks its request undeliverable, dead-letters the entry and
        tells the administrators, not posting it elsewhere: the same error would stop that
        too), then acknowledged."""
        kind = fields.get("type", "")
        about = fields.get("request_id") or fields.get("run_id") or fields.get("bulk_id", "")
        if not about:
            return
        code = (
            DeliveryFailed.STOPPED if isinstance(exc, NeverFinished) else DeliveryFailed.OWN_ERROR
        )
        failure = DeliveryFailed(code, detail=f"{type(exc).__name__}: {exc}"[:300])
        if kind == BULK_POSTED:  # its calls are then posted (or given up) one by one
            await self.store.record_delivery_failure(about, failure, kind)
            try:
                await self.bulks.post_apart(about)
            except TRANSIENT:
                raise  # Redis away: the entry is given up again once it is back
            except Exception:  # the same error again: the log and the audit say so
                log.exception("posting the calls of bulk %s one by one failed", about)
            return
        if kind != "request_posted":
            await self.store.record_delivery_failure(about, failure, kind)
            return
        await self.store.record_delivery_failure(
            about, failure, kind, undeliverable=True, dead_letter=fields | {"entry_id": entry_id}
        )
        try:
            request = await self.store.get_request(about)
            if request is not None:
                await self.notifier.request_undeliverable(request, failure, None)
        except TRANSIENT:
            raise  # given up again, and told, once Redis or Slack is back
        except Exception:  # they are told by the log, the audit and /metrics then
            log.exception("telling the administrators of request %s failed", about)

    async def handle_entry(self, entry_id: str, fields: dict[str, str]) -> WithAck | None:
        """`handle`, but the delivery's counter is handed back to be sent with the entry's
        acknowledgement, in one round trip."""
        kind = fields.get("type", "")
        if kind == "run_finished":
            return await self._run_finished(fields["run_id"], fields.get("request_ids"))
        if kind == BULK_POSTED:
            await self.bulks.post(fields.get("bulk_id", ""), fields | {"entry_id": entry_id})
            return None
        if kind == BULK_UPDATED:
            await self.bulks.refresh(fields.get("bulk_id", ""))
            return None
        request = await self.store.get_request(fields.get("request_id", ""))
        if request is None:
            return None
        request = self.store.open_context(request)  # what the run did before: in the message
        if kind == "request_posted":
            await self._post(request, fields | {"entry_id": entry_id})
        elif kind == REMINDED:
            await self.ladder.remind(request)
        elif kind == ESCALATED:
            await self.ladder.escalate(request)
        elif kind in ("request_decided", "request_progress"):
            ack = await self._updated(request, kind)
            if request.bulk_id:  # and the tally of the message it was posted with
                await self.bulks.refresh(request.bulk_id)
            return ack
        return None

    async def _updated(self, request: ApprovalRequest, kind: str) -> WithAck | None:
        if not (request.message_ts or request.escalations) and (
            request.delivery == "undeliverable"
        ):
            return None  # it never reached chat: there is no message to update
        try:
            await self.notifier.request_updated(request)
            await self._still_current(request)
        except DeliveryFailed as failure:  # e.g. the message was deleted: drop it
            await self.store.record_delivery_failure(request.request_id, failure, kind)
            return None
        return self.store.delivered_with_ack(request.request_id)

    async def _still_current(self, shown: ApprovalRequest) -> None:
        """A waiting request's message (a quorum's tally) can land after a later state's
        update: sent again after Slack's "not now", or by another process. Once it landed,
        read the request again, and while it moved on since what was shown, show it as it
        is now: whoever sends an update reads again after it lands, so the last to land
        shows the last state (a decided request's buttons never come back). A state only
        moves forward (a vote more, then decided), so this ends."""
        while not shown.decided:
            current = await self.store.get_request(shown.request_id)
            if current is None or (current.status, current.approvals) == (
                shown.status,
                shown.approvals,
            ):
                return
            shown = self.store.open_context(current)
            await self.notifier.request_updated(shown)

    async def _post(self, request: ApprovalRequest, entry: dict[str, str]) -> None:
        if request.message_ts and not request.only_in_bulk:
            return  # posted already (a redelivery after the ts was saved)
        if request.only_in_bulk and request.decided:
            return  # one by one, but decided meanwhile: its bulk message shows it
        if request.delivery == "undeliverable":
            # Refused for good before, and the fallback did not finish: carry on with it.
            failure = DeliveryFailed(request.delivery_error, request.route.destination)
        else:
            self.crash.reached("after_pause_saved")
            try:
                ref = await self.notifier.request_posted(request)
            except DeliveryFailed as refused:
                failure = refused
                await self.store.record_delivery_failure(
                    request.request_id,
                    failure,
                    "request_posted",
                    undeliverable=True,
                    dead_letter=entry,
                )
            else:
                self.crash.reached("after_post")
                if ref is not None:
                    await self.store.set_message_ref(request.request_id, ref.channel, ref.ts)
                    await self.store.count_delivered(request.request_id)
                return
        await self._reroute(request, failure)

    async def _reroute(self, request: ApprovalRequest, failure: DeliveryFailed) -> None:
        """Post it where someone will see it, saying why; then tell the administrators,
        whether or not the fallback took it. The fallback message is recorded only once
        they were told: a redelivery finds no message, so it posts and tells again rather
        than taking the request as delivered and telling nobody. (The first fallback
        message is then not the one updated; its buttons still decide the request.)"""
        rerouted, fallback_failure = None, None
        try:
            rerouted = await self.notifier.request_rerouted(request, failure)
        except DeliveryFailed as again:  # it stays dead-lettered; the admins still hear
            fallback_failure = again
            await self.store.record_delivery_failure(request.request_id, again, "request_rerouted")
        await self.notifier.request_undeliverable(request, failure, rerouted, fallback_failure)
        if rerouted is not None:
            await self.store.set_message_ref(request.request_id, rerouted.channel, rerouted.ts)
            await self.store.count_delivered(request.request_id)

    async def _run_finished(self, run_id: str, request_ids: str | None) -> WithAck | None:
        if request_ids is None:  # written before FINISH named them
            info, all_requests = await self.store.run_with_requests(run_id)
        else:
            ids = request_ids.split(",") if request_ids else []
            info, all_requests = await self.store.run_and_requests(run_id, ids)
        if info is None:
            return None
        summary = RunSummary(
            run_id=run_id,
            agent=info.agent,
            status=str(info.status),
            output=info.output,
            error=info.error,
            requested_by=info.requested_by,
        )
        # A request that never reached chat has no thread to answer in; waiting for it
        # would hold the outcome back for ever.
        requests = [r for r in all_requests if r.message_ts or r.delivery != "undeliverable"]
        try:
            await self.notifier.run_finished(summary, requests)
        except DeliveryFailed as failure:  # e.g. the thread's channel was archived: drop it
            await self.store.record_delivery_failure(run_id, failure, "run_finished")
            return None
        return self.store.delivered_with_ack(run_id) if requests else None
