"""The Slack side of the ladder's steps, for the outbox: the reminder and the escalated copies.

Each runs from an outbox entry the ladder wrote when it claimed the step, so it is tried
until the chat side takes it or refuses it for good. Whatever was posted is recorded
(`Ladder.record_reminder`, `Ladder.record_copy`) before the entry is acknowledged: a
redelivered entry finds it and posts nothing again. A request decided meanwhile gets no
reminder and no new copy; the copies it already has are brought up to date (a decision
taken while they were being posted may have missed them). The calls of a bulk message
share its thread: the first of a route's calls to come due reminds there for all of that
route's calls (`BulkBook.claim_reminder`), and is escalated for them: one note per
destination linking the message, not a copy of each call. That call's step is done as
long as any of them waits, even once it is decided itself: the others left it to it.
"""

from __future__ import annotations

import logging

from agent_host.approvals import ApprovalRequest, EscalatedCopy
from agent_host.approvals.notifier import Notifier
from agent_host.durable.bulks import BulkBook
from agent_host.durable.ladder import ESCALATED, REMINDED, Ladder
from agent_host.durable.store import RunStore
from agent_host.errors import DeliveryFailed, RetryLater

__all__ = ["LadderDelivery"]

log = logging.getLogger(__name__)


class LadderDelivery:
    def __init__(
        self, store: RunStore, notifier: Notifier, ladder: Ladder, book: BulkBook | None = None
    ) -> None:
        self.store, self.notifier, self.ladder = store, notifier, ladder
        self.book = book or BulkBook(store)

    async def remind(self, request: ApprovalRequest) -> None:
        """A reply in the thread of the request's message, mentioning its reviewers."""
        if request.reminder_ts or (request.decided and not request.only_in_bulk):
            return
        if not request.message_ts:
            if request.delivery == "undeliverable":
                return  # it never reached chat: there is no thread to remind in
            raise RetryLater(f"request {request.request_id} is not posted yet")
        if request.only_in_bulk:
            if not await self.book.claim_reminder(request):
                return  # another call of the message's (of its route) reminds in its thread
            if not await self._route_waits_in_bulk(request):
                return
        try:
            ref = await self.notifier.request_reminded(request)
        except DeliveryFailed as failure:  # e.g. its channel was archived
            await self._refused(request, [failure], "remind", REMINDED)
            return
        if ref is not None:
            await self.ladder.record_reminder(request.request_id, ref.ts)
            await self.store.count_delivered(request.request_id)

    async def escalate(self, request: ApprovalRequest) -> None:
        """A copy of the request at each of its escalation's destinations, linking the
        original; then every message of the request is brought up to date."""
        if request.decided and not request.only_in_bulk:
            if request.escalations:  # posted before a decision whose update missed them
                await self._refresh(request.request_id)
            return
        if not request.message_ts and request.delivery != "undeliverable":
            raise RetryLater(f"request {request.request_id} is not posted yet: nothing to link")
        if request.only_in_bulk:  # (decided or not: it escalates for its route's calls)
            await self._escalate_bulk(request)
            return
        refused: list[DeliveryFailed] = []
        try:
            targets = await self.notifier.escalation_targets(request)
        except DeliveryFailed as failure:  # e.g. a user group without members
            targets = []
            refused.append(failure)
        posted = {copy.to for copy in request.escalations}
        added = 0
        for target in targets:
            if target in posted:
                continue
            try:
                copy = await self.notifier.request_escalated(request, target)
            except DeliveryFailed as failure:  # one destination refusing stops no other
                refused.append(failure)
                continue
            if await self.ladder.record_copy(request.request_id, copy, self.store.clock()):
                added += 1
                await self.store.count_delivered(request.request_id)
        # Copies posted by an earlier delivery of this entry too: it may have stopped (a
        # crash, the admins' alert below waiting for a refused token) before its refresh.
        if added or posted:
            await self._refresh(request.request_id)
        await self._refused(request, refused, "escalate", ESCALATED)

    async def _refused(
        self,
        request: ApprovalRequest,
        refused: list[DeliveryFailed],
        step: str,
        notification: str,
    ) -> None:
        """A ladder step refused for good: recorded (audit, /metrics), and the
        administrators told, once for all of the step's destinations (the request still
        waits, and the step is not taken again: nothing else would say so)."""
        for failure in refused:
            await self.store.record_delivery_failure(request.request_id, failure, notification)
        if refused:
            await self.notifier.ladder_step_failed(request, step, refused)

    async def _escalate_bulk(self, request: ApprovalRequest) -> None:
        """One note per destination for the calls of the bulk message routed as `request`
        is, linking it; each call is also in the App Home tab, with its buttons, of its
        reviewers (and, on a route naming none, of whoever it was escalated to); another
        route's calls in the message follow their own ladder."""
        if not await self.book.claim_escalation(request):
            return  # another call of the same message and route escalates for all of them
        bulk = await self.book.get(request.bulk_id)
        if bulk is None:
            return
        route_id = request.route.route_id
        requests = [r for r in await self.book.requests(bulk) if r.route.route_id == route_id]
        if all(r.decided for r in requests):
            return
        refused: list[DeliveryFailed] = []
        try:
            targets = await self.notifier.escalation_targets(request)
        except DeliveryFailed as failure:
            targets = []
            refused.append(failure)
        done = await self.book.escalated_to(bulk.bulk_id, route_id)
        for target in targets:
            if target in done:
                continue
            try:
                ref = await self.notifier.bulk_escalated(bulk, requests, target)
            except DeliveryFailed as failure:  # one destination refusing stops no other
                refused.append(failure)
                continue
            # Each waiting call records the note as its own escalation (who was escalated to
            # may decide it, from the App Home tab), before the note counts as posted: a
            # redelivery after a crash between the two posts it again, never leaves a call
            # without it.
            note = EscalatedCopy(to=target, channel=ref.channel, ts=ref.ts)
            for waiting in (r for r in requests if not r.decided):
                await self.ladder.record_note(waiting.request_id, note, self.store.clock())
            await self.book.record_escalation(bulk.bulk_id, route_id, target, ref.ts)
            await self.store.count_delivered(request.request_id)
        await self._refused(request, refused, "escalate", "bulk_escalated")

    async def _route_waits_in_bulk(self, request: ApprovalRequest) -> bool:
        """Whether any call of `request`'s bulk message and route still waits."""
        if not request.decided:
            return True
        bulk = await self.book.get(request.bulk_id)
        if bulk is None:
            return False
        route_id = request.route.route_id
        return any(
            not r.decided for r in await self.book.requests(bulk) if r.route.route_id == route_id
        )

    async def _refresh(self, request_id: str) -> None:
        """Update every message of the request as it is now: the original shows where it
        was escalated, and a decision taken while the copies were being posted (whose own
        update may have missed them) reaches them too."""
        current = await self.store.get_request(request_id)
        if current is None:
            return
        try:
            await self.notifier.request_updated(current)
        except DeliveryFailed as failure:
            await self.store.record_delivery_failure(request_id, failure, "request_updated")
