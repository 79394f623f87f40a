"""The Slack side of agent_host's notifier: posts, updates and thread replies.

Posting is paced per channel near Slack's one message per second; a 429 is answered by
waiting its Retry-After, 5xx and timeouts by retrying with backoff. When Slack stays
unavailable the call raises, and the outbox keeps the notification for later. An error no
retry can change (`bot.delivery.PERMANENT`) raises `DeliveryFailed` at once: the outbox
then reroutes the request to the default channel and this notifier tells the admins.

The escalation ladder: a reminder is a reply in the request's thread; an escalation posts
a copy, buttons included, to a channel, a user, or each member of a user group (a direct
message each, at most ESCALATION_DMS_MAX), linking the original (`chat.getPermalink`).
Every update of the request is made to the original and to each copy alike.

Many calls of one turn to one channel share one message (`bulk_posted`, `bulk_updated`); a
call of such a message posted on its own later ("Review one by one") goes in its thread,
and until then the call's own updates leave that message to `bulk_updated`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from agent_host.approvals import ApprovalRequest, EscalatedCopy
from agent_host.approvals.bulk import Bulk
from agent_host.approvals.notifier import MessageRef, RunSummary
from agent_host.approvals.requester import same_person
from agent_host.durable.every import Every
from agent_host.durable.outbox import RetryLater
from agent_host.durable.slots import set_aside
from agent_host.errors import DeliveryFailed
from bot import blocks, delivery
from bot.blocks import escalation

__all__ = ["ESCALATION_DMS_MAX", "ChannelPacer", "SlackNotifier"]

log = logging.getLogger(__name__)

TOKEN_REFUSED_SAID_EVERY = 60.0

# Direct messages for an escalation to a user group: a larger group gets its first members
# by id, and a warning in the log.
ESCALATION_DMS_MAX = 25
GroupMembers = Callable[[str], Awaitable[frozenset[str] | None]]  # None: Slack could not say


class ChannelPacer:
    """At most one post per `interval` seconds into each channel."""

    # A little over Slack's one message per second, so network jitter never lands two
    # posts inside the same second at Slack's end.
    def __init__(self, interval: float = 1.05) -> None:
        self.interval = interval
        self._next: dict[str, float] = {}
        self._went: dict[str, float] = {}  # when each channel's last post went

    async def wait_turn(self, channel: str) -> None:
        # Each post reserves the next free start in its channel, with no await between the
        # look and the reservation: two posts never take the same start.
        now = time.monotonic()
        start = max(now, self._next.get(channel, 0.0))
        self._next[channel] = start + self.interval
        if start > now:
            await _idle(start - now)
        # Its slot may have come back late (every one busy): the post reserved after it
        # still goes `interval` after it, and a Retry-After holds back those already waiting.
        while (
            wait := self._went.get(channel, -self.interval) + self.interval - time.monotonic()
        ) > 0:
            await _idle(wait)
        self._went[channel] = time.monotonic()

    def push_back(self, channel: str, seconds: float) -> None:
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + seconds)
        self._went[channel] = max(
            self._went.get(channel, -self.interval), time.monotonic() + seconds - self.interval
        )


class SlackNotifier:
    def __init__(
        self,
        client: Any,
        default_channel: str,
        *,
        pacer: ChannelPacer | None = None,
        attempts: int = 5,
        timeout: float = 10.0,
        backoff: float = 0.5,
        admins: Collection[str] = (),
        group_members: GroupMembers | None = None,
    ) -> None:
        self.client, self.default_channel = client, default_channel
        self.group_members = group_members  # the reviewer directory's, for escalations
        self.admins = tuple(sorted(admins))  # user ids told when a request cannot be delivered
        self.pacer = pacer or ChannelPacer()
        self.attempts, self.timeout, self.backoff = attempts, timeout, backoff
        # Told of every decision delivered here (the App Home tab refreshes its deciders).
        self.after_decision: Callable[[ApprovalRequest], Awaitable[None]] | None = None
        self._token_refused = Every(TOKEN_REFUSED_SAID_EVERY)  # logged once a minute

    def _say_once_a_minute(self, refused: str) -> None:
        """Every message fails alike while the token is refused: one error line a minute,
        not one per message and retry."""
        if self._token_refused.due():
            log.error("%s; nothing is posted to Slack until it is fixed", refused)

    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None:
        channel = request.route.destination or self.default_channel
        if not channel:
            log.warning(
                "request %s has no channel: set COUNTERSIGN_DEFAULT_CHANNEL", request.request_id
            )
            raise RetryLater("no channel to post to")
        text, body = blocks.approval_message(request)
        if request.bulk_ts:  # one by one, from its bulk message: in that message's thread
            channel, thread = request.message_channel or channel, request.bulk_ts
            reply = await self._call(
                channel,
                lambda: self.client.chat_postMessage(
                    channel=channel, thread_ts=thread, text=text, blocks=body
                ),
            )
            return MessageRef(reply["channel"], reply["ts"])
        reply = await self._call(
            channel, lambda: self.client.chat_postMessage(channel=channel, text=text, blocks=body)
        )
        return MessageRef(reply["channel"], reply["ts"])

    async def bulk_posted(self, bulk: Bulk, requests: list[ApprovalRequest]) -> MessageRef | None:
        channel = bulk.destination or self.default_channel
        if not channel:
            log.warning("bulk %s has no channel: set COUNTERSIGN_DEFAULT_CHANNEL", bulk.bulk_id)
            raise RetryLater("no channel to post to")
        text, body = blocks.bulk_message(bulk, requests)
        reply = await self._call(
            channel, lambda: self.client.chat_postMessage(channel=channel, text=text, blocks=body)
        )
        return MessageRef(reply["channel"], reply["ts"])

    async def bulk_updated(self, bulk: Bulk, requests: list[ApprovalRequest]) -> None:
        await self._update(bulk.channel, bulk.ts, *blocks.bulk_message(bulk, requests))

    async def bulk_escalated(
        self, bulk: Bulk, requests: list[ApprovalRequest], target: str
    ) -> MessageRef:
        """A note at `target` linking the bulk message (not a copy of each call)."""
        link = await self._link(bulk.bulk_id, bulk.channel, bulk.ts)
        text = escalation.bulk_note(bulk, requests, link)
        reply = await self._call(
            target, lambda: self.client.chat_postMessage(channel=target, text=text)
        )
        return MessageRef(reply["channel"], reply["ts"])

    async def request_updated(self, request: ApprovalRequest) -> None:
        """The original message and every escalated copy; one refused for good (deleted)
        stops none of the others, and is raised once they are done."""
        if not request.message_ts and not request.escalations:
            raise RetryLater(f"request {request.request_id} is not posted yet")
        render = blocks.decided_message if request.decided else blocks.approval_message
        text, body = render(request)
        refused: DeliveryFailed | None = None
        if request.message_ts and not request.only_in_bulk:  # (that is `bulk_updated`'s)
            original = _noted(request, text, body)
            if request.escalations:
                original = escalation.with_note(escalation.escalated_note(request), *original)
            try:
                await self._update(request.message_channel, request.message_ts, *original)
            except DeliveryFailed as failure:
                refused = failure
        if request.escalations and not request.decided:
            text, body = _as_copy(request)
        for copy in request.escalations:
            note = escalation.copy_note(request, copy.link)
            try:
                await self._update(copy.channel, copy.ts, *escalation.with_note(note, text, body))
            except DeliveryFailed as failure:
                refused = refused or failure
        if self.after_decision is not None:
            try:
                await self.after_decision(request)
            except Exception as exc:  # the message is updated; the tab mends on next open
                log.warning("after the decision on %s: %s", request.request_id, exc)
        if refused is not None:
            raise refused

    async def _update(self, channel: str, ts: str, text: str, body: list[Any]) -> None:
        await self._call(
            None,
            lambda: self.client.chat_update(channel=channel, ts=ts, text=text, blocks=body),
            where=channel,
        )

    async def request_reminded(self, request: ApprovalRequest) -> MessageRef | None:
        """A reply in the request's thread that mentions the route's reviewers."""
        text = escalation.reminder_text(request)
        # A call of a bulk message, even one posted on its own in its thread: that thread.
        channel, thread = request.message_channel, request.bulk_ts or request.message_ts
        reply = await self._call(
            channel,
            lambda: self.client.chat_postMessage(channel=channel, thread_ts=thread, text=text),
        )
        return MessageRef(reply["channel"], reply["ts"])

    async def escalation_targets(self, request: ApprovalRequest) -> list[str]:
        """The channel or user escalated to, or a user group's members (not the requester
        where they may not decide their own request)."""
        target = request.route.escalate_to
        if not target.startswith("S"):
            if same_person(target, request.requested_by) and not request.route.allow_self_approval:
                raise DeliveryFailed(
                    "escalated_to_requester",
                    target,
                    "the requester may not decide their own request",
                )
            return [target] if target else []
        if self.group_members is None:
            raise DeliveryFailed("no_reviewer_directory", target)
        members = await self.group_members(target)
        if members is None:
            raise RetryLater(f"could not list the members of user group {target}")
        people = sorted(
            m
            for m in members
            if not same_person(m, request.requested_by) or request.route.allow_self_approval
        )
        if not people:
            raise DeliveryFailed("no_members", target, "the user group has nobody to tell")
        if len(people) > ESCALATION_DMS_MAX:
            log.warning(
                "request %s: user group %s has %d members; escalated to the first %d",
                request.request_id,
                target,
                len(people),
                ESCALATION_DMS_MAX,
            )
        return people[:ESCALATION_DMS_MAX]

    async def request_escalated(self, request: ApprovalRequest, target: str) -> EscalatedCopy:
        """A copy with its buttons at `target` (a channel, or a user: their DM with the
        app), under a line linking the original message."""
        link = await self._permalink(request)
        note = escalation.copy_note(request, link)
        text, body = escalation.with_note(note, *_as_copy(request))
        reply = await self._call(
            target,
            lambda: self.client.chat_postMessage(channel=target, text=text, blocks=body),
        )
        return EscalatedCopy(to=target, channel=reply["channel"], ts=reply["ts"], link=link)

    async def _permalink(self, request: ApprovalRequest) -> str:
        """The original message's permalink; "" if it has none (never posted, or deleted)."""
        return await self._link(request.request_id, request.message_channel, request.message_ts)

    async def _link(self, what: str, channel: str, ts: str) -> str:
        if not ts:
            return ""
        try:
            reply = await self._call(
                None, lambda: self.client.chat_getPermalink(channel=channel, message_ts=ts)
            )
        except DeliveryFailed as failure:
            log.warning("no permalink for %s: %s", what, failure)
            return ""
        return escalation.safe_link(str(reply.get("permalink") or ""))

    async def run_finished(self, run: RunSummary, requests: list[ApprovalRequest]) -> None:
        requests = [r for r in requests if r.asked]
        if any(not r.message_ts for r in requests):
            # Another process may still be posting a request (paced, or Slack is slow):
            # the outcome belongs in its thread, so wait for it rather than drop it.
            raise RetryLater(f"run {run.run_id}: a request is not posted yet")
        posted = requests
        if not posted:
            return
        last = posted[-1]
        text = blocks.outcome_message(run, requests)
        thread = last.bulk_ts or last.message_ts  # a bulk's calls: in the bulk's thread
        await self._call(
            last.message_channel,
            lambda: self.client.chat_postMessage(
                channel=last.message_channel, thread_ts=thread, text=text
            ),
        )

    async def request_rerouted(
        self, request: ApprovalRequest, failure: DeliveryFailed
    ) -> MessageRef | None:
        """The request in the default channel, under a line saying why it is there."""
        fallback = self.default_channel
        if not fallback or fallback == failure.channel:
            return None  # nowhere else to go: the admins are told
        channel = failure.channel or request.route.destination
        if not request.route.reviewers and not await delivery.is_public(self.client, channel):
            # Its channel's people decide it: the default channel's would be others.
            raise DeliveryFailed(delivery.NOT_REROUTED, channel)
        rerouted = replace(
            request,
            delivery="undeliverable",
            delivery_error=request.delivery_error or failure.code,
        )
        # Without "Approve for this run": the default channel's people are not the route's.
        text, body = _noted(rerouted, *blocks.approval_message(rerouted, standing=False))
        reply = await self._call(
            fallback,
            lambda: self.client.chat_postMessage(channel=fallback, text=text, blocks=body),
        )
        return MessageRef(reply["channel"], reply["ts"])

    async def request_undeliverable(
        self,
        request: ApprovalRequest,
        failure: DeliveryFailed,
        rerouted: MessageRef | None,
        fallback_failure: DeliveryFailed | None = None,
    ) -> None:
        """A direct message to every admin (posting to a user id opens the app's DM)."""
        text = delivery.admin_alert(
            request,
            failure,
            rerouted.channel if rerouted else None,
            fallback_failure.code if fallback_failure else "",
        )
        await self._tell_admins(text, f"request {request.request_id} is undeliverable ({failure})")

    async def ladder_step_failed(
        self, request: ApprovalRequest, step: str, failures: list[DeliveryFailed]
    ) -> None:
        text = delivery.ladder_alert(request, step, failures)
        codes = ", ".join(f.code for f in failures)
        what = f"request {request.request_id}'s {step} was refused ({codes})"
        await self._tell_admins(text, what)

    async def _tell_admins(self, text: str, what: str) -> None:
        """`text` in a direct message to every admin; logged when there is nobody to tell
        or an admin cannot be told (one who cannot stops none of the others). While Slack
        refuses the token itself, nobody at all can be told: that is raised (TokenRefused),
        so the entry is delivered again once it is fixed, rather than told to nobody."""
        if not self.admins:
            log.error("%s, and no COUNTERSIGN_ADMINS to tell", what)
        for admin in self.admins:
            try:
                await self._call(
                    admin, functools.partial(self.client.chat_postMessage, channel=admin, text=text)
                )
            except delivery.TokenRefused:
                raise
            except Exception as exc:  # the last resort must not stop the others
                log.error("could not tell admin %s that %s: %s", admin, what, exc)

    async def post_ephemeral(self, channel: str, user: str, text: str) -> None:
        """An answer only `user` sees; retried like every other call (they must learn why)."""
        await self._call(
            None, lambda: self.client.chat_postEphemeral(channel=channel, user=user, text=text)
        )

    async def _call(
        self, channel: str | None, send: Callable[[], Awaitable[Any]], *, where: str = ""
    ) -> Any:
        """`send`, paced into `channel` (None: not paced) and retried while Slack says "not
        now"; DeliveryFailed, naming `where` (default: `channel`), when it says "never"."""
        for attempt in range(1, self.attempts + 1):
            if channel:
                await self.pacer.wait_turn(channel)
            try:
                async with asyncio.timeout(self.timeout):
                    return await send()
            except SlackApiError as exc:
                if (refused := delivery.token_refused(exc)) is not None:
                    self._say_once_a_minute(refused)  # the app's fault, not this message's
                    raise delivery.TokenRefused(f"{refused}; posted once it is fixed") from exc
                if not delivery.is_retryable(exc):
                    raise delivery.permanent_failure(exc, where or channel or "") from exc
                if exc.response.status_code == 429:
                    wait = delivery.retry_after(exc)
                    if channel:
                        self.pacer.push_back(channel, wait)
                    else:
                        await _idle(wait)
                    continue
                if attempt == self.attempts:  # e.g. a 500 each time: later, not never
                    raise RetryLater(f"Slack kept failing: {exc}") from exc
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                if attempt == self.attempts:
                    raise RetryLater(f"Slack unreachable: {exc}") from exc
            await _idle(self.backoff * 2 ** (attempt - 1))
        raise RetryLater("Slack kept answering 429; will retry")


def _as_copy(request: ApprovalRequest) -> tuple[str, list[Any]]:
    """An escalated copy's text and blocks: decided, or pending without "Approve for this
    run" (the people of the route's own channel give that, on its own message)."""
    if request.decided:
        return blocks.decided_message(request)
    return blocks.approval_message(request, standing=False)


async def _idle(seconds: float) -> None:
    """A wait for Slack's pace: the outbox entry's slot is free for another meanwhile."""
    async with set_aside():
        await asyncio.sleep(seconds)


def _noted(request: ApprovalRequest, text: str, body: list[Any]) -> tuple[str, list[Any]]:
    """A request posted outside its routed channel keeps saying why, updates included."""
    if request.delivery != "undeliverable" or not request.route.destination:
        return text, body
    if request.message_channel == request.route.destination:
        return text, body
    note = delivery.rerouted_note(
        DeliveryFailed(request.delivery_error or "undeliverable", request.route.destination)
    )
    if len(body) >= blocks.MESSAGE_BLOCKS_MAX:
        return f"{note}\n{text}", body
    return f"{note}\n{text}", [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": note}]},
        *body,
    ]
