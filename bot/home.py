"""The App Home tab: "waiting for you", published with `views.publish`.

Published when a person opens the tab (the `app_home_opened` event) and again after each
of their decisions, wherever they made it (a message, this tab, a form): the outbox
delivers every decision to the notifier, which hands it here (`after_decision`).

What is listed is what the approval service would let this person decide
(`bot.visibility.Viewer.decidable`): self-approval, named reviewers and their user groups,
a quorum they already voted in, and, for a route without named reviewers, only the
channels they are in. The scan of the pending index is bounded; the tab says when more
wait than it shows.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from agent_host.approvals import ApprovalRequest
from agent_host.durable.reviewer_log import ReviewerLog
from agent_host.durable.store import RunStore
from bot.blocks.home import RECENT_MAX, WAITING_MAX, home_view
from bot.delivery import Refused, listing_refused
from bot.listeners.after_ack import BackgroundTasks
from bot.member_channels import UNCHECKED, MemberChannels
from bot.permalinks import Permalinks
from bot.reviewers import SlackReviewerDirectory
from bot.visibility import Visibility

__all__ = ["HomeTab"]

log = logging.getLogger(__name__)

SCAN_BATCH = 50  # pending requests read per trip
MAX_SCANS = 10  # trips per view: at most 500 requests looked at, oldest first
CHANNELS_BUDGET = 1.0  # seconds for users.conversations
LINKS_BUDGET = 1.0  # seconds for chat.getPermalink
PUBLISH_TIMEOUT = 10.0  # the whole of one publish
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]+$")


class HomeTab:
    def __init__(
        self,
        client: Any,
        store: RunStore,
        reviewers: SlackReviewerDirectory,
        *,
        channels: MemberChannels,
        permalinks: Permalinks,
        decisions: ReviewerLog,
        tasks: BackgroundTasks,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.store = client, store
        self.visibility = Visibility(reviewers, admins=())  # admins decide like anyone
        self.channels, self.permalinks, self.decisions = channels, permalinks, decisions
        self.tasks, self.clock = tasks, clock
        self._refreshing: set[str] = set()
        self._again: set[str] = set()

    async def view(self, user_id: str, notice: str = "") -> dict[str, Any]:
        """The tab as `user_id` should see it now."""
        viewer = self.visibility.viewer(user_id, "")
        listed = await self.channels.of(user_id, CHANNELS_BUDGET)
        channels = None if isinstance(listed, Refused) else listed
        waiting: list[ApprovalRequest] = []
        cursor: str | None = None
        more = unchecked = False
        group_refused: str | None = None  # (a reviewer group's: viewer.refused)
        for scan in range(MAX_SCANS):
            page = await self.store.oldest_pending(cursor, SCAN_BATCH)
            found, unsure, escalation_refused = await self._still_theirs(
                user_id, await viewer.decidable(page.requests, channels)
            )
            waiting, unchecked = waiting + found, unchecked or unsure
            group_refused = group_refused or escalation_refused
            if len(waiting) > WAITING_MAX:
                more = True
                break
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            more = scan == MAX_SCANS - 1  # stopped by the bound: there may be more
        waiting = waiting[:WAITING_MAX]
        recent = await self._recent(user_id)
        links = await self.permalinks.of_requests(waiting, LINKS_BUDGET)
        # "Approve for this run" belongs to the people of a request's own channel (not to
        # someone it was escalated to): offered where the viewer's channels include it.
        standing = {r.request_id for r in waiting if channels and r.original_channel in channels}
        return home_view(
            user_id,
            waiting,
            recent,
            links,
            self.clock(),
            more=more,
            unsure=viewer.unsure or channels is None or unchecked,
            refused=_refused_note(listed, viewer.refused or group_refused or ""),
            notice=notice,
            standing=standing,
        )

    async def _still_theirs(
        self, user_id: str, requests: list[ApprovalRequest]
    ) -> tuple[list[ApprovalRequest], bool, str | None]:
        """The requests a click would let `user_id` decide now, whether some could not be
        checked, and what Slack said if it refused the app a user group's lookup. Their
        channels were listed up to a minute ago, and someone who left a private channel
        since must not see its requests. Checked as a click is
        (`MemberChannels.outside`), once per set of channels, with no call to Slack while
        the listing is a few seconds old; requests with named reviewers, or escalated to
        them, need no check (escalated to a user group: while they are in it)."""
        unnamed = [r for r in requests if not r.route.reviewers]
        still, group_refused = await self.channels.escalations_and_refusal(user_id, unnamed)
        escalated = {r.request_id for r, now in zip(unnamed, still, strict=True) if now}

        def people_of(request: ApprovalRequest) -> tuple[str, ...] | None:
            """The channels whose people decide `request`; None when membership does not
            matter (the route names its reviewers, or it was escalated to them and still
            counts: not once they left the user group it was escalated to)."""
            if request.route.reviewers or request.request_id in escalated:
                return None
            return tuple(request.channels())

        by_channels: dict[tuple[str, ...], ApprovalRequest] = {}
        for request in requests:
            if (where := people_of(request)) is not None:
                by_channels.setdefault(where, request)
        answers = await asyncio.gather(
            *(self.channels.outside(user_id, one) for one in by_channels.values())
        )
        refused = {where: why for where, why in zip(by_channels, answers, strict=True) if why}
        kept = [r for r in requests if people_of(r) not in refused]
        return kept, UNCHECKED in refused.values() or None in still, group_refused

    async def publish(self, user_id: str, notice: str = "") -> None:
        """Build and publish `user_id`'s tab; a failure is logged (the next one mends it)."""
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                view = await self.view(user_id, notice)
                await self.client.views_publish(user_id=user_id, view=view)
        except Exception as exc:
            log.warning("could not publish the App Home of %s: %s", user_id, exc)

    async def opened(self, user_id: str) -> None:
        """`user_id` opened the tab: publish it, and keep it fresh after their decisions."""
        try:
            await self.decisions.home_opened(user_id)
        except Exception as exc:  # the tab is still shown; only later refreshes are missed
            log.warning("could not note that %s opened the App Home: %s", user_id, exc)
        await self.publish(user_id)

    async def after_decision(self, request: ApprovalRequest) -> None:
        """A decision (or a quorum vote) on `request` was delivered: remember it for each
        person who made it (before the delivery is acknowledged, so it is never lost), then
        publish again, after (so the delivery never waits on Slack for it), the tabs of those
        who opened theirs lately; anyone else's is built fresh when they open it."""
        people = _deciders(request)
        at = request.decided_at if request.decided_at is not None else self.clock()
        seen = [await self.decisions.note(user_id, request.request_id, at) for user_id in people]
        for user_id, opened in zip(people, seen, strict=True):
            if opened:
                self.refresh(user_id)

    def refresh(self, user_id: str) -> None:
        """Publish `user_id`'s tab soon. A burst of decisions costs one publish at a time
        per person, and one more after the last of them."""
        if user_id in self._refreshing:
            self._again.add(user_id)
            return
        self._refreshing.add(user_id)
        self.tasks.spawn(self._refresh(user_id))

    async def _refresh(self, user_id: str) -> None:
        try:
            while True:
                self._again.discard(user_id)
                await self.publish(user_id)
                if user_id not in self._again:
                    return
        finally:
            self._refreshing.discard(user_id)

    async def _recent(self, user_id: str) -> list[ApprovalRequest]:
        ids = await self.decisions.recent(user_id, RECENT_MAX)
        return [r for r in await self.store.requests_by_id(ids) if r is not None]


def _refused_note(channels: frozenset[str] | Refused | None, groups_refused: str) -> str:
    """The tab's note when Slack refused the app a lookup it needed, or ""."""
    code = channels.code if isinstance(channels, Refused) else groups_refused
    return listing_refused(code) if code else ""


def _deciders(request: ApprovalRequest) -> list[str]:
    """The people whose decision or vote this is: not a standing approval (nobody clicked),
    the webhook or the sweeper."""
    decision = request.decision
    if decision is not None and decision.via == "standing":
        return []
    people = list(dict.fromkeys([*request.approvals, request.decided_by]))
    return [p for p in people if _SLACK_USER.match(p)]
