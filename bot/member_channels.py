"""The channels a member is in (`users.conversations`), the members of a channel
(`conversations.members`), and who counts as one of a request's people.

A route that names no reviewers may be decided by the people of its request's channels:
anyone who can click there (every member of the workspace, in a public channel), and
whoever it was escalated to (for a user group's copies: its members still in it). A list
of what one person may decide, shown outside those channels (the App Home tab), must
therefore know their channels: otherwise it would offer a private channel's requests to
someone who cannot see them. Answers are kept briefly; a
member whose channels cannot be listed in time (or has more than the pages read) is shown
none of those requests (fail closed).

The same holds for deciding: a click on the message proves its clicker can click there,
but a click in App Home does not, nor does a form submitted after its clicker left a
private channel, nor a click on a copy in someone's direct messages after they left the
group it was escalated to. `outside` says why someone may not decide such a request, or "", from
what Slack said at most DECISION_MAX_AGE seconds before: the decider's channels (as the
tab listed them), else whether the request's channels are public and who is in them. A
channel's answers serve everyone deciding there, so a busy channel stays well within
Slack's rate limits (`conversations.members`: Tier 4, 100 calls a minute).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from slack_sdk.errors import SlackApiError

from agent_host.approvals import ApprovalRequest, EscalatedCopy
from agent_host.durable.every import Every
from bot.delivery import (
    APP_REFUSED_SAID_EVERY,
    Refused,
    app_refused,
    known,
    lookup_refused,
    say_app_refused,
)
from bot.mrkdwn import channel_link

__all__ = [
    "GROUP_UNCHECKED",
    "UNCHECKED",
    "GroupMembers",
    "MemberChannels",
    "among_its_people",
    "dm_copy_in",
    "escalation_counts",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class GroupMembers(Protocol):
    """A user group's members as Slack listed them at most `max_age` seconds ago (default:
    a listing's age), or now; None when Slack could not say."""

    def __call__(
        self, group_id: str, max_age: float | None = None
    ) -> Awaitable[frozenset[str] | Refused | None]: ...


UNCHECKED = "countersign could not check your channels right now; try again in a moment"
GROUP_UNCHECKED = (
    "countersign could not check the members of the user group this request was escalated "
    "to right now; try again in a moment"
)
DECISION_MAX_AGE = 5.0  # seconds: how old the channels a decision rests on may be
LOOKUP_SECONDS = 1.0  # for Slack to say
PAGE = 1000  # the largest page of users.conversations and conversations.members
MAX_PAGES = 10


class _RanOutOfTime(Exception):
    """A shared lookup got no answer from Slack within LOOKUP_SECONDS."""


class MemberChannels:
    def __init__(
        self,
        client: Any,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        group_members: GroupMembers | None = None,
    ) -> None:
        self.client, self.cache_seconds, self.clock = client, cache_seconds, clock
        # A user group's members now (None: Slack could not say): a copy escalated to a
        # group's members counts for those still in it. Without it, for nobody.
        self.group_members = group_members
        self._channels: dict[str, tuple[float, frozenset[str]]] = {}
        self._public: dict[str, tuple[float, bool]] = {}  # channel -> (when, is public)
        self._members: dict[str, tuple[float, frozenset[str]]] = {}  # channel -> (when, who)
        # Lookups under way, by (what, channel): when each began, and its answer to come.
        self._asking: dict[tuple[str, str], tuple[float, asyncio.Future[Any]]] = {}
        self._app_refused_said = Every(APP_REFUSED_SAID_EVERY, lambda: self.clock())

    async def of(
        self, user_id: str, within: float, *, max_age: float | None = None
    ) -> frozenset[str] | Refused | None:
        """The public and private channels `user_id` is in (private ones: those the bot is
        in too, which are the only ones it posts to), as listed at most `max_age` seconds
        ago (default: `cache_seconds`); None when Slack could not say, Refused when it
        refused the app itself."""
        age = self.cache_seconds if max_age is None else max_age
        if (kept := self._kept(self._channels, user_id, age)) is not None:
            return kept
        try:
            async with asyncio.timeout(max(within, 0.0)):
                found = await self._list(user_id)
        except Exception as exc:  # fail closed: unknown channels show nothing of theirs
            then = "Until then, App Home lists no request decided by a channel's people."
            return self._failed("users.conversations", user_id, exc, then, once_for_all=True)
        if found is not None:
            self._channels[user_id] = (self.clock(), found)
        return found

    async def outside(
        self, user_id: str, request: ApprovalRequest, *, escalation: bool = True
    ) -> str:
        """For a route without named reviewers (decided by the people of its channels): why
        `user_id` is not one of them, or "" (they are, or the route names its reviewers).

        With `escalation`, whoever it was escalated to counts too: a person, needing no
        lookup; a user group's members while they are in it (cached briefly, as for
        reviewer groups); a channel's people, as one of the request's channels. Without
        it, only the original's channel counts. A member listed in the last
        DECISION_MAX_AGE seconds needs no lookup either. Otherwise Slack is asked, within
        LOOKUP_SECONDS, whether one of those channels is public, or has them among its
        members now. Those answers are the channel's, kept
        DECISION_MAX_AGE seconds and shared by everyone deciding there: a busy channel costs
        Slack a few calls a minute, not one a click."""
        if request.route.reviewers:
            return ""
        escalated: bool | None = False
        group_refused: str | None = None
        if escalation:
            ([escalated], group_refused) = await self.escalations_and_refusal(
                user_id, [request], DECISION_MAX_AGE
            )
        if escalated:
            return ""
        # Without the escalation, the original's channel alone (not its copies' channels).
        where = request.channels() if escalation else [request.original_channel]
        listed = self._kept(self._channels, user_id, DECISION_MAX_AGE)
        if listed is not None and not listed.isdisjoint(where):
            return ""
        try:
            async with asyncio.timeout(LOOKUP_SECONDS):
                answers = await asyncio.gather(*(self._may_click(user_id, c) for c in where))
        except TimeoutError:
            return UNCHECKED
        if True in answers:
            return ""  # in one of its channels, or one anyone in the workspace can click in
        if refused := next((a for a in answers if isinstance(a, Refused)), None):
            return (
                f"{lookup_refused('look up who is in the channels of this request', refused.code)}."
            )
        if None in answers:
            return UNCHECKED
        if escalated is None and group_refused is not None:
            what = "list who is in the user group this request was escalated to"
            return f"{lookup_refused(what, group_refused)}."
        if escalated is None:  # their one claim is the group, which Slack could not list
            return GROUP_UNCHECKED
        return f"this request is for the people in {channel_link(where[0])}, and you are not there"

    async def escalated_to_now(self, user_id: str, request: ApprovalRequest) -> bool | None:
        """Whether a copy of `request` was escalated to `user_id` and still counts: sent to
        them, or to a user group they are still in; None when Slack could not list the
        group's members (which counts as no). A group's members as listed at most
        DECISION_MAX_AGE seconds before: this is what a decision rests on."""
        return (await self.escalations_now(user_id, [request], max_age=DECISION_MAX_AGE))[0]

    async def escalations_now(
        self,
        user_id: str,
        requests: Sequence[ApprovalRequest],
        *,
        max_age: float | None = None,
    ) -> list[bool | None]:
        """`escalated_to_now` for each of `requests`, each user group asked about once
        (`usergroups.users.list` is one of Slack's slower tiers: about 20 calls a minute),
        as listed at most `max_age` seconds before (default: as for a listing)."""
        return (await self.escalations_and_refusal(user_id, requests, max_age))[0]

    async def escalations_and_refusal(
        self, user_id: str, requests: Sequence[ApprovalRequest], max_age: float | None = None
    ) -> tuple[list[bool | None], str | None]:
        """`escalations_now`, and what Slack said if it refused the app a group's lookup."""
        groups = sorted(
            {
                r.route.escalate_to
                for r in requests
                if r.route.escalate_to.startswith("S") and escalated_to(user_id, r)
            }
        )
        ask = self.group_members
        found = await asyncio.gather(*(ask(g, max_age) for g in groups)) if ask is not None else []
        members, refused = known(dict(zip(groups, found, strict=True)))
        return [escalation_counts(user_id, request, members) for request in requests], refused

    async def _may_click(self, user_id: str, channel: str) -> bool | Refused | None:
        """Whether `user_id` can click in `channel` now: it is public, or they are among its
        members; None when Slack could not say, Refused when it refused the app. Answers
        asked at most DECISION_MAX_AGE seconds ago may let them; only answers asked since
        this check began refuse them (they may have just joined). A direct message counts
        as neither: whoever it was escalated to needs no lookup."""
        if channel.startswith("D"):
            return False
        began = self.clock()
        may = await self._clicks_in(user_id, channel, began - DECISION_MAX_AGE)
        return await self._clicks_in(user_id, channel, began) if may is False else may

    async def _clicks_in(self, user_id: str, channel: str, since: float) -> bool | Refused | None:
        public = await self._answer(self._public, channel, self._ask_public, since)
        if public is True:
            return True
        members = await self._answer(self._members, channel, self._list_members, since)
        if isinstance(members, frozenset) and user_id in members:
            return True
        if refused := next((a for a in (public, members) if isinstance(a, Refused)), None):
            return refused
        return None if public is None or members is None else False

    async def _answer(
        self,
        answers: dict[str, tuple[float, T]],
        channel: str,
        ask: Callable[[str], Awaitable[T | Refused | None]],
        since: float,
        *,
        joined: bool = False,
    ) -> T | Refused | None:
        """What Slack said of `channel` (through `ask`) when asked at `since` or later: kept
        in `answers` with the time it was asked, or asked now. One lookup at a time: whoever
        needs it meanwhile waits for the same answer, and asks again when that lookup ran out
        of its time (just as they came); a lookup Slack refused is not asked again. None when
        Slack could not say; Refused when it refused the app (not kept)."""
        kept = answers.get(channel)
        if kept is not None and kept[0] >= since:
            return kept[1]
        key = (ask.__name__, channel)
        asking = self._asking.get(key)
        joining = asking is not None and asking[0] >= since and not asking[1].done()
        if asking is None or not joining:
            began = self.clock()
            task = asyncio.ensure_future(self._ask_and_keep(answers, channel, ask, began))
            asking = self._asking[key] = (began, task)
            task.add_done_callback(lambda _: self._forget(key, task))
        try:
            found: T | Refused | None = await asyncio.shield(asking[1])  # a waiter's timeout
        except _RanOutOfTime:
            if joining and not joined:  # as this decision came: one of its own
                return await self._answer(answers, channel, ask, since, joined=True)
            return None
        return found

    async def _ask_and_keep(
        self,
        answers: dict[str, tuple[float, Any]],
        channel: str,
        ask: Callable[[str], Awaitable[T | Refused | None]],
        began: float,
    ) -> T | Refused | None:
        """`ask`, given LOOKUP_SECONDS (a stalled lookup holds up nobody after it: past them
        it raises _RanOutOfTime), its answer kept with the time it was asked."""
        try:
            async with asyncio.timeout(LOOKUP_SECONDS):
                found = await ask(channel)
        except TimeoutError:
            log.warning("%s for %s took over %gs", ask.__name__, channel, LOOKUP_SECONDS)
            raise _RanOutOfTime from None
        kept = answers.get(channel)
        known = found is not None and not isinstance(found, Refused)
        if known and (kept is None or kept[0] <= began):
            answers[channel] = (began, found)
        return found

    def _forget(self, key: tuple[str, str], task: asyncio.Future[Any]) -> None:
        if (asking := self._asking.get(key)) is not None and asking[1] is task:
            del self._asking[key]
        if not task.cancelled():
            task.exception()  # read, even when every waiter gave up before it ended

    async def _ask_public(self, channel: str) -> bool | Refused | None:
        """Whether `channel` is public (`conversations.info`): only when Slack says it is
        not private; None when Slack could not say, Refused when it refused the app."""
        try:
            reply = await self.client.conversations_info(channel=channel)
        except Exception as exc:  # fail closed
            return self._failed("conversations.info", channel, exc)
        found = reply.get("channel") or {}
        return found.get("is_private") is False and not (found.get("is_im") or found.get("is_mpim"))

    async def _list_members(self, channel: str) -> frozenset[str] | Refused | None:
        """Everyone in `channel` (`conversations.members`), or None when Slack could not say
        or it has more members than the pages read; Refused when it refused the app."""
        try:
            found = await self._all_pages(
                lambda cursor: self.client.conversations_members(
                    channel=channel, limit=PAGE, cursor=cursor
                ),
                lambda reply: (m for m in reply.get("members") or [] if isinstance(m, str)),
            )
        except Exception as exc:  # fail closed
            return self._failed("conversations.members", channel, exc)
        if found is None:
            log.warning("%s has more than %d members; none is checked", channel, PAGE * MAX_PAGES)
        return found

    def _failed(
        self,
        method: str,
        channel: str,
        exc: Exception,
        then: str = "Until then, whoever decides a request as one of its channel's people is "
        "refused.",
        *,
        once_for_all: bool = False,
    ) -> Refused | None:
        """A lookup's failure logged: as an error an operator must act on, once a minute
        (per channel; `once_for_all`: per method, the same refusal for everyone), when Slack
        refuses the app itself (Refused); as a warning otherwise (None)."""
        if not isinstance(exc, SlackApiError) or (code := app_refused(exc)) is None:
            log.warning("%s for %s failed: %s", method, channel, exc)
            return None
        key = method if once_for_all else channel
        say_app_refused(self._app_refused_said, key, f"{method} for {channel}", exc, then)
        return Refused(code)

    def _kept(self, answers: dict[str, tuple[float, T]], key: str, max_age: float) -> T | None:
        """What Slack answered for `key` at most `max_age` seconds ago, or None."""
        answer = answers.get(key)
        return answer[1] if answer is not None and self.clock() - answer[0] < max_age else None

    async def _list(self, user_id: str) -> frozenset[str] | None:
        found = await self._all_pages(
            lambda cursor: self.client.users_conversations(
                user=user_id,
                types="public_channel,private_channel",
                exclude_archived=True,
                limit=PAGE,
                cursor=cursor,
            ),
            lambda reply: (c["id"] for c in reply.get("channels") or [] if isinstance(c, dict)),
        )
        if found is None:
            log.warning(
                "%s is in more than %d channels; their open routes are not listed",
                user_id,
                PAGE * MAX_PAGES,
            )
        return found

    @staticmethod
    async def _all_pages(
        call: Callable[[str | None], Awaitable[Any]], items: Callable[[Any], Iterable[str]]
    ) -> frozenset[str] | None:
        """The `items` of every page `call(cursor)` answers, at most MAX_PAGES of them; None
        when there are more."""
        found: set[str] = set()
        cursor = ""
        for _ in range(MAX_PAGES):
            reply = await call(cursor or None)
            found.update(items(reply))
            cursor = (reply.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return frozenset(found)
        return None


def escalated_to(user_id: str, request: ApprovalRequest) -> bool:
    """Whether a copy of `request` (or its bulk message's note) was escalated to
    `user_id`."""
    return user_id in request.escalated_to()


def escalation_counts(
    user_id: str, request: ApprovalRequest, members: Mapping[str, frozenset[str] | None]
) -> bool | None:
    """Whether a copy of `request` was escalated to `user_id` and still counts, given the
    members of user groups (None for one Slack could not list): sent to them, or to a user
    group they are still in; None when that group's members are not known."""
    if not escalated_to(user_id, request):
        return False
    group = request.route.escalate_to
    if not group.startswith("S"):
        return True
    known = members.get(group)
    return None if known is None else user_id in known


def dm_copy_in(channel: str, request: ApprovalRequest) -> EscalatedCopy | None:
    """The copy of `request` escalated to a person, in their direct messages at `channel`
    (a channel the request's own message is not in), or None."""
    if channel == request.message_channel:
        return None
    return next(
        (c for c in request.escalations if c.channel == channel and c.to.startswith(("U", "W"))),
        None,
    )


def among_its_people(user_id: str, request: ApprovalRequest, channels: frozenset[str]) -> bool:
    """Whether `user_id`, in `channels`, is one of the people of `request`: escalated to
    them, or in one of the channels its messages are in."""
    return escalated_to(user_id, request) or not channels.isdisjoint(request.channels())
