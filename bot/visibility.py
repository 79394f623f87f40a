"""Who sees which approval request through `/approvals` (docs/SECURITY.md, section 7).

A member sees a request when it is routed, or one of its messages posted, to the channel
the command was typed in (everyone there sees that message anyway), when a copy of it was
escalated to them (they may decide it), or when the member may decide it as a *named*
reviewer — directly or through a user group — under the route's self-approval rule. Admins
see all.

A route without named reviewers may be decided by anyone in its channel. Being in a channel
cannot be checked without a Slack call per channel, and guessing would show a private
channel's requests in a DM, so such requests are seen only from their own channel.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from agent_host.approvals import ApprovalRequest
from agent_host.durable.store import PendingPage, RunStore
from bot.delivery import known
from bot.member_channels import among_its_people, escalated_to, escalation_counts
from bot.reviewers import SlackReviewerDirectory, judge

__all__ = ["Viewer", "Visibility"]

LOOKUP_BUDGET = 1.0  # seconds of user-group look-ups per command; the reply is due in 3 s
SCAN_BATCH = 50  # requests read per trip through the pending index
MAX_SCANS = 10  # trips per command; a sealed cursor continues where the scan stopped


class Visibility:
    def __init__(self, reviewers: SlackReviewerDirectory, admins: Collection[str]) -> None:
        self.reviewers, self.admins = reviewers, frozenset(admins)

    def viewer(self, user_id: str, channel_id: str) -> Viewer:
        """What one member sees, for the length of one command."""
        return Viewer(self.reviewers, user_id, channel_id, user_id in self.admins)


@dataclass
class Viewer:
    reviewers: SlackReviewerDirectory
    user_id: str
    channel_id: str
    admin: bool
    unsure: bool = False  # a reviewer group could not be listed: some requests may be missing
    refused: str = ""  # ... because Slack refused the app itself: what it said (its code)
    _groups: dict[str, frozenset[str] | None] = field(default_factory=dict)
    _deadline: float = field(default_factory=lambda: time.monotonic() + LOOKUP_BUDGET)

    def here(self, request: ApprovalRequest) -> bool:
        """Routed (or, after a fallback or an escalation, posted) to the channel the command
        was typed in."""
        channel = self.channel_id
        return bool(channel) and (
            channel == request.route.destination or channel in request.channels()
        )

    def shown_anyway(self, request: ApprovalRequest) -> bool:
        """Seen without a reviewer rule: posted here, or escalated to this member (to a
        user group: while they are in it, as learned by `visible`)."""
        return self.here(request) or self._escalated_now(request)

    def _escalated_now(self, request: ApprovalRequest) -> bool:
        counts = escalation_counts(self.user_id, request, self._groups)
        if counts is None:  # Slack could not list the group: not shown, and said so
            self.unsure = True
        return bool(counts)

    async def visible(self, requests: Sequence[ApprovalRequest]) -> list[ApprovalRequest]:
        """The requests this member may see, in their order."""
        if self.admin:
            return list(requests)
        escalated = [r for r in requests if escalated_to(self.user_id, r)]
        await self._learn({r.route.escalate_to for r in escalated})
        named = [r for r in requests if not self.shown_anyway(r) and r.route.reviewers]
        await self._learn_groups(named)
        decidable = set()
        for request in named:
            verdict = judge(self.user_id, request, self._groups)
            if verdict.allowed:
                decidable.add(request.request_id)
            elif any(self._groups.get(g, ()) is None for g in request.route.reviewers):
                self.unsure = True
        return [r for r in requests if self.shown_anyway(r) or r.request_id in decidable]

    async def _learn_groups(self, requests: Sequence[ApprovalRequest]) -> None:
        """The members of the reviewer groups these requests name, each group asked about
        once per viewer, all within the viewer's budget."""
        await self._learn({g for r in requests for g in r.route.reviewers})

    async def _learn(self, groups: set[str]) -> None:
        """The members of these user groups (other reviewers ignored), each asked once."""
        wanted = {g for g in groups if g.startswith("S")} - self._groups.keys()
        if wanted:
            within = self._deadline - time.monotonic()
            found, refused = known(await self.reviewers.memberships(wanted, within))
            self._groups |= found
            self.refused = self.refused or refused or ""

    async def decidable(
        self, requests: Sequence[ApprovalRequest], channels: frozenset[str] | None
    ) -> list[ApprovalRequest]:
        """The requests this member may decide now, in their order: what the approval
        service would let them decide (self-approval, named reviewers and their groups),
        not a quorum they already voted in, and, for a route that names no reviewers,
        only where they are in the channel its message is in (`channels`; None: unknown,
        so none of those). Admins get no more here than anyone: this is what they may
        decide, not what they may see."""
        open_ = [r for r in requests if not r.decided and self.user_id not in r.approvals]
        await self._learn_groups(open_)
        mine = []
        for request in open_:
            verdict = judge(self.user_id, request, self._groups)
            if not verdict.allowed:
                if any(self._groups.get(g, ()) is None for g in request.route.reviewers):
                    self.unsure = True
                continue
            if not request.route.reviewers:
                if channels is None:
                    self.unsure = True
                    continue
                if not among_its_people(self.user_id, request, channels):
                    continue
            mine.append(request)
        return mine

    async def sees(self, request: ApprovalRequest) -> bool:
        return bool(await self.visible([request]))

    async def page(
        self, store: RunStore, destination: str | None, cursor: str | None, limit: int
    ) -> PendingPage:
        """Up to `limit` visible pending requests after the store cursor `cursor`, and the
        store cursor of the next page. Hidden requests are skipped, not counted, so a page is
        full whenever enough visible requests exist; the scan is bounded, and when the bound
        stops it early, the next page continues from where it stopped."""
        shown: list[ApprovalRequest] = []
        for _ in range(MAX_SCANS):
            batch = await store.list_pending(destination, cursor, SCAN_BATCH)
            seen = await self.visible(batch.requests)
            for request in seen:
                shown.append(request)
                if len(shown) == limit:
                    more = request is not batch.requests[-1] or batch.next_cursor is not None
                    return PendingPage(shown, store.pending_cursor(request) if more else None)
            if batch.next_cursor is None:
                return PendingPage(shown, None)
            cursor = batch.next_cursor
        return PendingPage(shown, cursor)
