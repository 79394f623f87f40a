"""The channels a member is in (`users.conversations`), and who counts as one of a
request's people.

A route that names no reviewers may be decided by the people of its request's channels:
anyone who can click there (every member of the workspace, in a public channel), and
whoever it was escalated to. A list of what one person may decide, shown outside those
channels (the App Home tab), must therefore know their channels: otherwise it would offer
a private channel's requests to someone who cannot see them. Answers are kept briefly; a
member whose channels cannot be listed in time (or has more than the pages read) is shown
none of those requests (fail closed).

The same holds for deciding: a click on the message proves its clicker can click there,
but a click in App Home does not, nor does a form submitted after its clicker left a
private channel. `outside` says why someone may not decide such a request, or "", from
channels listed at most DECISION_MAX_AGE seconds before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from agent_host.approvals import ApprovalRequest
from bot.mrkdwn import channel_link

__all__ = ["UNCHECKED", "MemberChannels", "among_its_people"]

log = logging.getLogger(__name__)

T = TypeVar("T")

UNCHECKED = "countersign could not check your channels right now; try again in a moment"
DECISION_MAX_AGE = 5.0  # seconds: how old the channels a decision rests on may be
LOOKUP_SECONDS = 1.0  # for Slack to say
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
        self._public: dict[str, tuple[float, bool]] = {}  # channel -> (when, is public)

    async def of(
        self, user_id: str, within: float, *, max_age: float | None = None
    ) -> frozenset[str] | None:
        """The public and private channels `user_id` is in (private ones: those the bot is
        in too, which are the only ones it posts to), as listed at most `max_age` seconds
        ago (default: `cache_seconds`); None when Slack could not say."""
        age = self.cache_seconds if max_age is None else max_age
        if (kept := self._kept(self._channels, user_id, age)) is not None:
            return kept
        try:
            found = await asyncio.wait_for(self._list(user_id), max(within, 0.0))
        except Exception as exc:  # fail closed: unknown channels show nothing of theirs
            log.warning("users.conversations for %s failed: %s", user_id, exc)
            return None
        if found is not None:
            self._channels[user_id] = (self.clock(), found)
        return found

    async def outside(self, user_id: str, request: ApprovalRequest) -> str:
        """For a route without named reviewers (decided by the people of its channels): why
        `user_id` is not one of them, or "" (they are, or the route names its reviewers).

        Whoever it was escalated to needs no lookup; a member listed in the last
        DECISION_MAX_AGE seconds neither. Otherwise Slack is asked, within LOOKUP_SECONDS,
        both whether they are in one of its channels now and whether one is public."""
        if request.route.reviewers or escalated_to(user_id, request):
            return ""
        where = request.channels()
        listed = self._kept(self._channels, user_id, DECISION_MAX_AGE)
        if listed is not None and not listed.isdisjoint(where):
            return ""
        try:
            async with asyncio.timeout(LOOKUP_SECONDS):
                channels, public = await asyncio.gather(
                    self.of(user_id, LOOKUP_SECONDS, max_age=0), self._any_public(where)
                )
        except TimeoutError:
            return UNCHECKED
        if public or (channels is not None and not channels.isdisjoint(where)):
            return ""  # in one of its channels, or one anyone in the workspace can click in
        if channels is None or public is None:
            return UNCHECKED
        return f"this request is for the people in {channel_link(where[0])}, and you are not there"

    async def _any_public(self, channels: list[str]) -> bool | None:
        """Whether any of `channels` is a public channel; None when Slack could not say."""
        for channel in channels:
            if channel.startswith("D"):  # a direct message: never public
                continue
            public = await self._is_public(channel)
            if public is None or public:
                return public
        return False

    async def _is_public(self, channel: str) -> bool | None:
        """Whether `channel` is public (`conversations.info`, kept DECISION_MAX_AGE
        seconds): only when Slack says it is not private; None when Slack could not say."""
        if (kept := self._kept(self._public, channel, DECISION_MAX_AGE)) is not None:
            return kept
        try:
            reply = await self.client.conversations_info(channel=channel)
        except Exception as exc:  # fail closed
            log.warning("conversations.info for %s failed: %s", channel, exc)
            return None
        found = reply.get("channel") or {}
        public = found.get("is_private") is False and not (
            found.get("is_im") or found.get("is_mpim")
        )
        self._public[channel] = (self.clock(), public)
        return public

    def _kept(self, answers: dict[str, tuple[float, T]], key: str, max_age: float) -> T | None:
        """What Slack answered for `key` at most `max_age` seconds ago, or None."""
        answer = answers.get(key)
        return answer[1] if answer is not None and self.clock() - answer[0] < max_age else None

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


def escalated_to(user_id: str, request: ApprovalRequest) -> bool:
    """Whether a copy of `request` was escalated to `user_id` (in their direct messages)."""
    return any(copy.to == user_id for copy in request.escalations)


def among_its_people(user_id: str, request: ApprovalRequest, channels: frozenset[str]) -> bool:
    """Whether `user_id`, in `channels`, is one of the people of `request`: escalated to
    them, or in one of the channels its messages are in."""
    return escalated_to(user_id, request) or not channels.isdisjoint(request.channels())
