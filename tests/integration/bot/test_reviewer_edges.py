"""Edges of who may decide on the Slack side, shown with signed requests against the whole
stack (real Redis, the Slack stand-in): stale reviewer-group membership while Slack fails,
and a guest from another org clicking in an org-wide install."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from agent_host.approvals import ApprovalRequest
from agent_host.durable.route_book import parse_spec
from bot import blocks
from bot.member_channels import DECISION_MAX_AGE
from bot.middleware import foreign_request
from bot.reviewers import SlackReviewerDirectory
from tests.support.stack import ADMIN, CHANNEL, REVIEWER2, running_stack
from tests.support.waiting import eventually


async def test_a_member_removed_from_the_reviewer_group_cannot_decide_while_slack_fails(
    redis_url: str, tmp_path: Path
) -> None:
    """When `usergroups.users.list` fails, the reviewer directory fails closed: an expired
    cached membership is not used, so a reviewer removed from the group cannot decide that
    group's requests through a Slack outage."""
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} reviewers=S0REVIEWERS"), ADMIN)
        first = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(first)
        await stack.click(REVIEWER2, request, blocks.APPROVE)  # a member: allowed, cached
        await stack.run_status(first, "succeeded")

        group = stack.standin.core.workspace.usergroup("S0REVIEWERS")
        assert group is not None
        group.users.remove(REVIEWER2)  # no longer a reviewer
        directory = stack.host.approvals.directory
        assert isinstance(directory, SlackReviewerDirectory)
        directory.clock = lambda: time.monotonic() + 3600  # an hour later: the cache is old
        stack.standin.inject("usergroups.users.list", status=500, times=20)

        second = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(second)
        await stack.click(REVIEWER2, request, blocks.APPROVE)

        async def answered() -> ApprovalRequest | None:
            # Either the refusal reaches the clicker, or the request is decided (no reply).
            current = await stack.host.store.get_request(request.request_id)
            told = stack.ephemerals(REVIEWER2)
            return current if current is not None and (told or current.decided) else None

        current = await eventually(answered)
        assert current.status == "pending", (
            f"a member removed from the group {current.status} the request on an hour-old "
            "membership while Slack failed"
        )


async def test_a_member_removed_from_the_reviewer_group_may_not_decide_on_a_list_kept_from_before(
    redis_url: str, tmp_path: Path
) -> None:
    """A decision rests on the group's members as Slack listed them at most
    DECISION_MAX_AGE seconds before, not on the copy a listing may use for a minute: someone
    removed from the group because they should not approve may not, once that is past."""
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} reviewers=S0REVIEWERS"), ADMIN)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER2, request, blocks.REJECT)  # a member: the form opens
        await stack.opened_view(REVIEWER2, blocks.REJECT_MODAL)
        asked = len(stack.standin.calls_to("usergroups.users.list"))

        group = stack.standin.core.workspace.usergroup("S0REVIEWERS")
        assert group is not None
        group.users.remove(REVIEWER2)  # removed: Slack lists them no more from now on
        directory = stack.host.approvals.directory
        assert isinstance(directory, SlackReviewerDirectory)
        later = DECISION_MAX_AGE + 1  # past a decision's bound, well within a listing's
        assert later < directory.cache_seconds
        directory.clock = lambda: time.monotonic() + later
        await stack.click(REVIEWER2, request, blocks.APPROVE)

        [told] = await stack.wait_ephemerals(REVIEWER2)
        assert "you are not a reviewer for this request" in told, told
        await stack.assert_still_waiting(run_id, request.request_id)
        assert stack.effects.count("refund") == 0
        assert len(stack.standin.calls_to("usergroups.users.list")) == asked + 1  # asked anew


async def test_decisions_needing_a_group_at_the_same_moment_share_one_lookup(
    redis_url: str, tmp_path: Path
) -> None:
    """`usergroups.users.list` is one of Slack's slower tiers (about 20 calls a minute):
    clicks that need the same group while it is being listed wait for that answer rather
    than asking again."""
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} reviewers=S0REVIEWERS"), ADMIN)
        runs = [await stack.start_run("refund-agent", "refund order 123") for _ in range(3)]
        requests = [(await stack.pending_requests(run))[0] for run in runs]
        stack.standin.inject("usergroups.users.list", status=200, delay=0.5)  # slow, answered
        asked = len(stack.standin.calls_to("usergroups.users.list"))

        replies = await asyncio.gather(
            *(stack.click(REVIEWER2, r, blocks.APPROVE) for r in requests)
        )

        assert [reply.status for reply in replies] == [200, 200, 200]
        for run in runs:
            assert (await stack.run_status(run, "succeeded", "failed")).status == "succeeded"
        assert len(stack.standin.calls_to("usergroups.users.list")) == asked + 1


def test_an_org_wide_install_refuses_a_guest_whose_own_org_is_another() -> None:
    """For an org-wide install every enterprise a request names (the payload's and the user's
    own) must be the installed org, as the team check does for teams: a guest from org E2
    clicking in a channel of the installed org E1 is refused."""
    org = SimpleNamespace(team_id=None, enterprise_id="E1")
    guest_click = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "enterprise": {"id": "E1"},
        "user": {"id": "U9", "team_id": "T9", "enterprise_id": "E2"},
    }
    assert foreign_request(guest_click, org)
