"""The channels a member is in (`users.conversations`), for the App Home tab.

A route that names no reviewers may be decided by anyone in its channel. A list of what
one person may decide, shown outside that channel, must therefore know their channels:
otherwise it would offer a private channel's requests to someone who cannot see them.
Answers are kept briefly; a member whose channels cannot be listed in time (or has more
than the pages read) is shown none of those requests (fail closed).

The same holds for deciding: a click on the message proves its clicker is in the channel,
but a click in App Home does not, nor does a form submitted after its clicker left the
channel. `outside` says why someone may not decide such a request, or "": it asks Slack
afresh each time, since a decision must not rest on what someone's channels were.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from agent_host.approvals import ApprovalRequest
from bot.mrkdwn import channel_link

__all__ = ["UNCHECKED", "MemberChannels"]

log = logging.getLogger(__name__)

UNCHECKED = "countersign could not check your channels right now; try again in a moment"
PAGE = 1000  # users.conversations' largest page
MAX_PAGES = 10


class MemberChannels:
    def __init__(
        self,
        client: Any,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.cache_seconds, self.clock = client, cache_seconds, clock
        self._channels: dict[str, tuple[float, frozenset[str]]] = {}

    async def of(
        self, user_id: str, within: float, *, fresh: bool = False
    ) -> frozenset[str] | None:
        """The public and private channels `user_id` is in (private ones: those the bot is
        in too, which are the only ones it posts to); None when Slack could not say.
        `fresh`: asked of Slack now, not answered from what was kept."""
        cached = None if fresh else self._channels.get(user_id)
        if cached and self.clock() - cached[0] < self.cache_seconds:
            return cached[1]
        try:
            found = await asyncio.wait_for(self._list(user_id), max(within, 0.0))
        except Exception as exc:  # fail closed: unknown channels show nothing of theirs
            log.warning("users.conversations for %s failed: %s", user_id, exc)
            return None
        if found is not None:
            self._channels[user_id] = (self.clock(), found)
        return found

    async def outside(self, user_id: str, request: ApprovalRequest) -> str:
        """For a route without named reviewers (decided by the people in its channels): why
        `user_id` is not one of them, or "" (they are, or the route names its reviewers)."""
        if request.route.reviewers:
            return ""
        channels = await self.of(user_id, 1.0, fresh=True)  # as they are now: a decision
        if channels is None:
            return UNCHECKED
        where = request.channels()
        if channels.isdisjoint(where):
            return (
                f"this request is for the people in {channel_link(where[0])}, and you are not there"
            )
        return ""

    async def _list(self, user_id: str) -> frozenset[str] | None:
        channels: set[str] = set()
        cursor = ""
        for _ in range(MAX_PAGES):
            reply = await self.client.users_conversations(
                user=user_id,
                types="public_channel,private_channel",
                exclude_archived=True,
                limit=PAGE,
                cursor=cursor or None,
            )
            channels |= {c["id"] for c in reply.get("channels") or [] if isinstance(c, dict)}
            cursor = (reply.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return frozenset(channels)
        log.warning(
            "%s is in more than %d channels; their open routes are not listed",
            user_id,
            PAGE * MAX_PAGES,
        )
        return None
