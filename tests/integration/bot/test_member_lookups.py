"""On a route without named reviewers, a decision made in a form (or the App Home tab) is
checked against the members of the request's channel, as Slack lists them
(`conversations.members`). One listing serves everyone deciding in that channel for a few
seconds, so a team clearing a queue together stays within Slack's rate limits, which are
counted per method for the whole app, not per person."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.approvals import EscalatedCopy, Route
from bot import blocks
from bot.member_channels import DECISION_MAX_AGE, LOOKUP_SECONDS, UNCHECKED, MemberChannels
from bot.reviewers import QUIET_MAX, SlackReviewerDirectory
from slack_sandbox import SlackStandIn, open_workspace
from slack_sandbox.seed import BOT_USER_ID, REVIEWERS_GROUP
from slack_sandbox.workspace import Channel, User, UserGroup
from tests.support.stack import CHANNEL, OUTSIDER, REVIEWER, REVIEWER2, TOKEN, running_stack
from tests.unit.bot.test_blocks import make_request

from .test_bot_commands import approvals
from .test_bot_home import ADMIN, PRIVATE, add_private_channel, rejects_by_form

# Calls a minute Slack allows each method (Tier 3, Tier 3, Tier 4).
SLACK_TIERS = {"users.conversations": 50, "conversations.info": 50, "conversations.members": 100}
TEAM = 56  # more people than one lookup each would be allowed in a minute


async def test_a_team_deciding_together_stays_within_slacks_rate_limits(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        # Posts paced faster than Slack's one a second a channel: this test is not about it.
        stack.host.notifier.pacer.interval = 0.01  # type: ignore[attr-defined]
        team = [f"U0TEAM{n:03d}" for n in range(TEAM)]
        workspace = stack.standin.workspace
        workspace.users.extend(User(user, user.lower(), user, "reviewer") for user in team)
        add_private_channel(stack)
        channel = workspace.channel(PRIVATE)
        assert channel is not None
        channel.members.extend(team)
        await approvals(stack, ADMIN, f"route add agent=cleanup-agent channel={PRIVATE}")
        for method, per_minute in SLACK_TIERS.items():
            stack.standin.limit(method, per_minute)
        runs = [await stack.start_run("cleanup-agent", f"delete /srv/{n}.txt") for n in team]
        requests = [(await stack.pending_requests(run))[0] for run in runs]
        last = requests.pop()
        # (one of them opens the form for the last request, and submits it at the end)
        await stack.standin.click(team[0], PRIVATE, last.message_ts, blocks.REJECT)
        form = await stack.opened_view(team[0], blocks.REJECT_MODAL)

        # All the others reject one request each with a reason, within a minute: every
        # form is checked, and every one of them is let through.
        for user, request in zip(team[1:], requests, strict=True):
            await rejects_by_form(stack, user, request.request_id, PRIVATE, request.message_ts)
        asked = [method for method, _ in stack.standin.core.calls if method in SLACK_TIERS]
        assert len(asked) < len(requests) / 2, asked  # a few lookups, not one a decision

        # The check still holds: someone who left the channel with the form open is
        # refused, once the listing that had them among its members is too old to rely on.
        channel.members.remove(team[0])
        await asyncio.sleep(DECISION_MAX_AGE)
        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not this one"}}
        refused = await stack.standin.submit_view(team[0], form["id"], reason)
        assert "you are not there" in refused.json()["errors"][blocks.REASON_BLOCK]
        still = await stack.host.store.get_request(last.request_id)
        assert still is not None and not still.decided


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackStandIn]:
    standin = SlackStandIn(open_workspace(tmp_path / "slack"), token=TOKEN)
    async with standin:
        standin.workspace.channels.append(
            Channel(PRIVATE, "private-ops", 0, [REVIEWER, BOT_USER_ID], is_private=True)
        )
        yield standin


def lookups(standin: SlackStandIn) -> list[str]:
    return [method for method, _ in standin.core.calls if method in SLACK_TIERS]


async def test_a_refusal_asks_slack_once(slack: SlackStandIn) -> None:
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url))
    request = make_request(message_channel=PRIVATE)
    assert "you are not there" in await channels.outside(OUTSIDER, request)
    assert lookups(slack) == ["conversations.info", "conversations.members"]
    assert await channels.outside(REVIEWER, request) == ""  # from what it was told
    assert len(lookups(slack)) == 2


async def test_a_stalled_lookup_holds_up_nobody_after_it(slack: SlackStandIn) -> None:
    """Slack's answer is late (a connection gone quiet): the decision waiting for it is
    refused, saying so, after LOOKUP_SECONDS; the lookup ends with it, so the next decision
    asks again and is let through."""
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url, timeout=10))
    request = make_request(message_channel=PRIVATE)
    slack.inject("conversations.members", status=200, delay=3 * LOOKUP_SECONDS)
    assert await channels.outside(REVIEWER, request) == UNCHECKED
    assert await channels.outside(REVIEWER, request) == ""


async def test_a_decision_joining_a_lookup_that_runs_out_of_time_asks_again(
    slack: SlackStandIn,
) -> None:
    """A second decision comes just before a stalled lookup runs out of its time: it waited
    for that lookup, which ends with nothing, so it asks Slack again itself, within its own
    time, and is let through."""
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url, timeout=10))
    request = make_request(message_channel=PRIVATE)
    assert await channels.outside(REVIEWER, request) == ""  # conversations.info: kept
    await asyncio.sleep(DECISION_MAX_AGE)  # the members listed are too old to let anyone in
    slack.inject("conversations.members", status=200, delay=3 * LOOKUP_SECONDS)
    first = asyncio.create_task(channels.outside(REVIEWER, request))
    await asyncio.sleep(0.8 * LOOKUP_SECONDS)
    second = await channels.outside(REVIEWER, request)
    assert await first == UNCHECKED
    assert second == ""
    assert lookups(slack).count("conversations.members") == 3


async def test_a_refused_lookup_is_not_asked_again_by_those_waiting_for_it(
    slack: SlackStandIn,
) -> None:
    """Slack refuses the lookup (an error, at once): the five decisions waiting for it are
    told to try again, and Slack is asked once, not once more by each of them."""
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url, timeout=10))
    request = make_request(message_channel=PRIVATE)
    slack.inject("conversations.info", status=500, delay=0.2)
    slack.inject("conversations.members", status=500, delay=0.2)
    answers = await asyncio.gather(*(channels.outside(REVIEWER, request) for _ in range(5)))
    assert answers == [UNCHECKED] * 5
    assert sorted(lookups(slack)) == ["conversations.info", "conversations.members"]


async def test_a_decision_on_a_copy_escalated_to_a_group_rests_on_its_members_now(
    slack: SlackStandIn,
) -> None:
    """Whoever a request was escalated to through a user group may decide it while they
    are in the group: a decision asks Slack again once what it said is DECISION_MAX_AGE
    seconds old; a listing (the App Home tab) may still show the request from the minute's
    copy."""
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    channels = MemberChannels(
        AsyncWebClient(token=TOKEN, base_url=slack.url), group_members=directory.group_members
    )
    copy = EscalatedCopy(to=REVIEWER, channel="D0REVIEWER", ts="1.0", link="")
    request = make_request(route=Route(escalate_to=REVIEWERS_GROUP), escalations=[copy])
    assert await channels.escalated_to_now(REVIEWER, request) is True

    group = slack.core.workspace.usergroup(REVIEWERS_GROUP)
    assert group is not None
    group.users.remove(REVIEWER)  # removed from the group
    directory.clock = lambda: time.monotonic() + DECISION_MAX_AGE + 1  # within a minute

    assert await channels.escalations_now(REVIEWER, [request]) == [True]  # a listing
    assert await channels.escalated_to_now(REVIEWER, request) is False  # a decision
    asked = [method for method, _ in slack.core.calls if method == "usergroups.users.list"]
    assert len(asked) == 2


def _group_lookups(slack: SlackStandIn) -> int:
    return sum(1 for method, _ in slack.core.calls if method == "usergroups.users.list")


async def test_a_decision_on_a_route_of_many_groups_asks_about_the_decider_s_own_first(
    slack: SlackStandIn,
) -> None:
    """`usergroups.users.list` allows about 20 calls a minute: a click on a route naming
    three groups asks Slack about the group an older list puts the clicker in, alone, not
    about all three every time its list is 5 s old; the others too when that one no
    longer has them; none more when Slack could not say (the click is refused)."""
    slack.workspace.usergroups += [
        UserGroup("S0PAYROLL", "payroll", "Payroll", [OUTSIDER]),
        UserGroup("S0LEGAL", "legal", "Legal", [OUTSIDER]),
    ]
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    reviewers = ("S0PAYROLL", REVIEWERS_GROUP, "S0LEGAL")
    assert (await directory.is_reviewer(REVIEWER, reviewers)).allowed  # unknown: all three
    assert _group_lookups(slack) == 3

    directory.clock = lambda: time.monotonic() + DECISION_MAX_AGE + 1  # each list 5 s old
    assert (await directory.is_reviewer(REVIEWER, reviewers)).allowed
    assert _group_lookups(slack) == 4  # their own group, alone

    directory.clock = lambda: time.monotonic() + 2 * (DECISION_MAX_AGE + 1)
    slack.inject("usergroups.users.list", status=500, times=1)
    failed = await directory.is_reviewer(REVIEWER, reviewers)
    assert not failed.allowed and "could not check the reviewer group" in failed.reason
    assert _group_lookups(slack) == 5  # Slack could not say: refused, not asked again

    group = slack.core.workspace.usergroup(REVIEWERS_GROUP)
    assert group is not None
    group.users.remove(REVIEWER)
    refused = await directory.is_reviewer(REVIEWER, reviewers)
    assert not refused.allowed and "you are not a reviewer" in refused.reason
    assert _group_lookups(slack) == 5 + 3  # theirs said no: then the other two


async def test_after_slack_says_ratelimited_the_groups_are_not_asked_again_before_retry_after(
    slack: SlackStandIn,
) -> None:
    """Asking again while Slack's limit holds would only keep it tripped: decisions that
    need a group's members meanwhile are refused (fail closed) without a call, `route add`
    is told to try again, and Slack is asked again once its Retry-After has passed (at
    most QUIET_MAX: a Retry-After far off does not stop decisions for long)."""
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    slack.inject("usergroups.users.list", status=429, retry_after=3600)
    reviewers = (REVIEWERS_GROUP,)
    first = await directory.is_reviewer(REVIEWER, reviewers)
    assert not first.allowed and "could not check the reviewer group" in first.reason
    assert _group_lookups(slack) == 1

    directory.clock = lambda: time.monotonic() + QUIET_MAX - 10  # within the quiet
    again = await directory.is_reviewer(REVIEWER, reviewers)
    assert not again.allowed and "could not check the reviewer group" in again.reason
    assert "try again" in str(await directory.group_listed(REVIEWERS_GROUP))
    assert _group_lookups(slack) == 1  # not asked

    directory.clock = lambda: time.monotonic() + QUIET_MAX + 1  # past it
    assert (await directory.is_reviewer(REVIEWER, reviewers)).allowed
    assert _group_lookups(slack) == 2


async def test_requests_escalated_through_one_user_group_ask_slack_about_it_once(
    slack: SlackStandIn,
) -> None:
    """Twenty requests escalated to a reviewer through one user group, checked at once
    (their App Home tab): one `usergroups.users.list`, about 20 of which Slack allows a
    minute, not one each."""
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    client = AsyncWebClient(token=TOKEN, base_url=slack.url)
    channels = MemberChannels(client, group_members=directory.group_members)
    route = Route(escalate_to=REVIEWERS_GROUP)
    copy = EscalatedCopy(to=REVIEWER, channel="D0REVIEWER", ts="1.0", link="")
    requests = [
        make_request(request_id=f"req_abc123_{n}", route=route, escalations=[copy])
        for n in range(20)
    ]
    assert await channels.escalations_now(REVIEWER, requests) == [True] * 20
    assert await channels.escalations_now(OUTSIDER, requests) == [False] * 20  # no copy
    asked = [method for method, _ in slack.core.calls if method == "usergroups.users.list"]
    assert asked == ["usergroups.users.list"]


async def test_a_click_refused_because_slack_refuses_the_app_says_what_an_admin_must_fix(
    slack: SlackStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """Without `usergroups:read` Slack answers `missing_scope` to every lookup: clicking
    again changes nothing. The member of a reviewer group is refused (fail closed) and told
    that an admin must fix the app, and the operator's log says it as an error, once a
    minute however many clicks; once the scope is granted, the next click decides."""
    scopes = slack.core.config.scopes
    slack.grant(*(s for s in scopes if s != "usergroups:read"))
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    reviewers = (REVIEWERS_GROUP,)
    with caplog.at_level("ERROR", logger="bot.reviewers"):
        for _ in range(3):
            refused = await directory.is_reviewer(REVIEWER, reviewers)
            assert not refused.allowed
            assert "`missing_scope`" in refused.reason and "admin" in refused.reason
            assert "click again" not in refused.reason
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "(missing_scope, needs usergroups:read)" in errors[0].getMessage()
    assert "reinstall it from manifest.yml" in errors[0].getMessage()

    slack.grant(*scopes)
    assert (await directory.is_reviewer(REVIEWER, reviewers)).allowed
    slack.inject("usergroups.users.list", status=500)  # a passing failure now: click again
    directory.clock = lambda: time.monotonic() + DECISION_MAX_AGE + 1
    failed = await directory.is_reviewer(REVIEWER, reviewers)
    assert not failed.allowed and "could not check the reviewer group" in failed.reason

    # A reviewer the group was listed with before is asked about first (alone): when the
    # scope goes later, they too are told what an admin must fix.
    assert (await directory.is_reviewer(REVIEWER, reviewers)).allowed
    slack.grant(*(s for s in scopes if s != "usergroups:read"))
    directory.clock = lambda: time.monotonic() + 2 * (DECISION_MAX_AGE + 1)
    again = await directory.is_reviewer(REVIEWER, reviewers)
    assert not again.allowed and "`missing_scope`" in again.reason, again.reason
    assert again.reason.endswith("until then nobody can decide it through a user group.")
    # Only this click's lookups say: once the app is fixed, a click that asks only
    # another group of the route, which merely fails, is not told the old refusal.
    slack.grant(*scopes)
    slack.workspace.usergroups.append(UserGroup("S0OTHER", "other", "Other", [REVIEWER2]))
    assert (await directory.is_reviewer(REVIEWER2, ("S0OTHER",))).allowed
    directory.clock = lambda: time.monotonic() + 3 * (DECISION_MAX_AGE + 1)
    slack.inject("usergroups.users.list", status=500)
    other = await directory.is_reviewer(REVIEWER2, (REVIEWERS_GROUP, "S0OTHER"))
    assert not other.allowed and "could not check the reviewer group" in other.reason


async def test_a_channel_lookup_slack_refuses_the_app_says_what_an_admin_must_fix(
    slack: SlackStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """A route without named reviewers is decided by its channel's people, looked up with
    `conversations.info` and `conversations.members`; without `groups:read` Slack answers
    `missing_scope` for a private channel, every time. Its member is refused (fail closed)
    and told an admin must fix the app, not to try again; the log says it as an error once
    a minute; once the scope is granted, the next decision is let through."""
    scopes = slack.core.config.scopes
    slack.grant(*(s for s in scopes if s != "groups:read"))
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url))
    request = make_request(message_channel=PRIVATE)
    with caplog.at_level("ERROR", logger="bot.member_channels"):
        for _ in range(2):
            refused = await channels.outside(REVIEWER, request)
            assert "`missing_scope`" in refused and "admin" in refused, refused
            assert "try again" not in refused
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "(missing_scope, needs groups:read)" in errors[0], errors

    slack.grant(*scopes)
    assert await channels.outside(REVIEWER, request) == ""
    assert "you are not there" in await channels.outside(OUTSIDER, request)


async def test_a_channel_s_refusal_is_said_for_that_channel_alone_and_that_lookup_alone(
    slack: SlackStandIn,
) -> None:
    """Without `groups:read` a private channel's lookups are refused, a public one's are
    not: a lookup of the public channel leaves the private one's refusal said, a passing
    failure of the public one is not told as the other's refusal, and once the scope is
    back, a lookup that merely fails says to try again."""
    scopes = slack.core.config.scopes
    slack.grant(*(s for s in scopes if s != "groups:read"))
    channels = MemberChannels(AsyncWebClient(token=TOKEN, base_url=slack.url))
    private, public = make_request(message_channel=PRIVATE), make_request(message_channel=CHANNEL)
    assert "`missing_scope`" in await channels.outside(REVIEWER, private)
    slack.inject("conversations.info", status=500)
    assert await channels.outside("U0NOBODY", public) == UNCHECKED  # its own failure
    assert await channels.outside(REVIEWER, public) == ""  # public: anyone
    channels.clock = lambda: time.monotonic() + DECISION_MAX_AGE + 1
    assert "`missing_scope`" in await channels.outside(REVIEWER, private)

    slack.grant(*scopes)
    channels.clock = lambda: time.monotonic() + 2 * (DECISION_MAX_AGE + 1)
    slack.inject("conversations.info", status=500)
    slack.inject("conversations.members", status=500)
    assert await channels.outside(REVIEWER, private) == UNCHECKED


async def test_a_copy_escalated_to_a_group_slack_refuses_to_list_says_what_an_admin_must_fix(
    slack: SlackStandIn,
) -> None:
    """Whoever a request was escalated to through a user group, on a route naming no
    reviewers, claims it through the group alone: without `usergroups:read` they are
    refused (fail closed) and told an admin must fix the app, not to try again."""
    directory = SlackReviewerDirectory(AsyncWebClient(token=TOKEN, base_url=slack.url))
    channels = MemberChannels(
        AsyncWebClient(token=TOKEN, base_url=slack.url), group_members=directory.group_listing
    )
    copy = EscalatedCopy(to=REVIEWER2, channel="D0REVIEWER2", ts="1.0", link="")
    request = make_request(
        message_channel=PRIVATE, route=Route(escalate_to=REVIEWERS_GROUP), escalations=[copy]
    )
    slack.workspace.usergroup(REVIEWERS_GROUP).users.append(REVIEWER2)  # type: ignore[union-attr]
    scopes = slack.core.config.scopes
    slack.grant(*(s for s in scopes if s != "usergroups:read"))
    refused = await channels.outside(REVIEWER2, request)
    assert "`missing_scope`" in refused and "escalated to" in refused, refused
    slack.grant(*scopes)
    assert await channels.outside(REVIEWER2, request) == ""
