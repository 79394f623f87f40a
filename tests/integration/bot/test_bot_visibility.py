"""`/approvals pending all` and `/approvals show` show a member only what they may see
(invariant 15, docs/ARCHITECTURE.md): the requests they may decide as a named reviewer,
and those routed to the channel the command was typed in; admins see all. Driven as Slack
would drive them."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from agent_host.approvals import ApprovalRequest
from bot import visibility
from slack_sandbox.seed import BOT_USER_ID
from slack_sandbox.workspace import Channel, UserGroup
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    OUTSIDER,
    REQUESTER,
    REVIEWER,
    REVIEWER2,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

from .test_bot_commands import approvals, listed_ids, next_cursor, next_page, waiting_requests

SECRET = "C0SECRETOPS"  # a private channel: REVIEWER, REQUESTER and ADMIN are in it
PAYROLL_GROUP = "S0PAYROLL"  # its only member is REVIEWER


def dm(user: str) -> str:
    return "D" + user[1:]


def make_places(stack: Stack) -> None:
    """The private channel, a user group, and a direct message with the bot for everyone."""
    ws = stack.standin.workspace
    members = [REVIEWER, REQUESTER, ADMIN, BOT_USER_ID]
    ws.channels.append(Channel(SECRET, "secret-ops", 0, members, is_private=True))
    for user in (REQUESTER, REVIEWER, REVIEWER2, ADMIN, OUTSIDER):
        ws.channels.append(Channel(dm(user), "", 0, [user, BOT_USER_ID], is_im=True, im_user=user))
    ws.usergroups.append(UserGroup(PAYROLL_GROUP, "payroll", "Payroll", [REVIEWER]))


async def unknown_answer(stack: Stack, user: str, channel: str, request_id: str) -> str:
    """What `show` answers for an id that does not exist, spelt like `request_id`."""
    fake = re.sub(r"[0-9a-f]", "0", request_id)
    assert await stack.host.store.get_request(fake) is None
    return (await approvals(stack, user, f"show {fake}", channel)).replace(fake, request_id)


async def hidden_from(stack: Stack, user: str, channel: str, request_id: str) -> None:
    """Neither `pending all` nor `show` reveals anything of the request to `user` there."""
    listing = await approvals(stack, user, "pending all", channel)
    assert request_id not in listing
    assert "delete_file" not in listing and "payroll" not in listing
    shown = await approvals(stack, user, f"show {request_id}", channel)
    assert shown == await unknown_answer(stack, user, channel, request_id)
    assert "delete_file" not in shown and "payroll" not in shown


async def seen_by(stack: Stack, user: str, channel: str, request_id: str, everywhere: bool) -> None:
    listing = await approvals(stack, user, "pending all" if everywhere else "pending", channel)
    assert request_id in listed_ids(listing)
    shown = await approvals(stack, user, f"show {request_id}", channel)
    assert "`delete_file` requested by" in shown and "/srv/payroll.csv" in shown


async def test_a_private_route_with_named_reviewers_is_hidden_from_others(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        make_places(stack)
        added = await approvals(
            stack, ADMIN, f"route add agent=cleanup-agent channel={SECRET} reviewers=<@{REVIEWER2}>"
        )
        assert "Added route" in added
        run_id = await stack.start_run("cleanup-agent", "delete /srv/payroll.csv")
        [secret] = await waiting_requests(stack, run_id, 1)
        assert secret.route.destination == SECRET
        refund_run = await stack.start_run("refund-agent", "refund order 123")
        [refund] = await waiting_requests(stack, refund_run, 1)

        # A member who is neither a reviewer nor in the channel, from a DM or another channel.
        await hidden_from(stack, OUTSIDER, dm(OUTSIDER), secret.request_id)
        await hidden_from(stack, OUTSIDER, CHANNEL, secret.request_id)
        # A reviewer of other routes (in S0REVIEWERS), from a DM: not named on this route.
        await hidden_from(stack, REVIEWER, dm(REVIEWER), secret.request_id)
        # The default route names nobody: its request is seen in its channel, not from a DM.
        assert refund.request_id not in await approvals(
            stack, OUTSIDER, "pending all", dm(OUTSIDER)
        )
        assert refund.request_id in await approvals(stack, OUTSIDER, "pending all", CHANNEL)

        # The named reviewer sees it from anywhere.
        await seen_by(stack, REVIEWER2, dm(REVIEWER2), secret.request_id, everywhere=True)
        await seen_by(stack, REVIEWER2, CHANNEL, secret.request_id, everywhere=True)
        # A member of the routed channel sees its requests there.
        await seen_by(stack, REVIEWER, SECRET, secret.request_id, everywhere=False)
        await seen_by(stack, REVIEWER, SECRET, secret.request_id, everywhere=True)
        # An admin sees everything, from anywhere.
        everything = await approvals(stack, ADMIN, "pending all", dm(ADMIN))
        assert sorted(listed_ids(everything)) == sorted([secret.request_id, refund.request_id])
        await seen_by(stack, ADMIN, dm(ADMIN), secret.request_id, everywhere=True)


async def test_a_reviewer_group_member_sees_its_requests_at_one_lookup_per_group(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        make_places(stack)
        await approvals(
            stack,
            ADMIN,
            f"route add agent=cleanup-agent channel={SECRET} reviewers=<!subteam^{PAYROLL_GROUP}>",
        )
        run_id = await stack.start_run(
            "cleanup-agent", "delete /srv/payroll.csv /srv/payroll-2.csv /srv/payroll-3.csv"
        )
        requests = await waiting_requests(stack, run_id, 3)
        ids = sorted(r.request_id for r in requests)

        listing = await approvals(stack, REVIEWER, "pending all", dm(REVIEWER))
        assert sorted(listed_ids(listing)) == ids
        lookups = stack.standin.calls_to("usergroups.users.list")
        # One when the route was added (the group exists), one for the listing: not one
        # per request.
        assert [c["usergroup"] for c in lookups] == [PAYROLL_GROUP, PAYROLL_GROUP]
        await seen_by(stack, REVIEWER, dm(REVIEWER), requests[0].request_id, everywhere=True)

        for user in (REVIEWER2, OUTSIDER):  # not in the group
            await hidden_from(stack, user, dm(user), requests[0].request_id)


async def test_the_requester_does_not_see_their_own_request_as_theirs_to_decide(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        make_places(stack)
        await approvals(
            stack,
            ADMIN,
            f"route add agent=cleanup-agent channel={SECRET} "
            f"reviewers=<@{REQUESTER}>,<@{REVIEWER2}> self=no",
        )
        run_id = await stack.start_run("cleanup-agent", "delete /srv/payroll.csv", REQUESTER)
        [request] = await waiting_requests(stack, run_id, 1)

        await hidden_from(stack, REQUESTER, dm(REQUESTER), request.request_id)
        await seen_by(stack, REQUESTER, SECRET, request.request_id, everywhere=False)
        await seen_by(stack, REVIEWER2, dm(REVIEWER2), request.request_id, everywhere=True)


async def walk_pages(stack: Stack, user: str) -> list[str]:
    """Every page of `/approvals pending all` in the user's DM, clicking Next page."""
    texts = [await approvals(stack, user, "pending all", dm(user))]
    for _ in range(30):
        cursor = next_cursor(texts[-1])
        if cursor is None:
            return texts
        assert "req_" not in cursor  # a marker names no request
        texts.append(await next_page(stack, user, dm(user)))
    raise AssertionError("pages never ended")


@pytest.mark.parametrize("scans", [10, 1])
async def test_pending_all_pages_through_only_what_the_member_may_see(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scans: int
) -> None:
    # Small scans, so a page is assembled from several trips through the index; with one
    # trip per command the bound stops a page early, and the next page goes on from there.
    monkeypatch.setattr(visibility, "SCAN_BATCH", 4)
    monkeypatch.setattr(visibility, "MAX_SCANS", scans)
    async with running_stack(redis_url, tmp_path) as stack:
        make_places(stack)
        await approvals(
            stack, ADMIN, f"route add agent=cleanup-agent channel={SECRET} reviewers=<@{REVIEWER2}>"
        )
        hidden: list[str] = []
        visible: list[str] = []
        for batch in range(3):  # refunds (default channel, hidden from a DM) around deletions
            for _ in range(4):
                run_id = await stack.start_run("refund-agent", "refund order 123")
                hidden += [r.request_id for r in await waiting_requests(stack, run_id, 1)]
            paths = " ".join(f"/srv/p{batch}-{n}.csv" for n in range(5))
            run_id = await stack.start_run("cleanup-agent", f"delete {paths}")
            visible += [r.request_id for r in await waiting_requests(stack, run_id, 5)]

        texts = await walk_pages(stack, REVIEWER2)
        seen = [rid for text in texts for rid in listed_ids(text)]
        assert len(seen) == len(set(seen)), "a request was listed twice"
        assert sorted(seen) == sorted(visible)
        if scans > 1:  # pages are filled across hidden requests
            assert [len(listed_ids(t)) for t in texts] == [10, 5]
        everything = "\n".join(texts)
        assert not any(rid in everything for rid in hidden)
        assert "issue_refund" not in everything

        # A marker works only for the member it was given to.
        first = next_cursor(texts[0])
        assert first is not None
        stolen = await approvals(stack, OUTSIDER, f"pending all next:{first}", dm(OUTSIDER))
        assert "not one countersign gave" in stolen and not listed_ids(stolen)


async def payroll_request(stack: Stack) -> ApprovalRequest:
    """One request waiting in the private channel, for the payroll group's members alone."""
    make_places(stack)
    await approvals(
        stack,
        ADMIN,
        f"route add agent=cleanup-agent channel={SECRET} reviewers=<!subteam^{PAYROLL_GROUP}>",
    )
    run_id = await stack.start_run("cleanup-agent", "delete /srv/payroll.csv")
    [request] = await waiting_requests(stack, run_id, 1)
    return request


async def test_a_listing_slack_refuses_a_group_s_members_for_says_what_an_admin_must_fix(
    redis_url: str, tmp_path: Path
) -> None:
    """Without `usergroups:read`, Slack refuses every group lookup (`missing_scope`): the
    group's requests stay hidden (fail closed), and the listing says who must fix what, not
    "try again in a moment", which would never help."""
    async with running_stack(redis_url, tmp_path) as stack:
        request = await payroll_request(stack)
        scopes = stack.standin.core.config.scopes
        stack.standin.grant(*(s for s in scopes if s != "usergroups:read"))

        listing = await approvals(stack, REVIEWER, "pending all", dm(REVIEWER))

        assert request.request_id not in listed_ids(listing)
        assert "`missing_scope`" in listing and "countersign admin fixes it" in listing, listing
        assert "try again in a moment" not in listing
        stack.standin.grant(*scopes)
        listing = await approvals(stack, REVIEWER, "pending all", dm(REVIEWER))
        assert request.request_id in listed_ids(listing)
        assert "missing_scope" not in listing


async def test_a_slow_group_lookup_hides_its_requests_and_the_answer_stays_in_time(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        request = await payroll_request(stack)

        client = stack.bot.client
        lookup = client.usergroups_users_list

        async def stuck_lookup(**kwargs: Any) -> Any:  # Slack not answering within 3 s
            await asyncio.sleep(5)
            return await lookup(**kwargs)

        client.usergroups_users_list = stuck_lookup
        # The stand-in gives up (AppUnreachable) when the app misses Slack's 3 s.
        listing = await approvals(stack, REVIEWER, "pending all", dm(REVIEWER))
        assert request.request_id not in listing  # fail closed: membership is unknown
        assert "could not say in time who is in a reviewer group" in listing
        await hidden_from(stack, REVIEWER, dm(REVIEWER), request.request_id)

        # Slack answers again: once the lookup under way (which listings share) has given
        # up, within its 1.8 s, the member sees it.
        client.usergroups_users_list = lookup

        async def listed_again() -> bool:
            listing = await approvals(stack, REVIEWER, "pending all", dm(REVIEWER))
            return request.request_id in listed_ids(listing)

        await eventually(listed_again, within=10, what="the request listed again")
        await seen_by(stack, REVIEWER, dm(REVIEWER), request.request_id, everywhere=True)
