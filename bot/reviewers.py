"""The reviewer directory on Slack: is a user among a route's reviewers (users and user
groups)? The rules of who may decide live in `agent_host.approvals.service`.

User-group members are looked up with `usergroups.users.list` and cached briefly, so a
click usually costs no Slack call at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from agent_host.approvals import ApprovalRequest, Eligibility, may_decide

__all__ = ["ReviewerRules"]

log = logging.getLogger(__name__)


class ReviewerRules:
    def __init__(
        self,
        client: Any,
        *,
        cache_seconds: float = 60.0,
        timeout: float = 1.8,  # all groups are looked up at once, so this bounds the wait
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.cache_seconds, self.timeout, self.clock = (
            client,
            cache_seconds,
            timeout,
            clock,
        )
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}

    async def may_decide(self, user_id: str, request: ApprovalRequest) -> Eligibility:
        return await may_decide(self, user_id, request)

    async def is_reviewer(self, user_id: str, reviewers: tuple[str, ...]) -> Eligibility:
        if user_id in reviewers:
            return Eligibility(True)
        groups = [r for r in reviewers if r.startswith("S")]
        # All groups at once, under one budget: the click must be answered within 3 s.
        results = await asyncio.gather(*(self.group_members(g) for g in groups))
        if any(members is not None and user_id in members for members in results):
            return Eligibility(True)
        if any(members is None for members in results):
            return Eligibility(
                False,
                "countersign could not check the reviewer group right now; click again in a moment",
            )
        listed = ", ".join(_mention(r) for r in reviewers)
        return Eligibility(
            False, f"you are not a reviewer for this request; it can be decided by {listed}"
        )

    async def group_members(self, group_id: str) -> frozenset[str] | None:
        """The group's members (cached briefly); None when Slack could not say in time."""
        cached = self._groups.get(group_id)
        if cached and self.clock() - cached[0] < self.cache_seconds:
            return cached[1]
        try:
            reply = await asyncio.wait_for(
                self.client.usergroups_users_list(usergroup=group_id), self.timeout
            )
            members = frozenset(reply.get("users") or [])
        except Exception as exc:  # fail closed: an unknown membership allows nobody
            log.warning("usergroups.users.list %s failed: %s", group_id, exc)
            return cached[1] if cached else None
        self._groups[group_id] = (self.clock(), members)
        return members


def _mention(reviewer: str) -> str:
    return f"<!subteam^{reviewer}>" if reviewer.startswith("S") else f"<@{reviewer}>"
