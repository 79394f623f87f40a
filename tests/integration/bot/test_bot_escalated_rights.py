"""Who may decide from an escalated copy of a request whose route names no reviewers: the
person (or the channel's people) it was escalated to, a user group's members while they
are in it, the call alone (not the rest of the run), and a copy in someone's direct
messages only by them. Signed clicks and forms through the Slack stand-in."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent_host.approvals import ApprovalRequest, EscalatedCopy
from bot import blocks
from bot.reviewers import SlackReviewerDirectory
from slack_sandbox.blockkit import action_ids
from slack_sandbox.signing import sign_request
from tests.integration.bot.test_bot_commands import approvals
from tests.integration.bot.test_bot_home import (
    PRIVATE,
    add_private_channel,
    all_text,
    click_home,
    home_after,
    left_out_while_refused,
    open_home,
    private_request,
    publishes,
    waiting_ids,
)
from tests.integration.bot.test_bot_signing import click_body, home_click_body, post
from tests.support.stack import (
    ADMIN,
    OPS,
    OUTSIDER,
    REVIEWER,
    REVIEWER2,
    SECRET,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

GROUP = "S0REVIEWERS"  # REVIEWER and REVIEWER2
TWICE = "tests.integration.bot.test_bot_twice:registry"  # `archiver`: two calls, one by one


async def escalated(stack: Stack, request_id: str, copies: int = 1) -> ApprovalRequest:
    async def recorded() -> ApprovalRequest | None:
        current = await stack.host.store.get_request(request_id)
        return current if current is not None and len(current.escalations) >= copies else None

    return await eventually(recorded, what="the escalated copies")


async def told(stack: Stack, user: str, count: int = 1) -> str:
    return (await stack.wait_ephemerals(user, count))[-1]


def buttons(message: dict[str, Any]) -> list[str]:
    return [
        e["action_id"]
        for b in message["blocks"]
        if b["type"] == "actions"
        for e in b.get("elements", [])
    ]


async def archiver_escalated_to(stack: Stack, target: str) -> tuple[str, ApprovalRequest]:
    """The `archiver` run's first call, routed to the private channel and escalated to
    `target` after a second (its second call is asked only once the first is decided)."""
    add_private_channel(stack)
    route = f"route add agent=archiver channel={PRIVATE} escalate_after=1s escalate_to={target}"
    assert "Added route" in await approvals(stack, ADMIN, route)
    run_id = await stack.start_run("archiver", "archive both")
    [first] = await stack.pending_requests(run_id)
    return run_id, await escalated(stack, first.request_id)


async def test_approve_for_this_run_is_not_given_from_an_escalated_copy(
    redis_url: str, tmp_path: Path
) -> None:
    """The rest of the run would go through unseen by the channel's people: a right to
    decide that came from an escalation decides this call, not the ones to come."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=TWICE) as stack:
        run_id, first = await archiver_escalated_to(stack, f"<@{OUTSIDER}>")
        [copy] = first.escalations
        offered = buttons(stack.message(copy.channel, copy.ts))
        assert blocks.APPROVE in offered and blocks.APPROVE_ALWAYS not in offered
        assert blocks.APPROVE_ALWAYS in buttons(
            stack.message(first.message_channel, first.message_ts)
        )

        body = click_body(stack, OUTSIDER, first, blocks.APPROVE_ALWAYS, at=(copy.channel, copy.ts))
        status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200
        refused = await told(stack, OUTSIDER)
        assert "Not allowed: Approve for this run is given by the people of" in refused
        assert "approve this call alone" in refused
        current = await stack.host.store.get_request(first.request_id)
        assert current is not None and current.status == "pending"

        # This call alone, from the copy: decided; the next is asked of the channel again.
        await stack.standin.click(OUTSIDER, copy.channel, copy.ts, blocks.APPROVE)
        assert (await stack.decided(first.request_id)).decided_by == OUTSIDER

        async def second_asked() -> ApprovalRequest | None:
            requests = await stack.host.store.run_requests(run_id)
            return requests[1] if len(requests) == 2 else None

        second = await eventually(second_asked)
        assert second.status == "pending" and second.decision is None


async def test_nor_from_a_copy_in_the_channel_escalated_to(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=TWICE) as stack:
        _, first = await archiver_escalated_to(stack, f"<#{OPS}|ops>")
        [copy] = first.escalations
        assert blocks.APPROVE_ALWAYS not in buttons(stack.message(copy.channel, copy.ts))
        body = click_body(
            stack, REVIEWER2, first, blocks.APPROVE_ALWAYS, at=(copy.channel, copy.ts)
        )
        status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200
        assert "Approve for this run is given by the people of" in await told(stack, REVIEWER2)
        current = await stack.host.store.get_request(first.request_id)
        assert current is not None and current.status == "pending"


async def copy_escalated_to_the_group(
    stack: Stack, member: str
) -> tuple[ApprovalRequest, EscalatedCopy]:
    """A request of the private channel, escalated to GROUP after a second: `member`'s copy
    (in their direct messages)."""
    request = await private_request(stack, f"escalate_after=1s escalate_to=<!subteam^{GROUP}>")
    current = await escalated(stack, request.request_id, copies=2)
    return request, next(c for c in current.escalations if c.to == member)


def leave_group(stack: Stack, user: str) -> None:
    """`user` leaves GROUP, and the group's members kept by the bot are forgotten."""
    group = stack.standin.core.workspace.usergroup(GROUP)
    assert group is not None
    group.users.remove(user)
    directory = stack.host.approvals.directory
    assert isinstance(directory, SlackReviewerDirectory)
    directory.clock = lambda: time.monotonic() + 3600  # what it kept is past its age


async def test_a_member_who_left_the_group_escalated_to_no_longer_decides_from_their_copy(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        request, copy = await copy_escalated_to_the_group(stack, REVIEWER2)
        assert request.request_id in waiting_ids(await open_home(stack, REVIEWER2))
        assert request.request_id in await approvals(stack, REVIEWER2, "pending all")
        await stack.standin.click(REVIEWER2, copy.channel, copy.ts, blocks.APPROVE_COMMENT)
        form = await stack.opened_view(REVIEWER2, blocks.COMMENT_MODAL)
        leave_group(stack, REVIEWER2)

        await stack.standin.click(REVIEWER2, copy.channel, copy.ts, blocks.APPROVE)
        refused = await told(stack, REVIEWER2, count=2)  # (after the command's answer)
        assert "Not allowed" in refused and f"<#{PRIVATE}>" in refused, refused
        values = {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: "fine by me"}}
        reply = await stack.standin.submit_view(REVIEWER2, form["id"], values)
        assert "Not allowed" in str(reply.body), reply.body
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and still.status == "pending" and not still.approvals
        # nor does their tab offer it any more, nor /approvals list or show it
        assert request.request_id not in waiting_ids(await open_home(stack, REVIEWER2))
        assert request.request_id not in await approvals(stack, REVIEWER2, "pending all")
        shown = await approvals(stack, REVIEWER2, f"show {request.request_id}")
        assert shown.startswith(f"No request `{request.request_id}`"), shown


async def test_a_copy_in_someones_direct_messages_is_theirs_to_click(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        request, copy = await copy_escalated_to_the_group(stack, REVIEWER2)
        await stack.standin.click(OUTSIDER, copy.channel, copy.ts, blocks.APPROVE)

        def answered() -> str | None:  # (Slack refuses it: they are not in that DM)
            texts = [c.get("text", "") for c in stack.standin.calls_to("chat.postEphemeral")]
            return next((t for t in texts if "does not belong to this request" in t), None)

        await eventually(answered)
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and still.status == "pending"

        await stack.standin.click(REVIEWER2, copy.channel, copy.ts, blocks.APPROVE)
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER2


async def test_from_the_home_tab_approve_for_this_run_needs_a_member_of_the_routes_channel(
    redis_url: str, tmp_path: Path
) -> None:
    """Their tab lists what was escalated to them, with its buttons: the call alone may be
    approved there, the rest of the run not (not offered, and refused when sent anyway)."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=TWICE) as stack:
        _, first = await archiver_escalated_to(stack, f"<@{OUTSIDER}>")
        view = await standing_neither_offered_nor_taken_from_the_tab(stack, OUTSIDER, first)
        assert blocks.APPROVE in all_actions(view)

        await click_home(stack, OUTSIDER, first, blocks.APPROVE)
        assert (await stack.decided(first.request_id)).decided_by == OUTSIDER


async def test_nor_from_the_home_tab_of_someone_in_the_channel_escalated_to(
    redis_url: str, tmp_path: Path
) -> None:
    """A member of the channel a request was escalated to may decide the call from their
    tab; the rest of the run needs a member of the route's own channel."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=TWICE) as stack:
        _, first = await archiver_escalated_to(stack, f"<#{OPS}|ops>")
        # OUTSIDER is in #ops (public), not in the private channel
        await standing_neither_offered_nor_taken_from_the_tab(stack, OUTSIDER, first)

        await click_home(stack, OUTSIDER, first, blocks.APPROVE)
        decided = await stack.decided(first.request_id)
        assert decided.decided_by == OUTSIDER and decided.decision is not None
        assert not decided.decision.always


async def test_the_home_tab_offers_approve_for_this_run_to_the_routes_channel(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=TWICE) as stack:
        _, first = await archiver_escalated_to(stack, f"<@{OUTSIDER}>")
        view = await open_home(stack, REVIEWER)  # in the private channel
        assert blocks.APPROVE_ALWAYS in all_actions(view)
        await click_home(stack, REVIEWER, first, blocks.APPROVE_ALWAYS)
        decided = await stack.decided(first.request_id)
        assert decided.decision is not None and decided.decision.always


def all_actions(view: dict[str, Any]) -> list[str]:
    return action_ids(view["blocks"])


async def standing_neither_offered_nor_taken_from_the_tab(
    stack: Stack, user: str, request: ApprovalRequest
) -> dict[str, Any]:
    """`user`'s tab lists `request` without "Approve for this run", and a signed click on it
    sent anyway (forged, or from a stale tab) is refused, naming the route's channel, and
    changes nothing; the tab as opened."""
    view = await open_home(stack, user)
    assert request.request_id in waiting_ids(view)
    assert blocks.APPROVE_ALWAYS not in all_actions(view)
    seen = publishes(stack, user)
    body = home_click_body(stack, user, request, blocks.APPROVE_ALWAYS)
    status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
    assert status == 200
    notice = all_text(await home_after(stack, user, seen))
    assert "Not allowed" in notice and PRIVATE in notice, notice
    current = await stack.host.store.get_request(request.request_id)
    assert current is not None and current.status == "pending" and current.decision is None
    return view


async def test_a_group_that_cannot_be_listed_is_said_so_not_taken_for_leaving_it(
    redis_url: str, tmp_path: Path
) -> None:
    """A member still in the group, whose one claim is their copy: when Slack cannot list
    the group, the click is refused saying so (try again), not "you are not there"."""
    async with running_stack(redis_url, tmp_path) as stack:
        request, copy = await copy_escalated_to_the_group(stack, REVIEWER2)
        directory = stack.host.approvals.directory
        assert isinstance(directory, SlackReviewerDirectory)
        directory.clock = lambda: time.monotonic() + 3600  # what it kept is past its age
        stack.standin.inject("usergroups.users.list", status=500, times=20)

        await stack.standin.click(REVIEWER2, copy.channel, copy.ts, blocks.APPROVE)
        refused = await told(stack, REVIEWER2)
        assert "could not check the members of the user group" in refused, refused
        assert "you are not there" not in refused, refused
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and still.status == "pending" and not still.approvals

        stack.standin.core.faults.clear()
        await stack.standin.click(REVIEWER2, copy.channel, copy.ts, blocks.APPROVE)
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER2


async def test_a_tab_slack_refuses_the_group_escalated_to_for_says_what_an_admin_must_fix(
    redis_url: str, tmp_path: Path
) -> None:
    """A member outside the request's channel, whose one claim is the group it was
    escalated to: without `usergroups:read` Slack refuses to list the group (`missing_scope`),
    so their tab leaves the request out (fail closed) and says who must fix what, not "open
    this tab again in a moment", which would never help."""
    async with running_stack(redis_url, tmp_path) as stack:
        request, _ = await copy_escalated_to_the_group(stack, REVIEWER2)
        assert request.request_id in waiting_ids(await open_home(stack, REVIEWER2))
        directory = stack.host.approvals.directory
        assert isinstance(directory, SlackReviewerDirectory)
        directory.clock = lambda: time.monotonic() + 3600  # what it kept is past its age
        await left_out_while_refused(stack, REVIEWER2, request, "usergroups:read")
