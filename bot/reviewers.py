"""Who may decide a request: the route's reviewers (users and user groups) and self-approval.

User-group members are looked up with `usergroups.users.list`. A decision rests on what
Slack said at most DECISION_MAX_AGE seconds before (someone removed from a group may not
decide a minute longer on a copy kept from before); a listing (the App Home tab,
`/approvals`) on a copy up to `cache_seconds` old. One lookup of a group at a time: whoever
needs it meanwhile waits for the same answer (the method is one of Slack's slower tiers,
about 20 calls a minute).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from agent_host.approvals import ApprovalRequest, Eligibility, may_decide, self_approval_refusal
from agent_host.durable.every import Every
from bot.delivery import (
    APP_REFUSED_SAID_EVERY,
    Refused,
    app_refused,
    error_code,
    is_rate_limited,
    known,
    lookup_refused,
    retry_after,
    say_app_refused,
)
from bot.member_channels import DECISION_MAX_AGE
from bot.mrkdwn import inline_code, mention

__all__ = ["SlackReviewerDirectory", "judge"]

log = logging.getLogger(__name__)

GONE = frozenset({"no_such_subteam", "subteam_not_found"})  # Slack's "no such user group"
QUIET_MAX = 60.0  # seconds: the longest a "ratelimited" answer keeps the groups unasked


class SlackReviewerDirectory:
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
        self._asking: dict[str, asyncio.Future[Listing]] = {}  # lookups under way
        self._quiet_until = float("-inf")  # Slack said "ratelimited": not asked again before
        self._app_refused_said = Every(APP_REFUSED_SAID_EVERY, lambda: self.clock())

    async def may_decide(self, user_id: str, request: ApprovalRequest) -> Eligibility:
        return await may_decide(self, user_id, request)

    async def is_reviewer(self, user_id: str, reviewers: tuple[str, ...]) -> Eligibility:
        """The reviewer directory: listed, or in one of the listed user groups as Slack
        listed them at most DECISION_MAX_AGE seconds before. Such a list naming them needs
        no call; otherwise the group the last list puts them in is asked about first,
        alone (a click then costs one lookup, not one per group of the route), and the
        others only if it no longer has them. All of it within one lookup's `timeout`: the
        click must be answered within Slack's 3 s."""
        wanted = _groups_of(reviewers)
        if user_id in reviewers or not wanted:
            return _membership(user_id, reviewers, {})
        if any(user_id in (self._listed(g, DECISION_MAX_AGE) or ()) for g in wanted):
            return Eligibility(True)
        found: dict[str, Listing] = {}
        likely = next((g for g in wanted if user_id in (self._listed(g) or ())), None)
        try:
            async with asyncio.timeout(self.timeout):
                if likely is not None:
                    found[likely] = await self.group_listing(likely, max_age=DECISION_MAX_AGE)
                    members = found[likely]
                    if not isinstance(members, frozenset) or user_id in members:
                        return _membership(user_id, reviewers, *_members_and_why(found))
                others = [g for g in wanted if g != likely]
                answers = await asyncio.gather(
                    *(self.group_listing(g, max_age=DECISION_MAX_AGE) for g in others)
                )
                found.update(zip(others, answers, strict=True))
        except TimeoutError:
            pass  # what Slack did not say in time counts as unknown: refused
        return _membership(user_id, reviewers, *_members_and_why(found))

    def _listed(self, group_id: str, max_age: float = math.inf) -> frozenset[str] | None:
        """The group's members as listed at most `max_age` seconds ago (default: as last
        listed, however long ago); None when not listed since."""
        kept = self._groups.get(group_id)
        return kept[1] if kept is not None and self.clock() - kept[0] < max_age else None

    async def group_members(
        self, group_id: str, max_age: float | None = None
    ) -> frozenset[str] | None:
        """The group's members as Slack listed them at most `max_age` seconds ago (default:
        `cache_seconds`; a decision asks for DECISION_MAX_AGE), or now; None when Slack
        could not say in time, or refused the app (`group_listing` says which)."""
        found = await self.group_listing(group_id, max_age)
        return found if isinstance(found, frozenset) else None

    async def group_listing(self, group_id: str, max_age: float | None = None) -> Listing:
        """`group_members`, or Refused when this lookup was refused to the app itself."""
        age = self.cache_seconds if max_age is None else max_age
        if (listed := self._listed(group_id, age)) is not None:
            return listed
        asking = self._asking.get(group_id)
        if asking is None:
            asking = asyncio.ensure_future(self._list(group_id))
            self._asking[group_id] = asking
            asking.add_done_callback(lambda _: self._asking.pop(group_id, None))
        return await asyncio.shield(asking)  # (one caller giving up does not end it)

    async def _list(self, group_id: str) -> Listing:
        asked = self.clock()  # (its answer is as old as the question)
        if self.quiet():
            return None
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.client.usergroups_users_list(usergroup=group_id)
            members = frozenset(reply.get("users") or [])
        except SlackApiError as exc:
            if is_rate_limited(exc):
                self._keep_quiet(retry_after(exc))
            if (code := app_refused(exc)) is not None:
                what = f"to list the members of user group {group_id}"
                then = "Until then no member of a user group may decide a request."
                say_app_refused(self._app_refused_said, group_id, what, exc, then)
                return Refused(code)  # fail closed, as below, saying why
            if error_code(exc) not in GONE:
                log.warning("usergroups.users.list %s failed: %s", group_id, exc)
                return None  # fail closed, as below
            # A group that does not exist has nobody in it: said at once, not "try again".
            log.warning("user group %s does not exist: nobody in it may decide", group_id)
            members = frozenset()
        except Exception as exc:  # fail closed: an unknown membership allows nobody
            log.warning("usergroups.users.list %s failed: %s", group_id, exc)
            # Fail closed: an older list may name someone since removed.
            return None
        self._groups[group_id] = (asked, members)
        return members

    def quiet(self) -> bool:
        """Whether Slack's last "ratelimited" still holds: asking again now would only
        keep the limit tripped."""
        return self.clock() < self._quiet_until

    def _keep_quiet(self, seconds: float) -> None:
        seconds = min(seconds, QUIET_MAX)  # (a Retry-After far off stops no decision long)
        self._quiet_until = self.clock() + seconds
        log.warning(
            "usergroups.users.list is rate limited: no user group is listed for %gs; "
            'decisions that need one are refused meanwhile ("click again in a moment")',
            seconds,
        )

    async def group_listed(self, group_id: str) -> frozenset[str] | str:
        """Who is in the user group `group_id`, asked of Slack now (for `route add`); or why
        it cannot review (it does not exist, or has nobody in it), saying what to do."""
        group = mention(group_id)
        if self.quiet():
            return f"Slack asked countersign to wait before listing {group}; try again in a minute"
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.client.usergroups_users_list(usergroup=group_id)
        except SlackApiError as exc:
            code = error_code(exc)
            if code in GONE:
                return (
                    f"the user group {group} does not exist in this workspace; name one that does"
                )
            return f"Slack refused to list {group} ({inline_code(code)}); try again"
        except (TimeoutError, OSError, aiohttp.ClientError):
            return f"Slack did not answer who is in {group}; try again in a moment"
        members = frozenset(u for u in reply.get("users") or [] if isinstance(u, str))
        if not members:
            return f"the user group {group} has nobody in it, so nobody could decide through it"
        return members

    async def memberships(self, groups: Iterable[str], within: float) -> dict[str, Listing]:
        """The members of many groups, each looked up once, all at once, for at most `within`
        seconds (a listing checks many requests, but its answer is due within Slack's 3 s);
        None for a group Slack could not list in time, Refused for one it refused the app."""
        wanted = sorted(set(groups))
        if not wanted:
            return {}
        tasks = {g: asyncio.ensure_future(self.group_listing(g)) for g in wanted}
        done, late = await asyncio.wait(tasks.values(), timeout=max(within, 0.0))
        for task in late:
            task.cancel()
        return {g: t.result() if t in done else None for g, t in tasks.items()}


def judge(
    user_id: str, request: ApprovalRequest, groups: Mapping[str, frozenset[str] | None]
) -> Eligibility:
    """The decision rule of `agent_host.approvals.may_decide`, given the members of the
    route's user groups already (None: Slack could not say), for listings that check many
    requests at once; a group missing from `groups` counts as unknown."""
    route = request.route
    if refusal := self_approval_refusal(user_id, request):
        return Eligibility(False, refusal)
    if not route.reviewers:
        return Eligibility(True)
    return _membership(user_id, route.reviewers, groups)


UNCHECKED = "countersign could not check the reviewer group right now; click again in a moment"
# a group's members; Refused: Slack refused the app this lookup; None: Slack did not say
Listing = frozenset[str] | Refused | None


def _members_and_why(
    found: Mapping[str, Listing],
) -> tuple[dict[str, frozenset[str] | None], str]:
    """The groups' members as `_membership` takes them, and what a click refused for want
    of one is told: what an admin must fix when Slack refused the app itself in this
    click's lookups, otherwise to click again."""
    members, code = known(found)
    if code is None:
        return members, UNCHECKED
    refused = lookup_refused("list who is in the reviewer group", code)
    return members, f"{refused}; until then nobody can decide it through a user group."


def _membership(
    user_id: str,
    reviewers: tuple[str, ...],
    groups: Mapping[str, frozenset[str] | None],
    unknown: str = UNCHECKED,
) -> Eligibility:
    if user_id in reviewers:
        return Eligibility(True)
    results = [groups.get(g) for g in _groups_of(reviewers)]
    if any(members is not None and user_id in members for members in results):
        return Eligibility(True)
    if any(members is None for members in results):
        return Eligibility(False, unknown)
    listed = ", ".join(mention(r) for r in reviewers)
    return Eligibility(
        False, f"you are not a reviewer for this request; it can be decided by {listed}"
    )


def _groups_of(reviewers: Collection[str]) -> list[str]:
    return [r for r in reviewers if r.startswith("S")]
