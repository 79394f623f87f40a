"""Who may decide, quorum, double clicks and a crowd of concurrent clicks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_host.durable.route_book import parse_spec
from agent_host.durable.sweeper import EXPIRED_BY
from bot import blocks
from slack_sandbox import AppUnreachable, workspace_to_dict
from slack_sandbox.workspace import User, UserGroup
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

from .test_bot_undeliverable import outbox_drained


async def _route(stack: Stack, spec: str) -> None:
    reply = await stack.approvals(ADMIN, CHANNEL, f"route add {spec}")
    assert reply.status == 200
    assert "Added route" in reply.json()["text"], reply.body


async def _audit_events(stack: Stack, run_id: str, request_id: str) -> list[str]:
    return [
        e["event"]
        for e in await stack.host.store.audit(run_id)
        if e.get("request_id") == request_id
    ]


async def test_quorum_of_two_needs_two_different_reviewers(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"tool=issue_refund channel={CHANNEL} reviewers=S0REVIEWERS quorum=2")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.route.quorum == 2
        assert "0 of 2 approvals" in str(stack.message(CHANNEL, request.message_ts)["blocks"])

        await stack.click(REVIEWER, request, blocks.APPROVE)
        [progress] = await stack.wait_ephemerals(REVIEWER)
        assert "1 of 2" in progress
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"
        assert current.approvals == [REVIEWER]

        async def shows_progress() -> bool:
            shown = str(stack.message(CHANNEL, request.message_ts)["blocks"])
            return "1 of 2 approvals" in shown and "<@U0REVIEWER>" in shown

        await eventually(shows_progress)
        message = stack.message(CHANNEL, request.message_ts)
        assert any(b["type"] == "actions" for b in message["blocks"])  # still decidable

        await stack.click(REVIEWER, request, blocks.APPROVE)
        texts = await stack.wait_ephemerals(REVIEWER, 2)
        assert "already approved" in texts[1]
        # A form to approve again is not opened to be refused once filled in: told at once.
        await stack.click(REVIEWER, request, blocks.APPROVE_COMMENT)
        texts = await stack.wait_ephemerals(REVIEWER, 3)
        assert "already approved" in texts[2]
        views = workspace_to_dict(stack.standin.workspace)["views"]
        assert not [v for v in views if v["view"].get("callback_id") == blocks.COMMENT_MODAL]
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"
        assert current.approvals == [REVIEWER]
        assert stack.effects.count("refund") == 0

        await stack.click(REVIEWER2, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.status == "approved"
        assert decided.approvals == [REVIEWER, REVIEWER2]
        assert decided.decided_by == REVIEWER2
        assert stack.effects.count("refund") == 1
        events = await _audit_events(stack, run_id, request.request_id)
        assert events.count("approval") == 1 and events.count("approved") == 1

        message = await stack.decided_message(CHANNEL, request.message_ts)
        shown = str(message["blocks"])
        assert "<@U0REVIEWER>" in shown and "<@U0REVIEWER2>" in shown
        assert "2 of 2 approvals" in shown
        assert stack.ephemerals(REVIEWER2) == []  # the deciding click needs no ephemeral


async def test_a_tally_update_sent_again_after_the_decision_does_not_bring_buttons_back(
    redis_url: str, tmp_path: Path
) -> None:
    """The first approval's "1 of 2" update meets a 429 and waits its Retry-After; the
    second approval decides, and its update lands first. The tally, sent again, lands last:
    it must not leave a decided request's message with Approve and Reject on it."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"tool=issue_refund channel={CHANNEL} quorum=2")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        stack.standin.inject("chat.update", status=429, retry_after=1)
        await stack.click(REVIEWER, request, blocks.APPROVE)
        await eventually(lambda: bool(stack.standin.calls_to("chat.update")) or None)
        await stack.click(REVIEWER2, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        await outbox_drained(stack)  # every update sent, the tally's retry included
        message = stack.message(CHANNEL, request.message_ts)
        assert not any(b["type"] == "actions" for b in message["blocks"]), message
        assert "2 of 2 approvals" in str(message["blocks"])


async def test_a_tally_sent_again_because_the_state_moved_on_is_read_again_too(
    redis_url: str, tmp_path: Path
) -> None:
    """Quorum 3. The first vote's tally meets a 429; the second's lands; the first's retry
    lands, is found behind, and is followed by the current tally, which Slack is slow to
    take, and the deciding vote's update lands meanwhile: what lands last is read again."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"tool=issue_refund channel={CHANNEL} quorum=3")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        def updates() -> int | None:
            return len(stack.standin.calls_to("chat.update")) or None

        stack.standin.inject("chat.update", status=429, retry_after=1)  # tally 1 waits 1 s
        await stack.click(REVIEWER, request, blocks.APPROVE)
        await eventually(lambda: (updates() or 0) >= 1 or None)
        await stack.click(REVIEWER2, request, blocks.APPROVE)  # tally 2 lands at once
        await eventually(lambda: (updates() or 0) >= 2 or None)
        stack.standin.inject("chat.update", status=200, delay=0.0)  # tally 1's retry
        stack.standin.inject("chat.update", status=200, delay=2.5)  # then tally 2, slowly
        await eventually(lambda: (updates() or 0) >= 4 or None)
        await stack.click(ADMIN, request, blocks.APPROVE)  # decides; its update lands first
        await stack.run_status(run_id, "succeeded")
        await outbox_drained(stack)
        message = stack.message(CHANNEL, request.message_ts)
        assert not any(b["type"] == "actions" for b in message["blocks"]), message
        assert "3 of 3 approvals" in str(message["blocks"])


async def test_requester_may_not_approve_their_own_request_by_default(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.requested_by == REQUESTER
        await stack.click(REQUESTER, request, blocks.APPROVE)
        [text] = await stack.wait_ephemerals(REQUESTER)
        assert "your own request" in text
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and current.approvals == []
        # Reject by the requester is refused as well: no modal is opened.
        await stack.click(REQUESTER, request, blocks.REJECT)
        await stack.wait_ephemerals(REQUESTER, 2)
        assert stack.standin.calls_to("views.open") == []
        assert stack.effects.count("refund") == 0


async def test_requester_may_approve_when_the_route_says_self_yes(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"agent=refund-* channel={CHANNEL} self=yes")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.route.allow_self_approval is True
        await stack.click(REQUESTER, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None
        assert decided.status == "approved" and decided.decided_by == REQUESTER
        assert stack.effects.count("refund") == 1
        assert stack.ephemerals(REQUESTER) == []


async def test_outsider_refused_and_group_member_allowed_when_route_names_reviewers(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"tool=issue_refund channel={CHANNEL} reviewers=U0REVIEWER,S0REVIEWERS")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        await stack.click(OUTSIDER, request, blocks.APPROVE)
        [refusal] = await stack.wait_ephemerals(OUTSIDER)
        assert "not a reviewer" in refusal
        assert "<@U0REVIEWER>" in refusal and "S0REVIEWERS" in refusal
        await stack.click(OUTSIDER, request, blocks.REJECT)
        await stack.wait_ephemerals(OUTSIDER, 2)
        assert stack.standin.calls_to("views.open") == []
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        # U0REVIEWER2 is not listed by id: only the group's membership lets them decide.
        await stack.click(REVIEWER2, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        lookups = stack.standin.calls_to("usergroups.users.list")
        assert lookups and lookups[0]["usergroup"] == "S0REVIEWERS"
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.decided_by == REVIEWER2
        assert stack.effects.count("refund") == 1


async def test_double_click_by_the_same_reviewer_tells_who_approved(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        first, second = await asyncio.gather(
            stack.click(REVIEWER, request, blocks.APPROVE),
            stack.click(REVIEWER, request, blocks.APPROVE),
        )
        assert first.status == second.status == 200
        [text] = await stack.wait_ephemerals(REVIEWER)
        assert "already *approved* by <@U0REVIEWER>" in text
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1
        events = await _audit_events(stack, run_id, request.request_id)
        assert events.count("approved") == 1


async def test_eight_concurrent_clicks_give_exactly_one_decision(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        workspace = stack.standin.workspace
        extra = [f"U0CROWD{i}" for i in range(4)]
        for user_id in extra:
            workspace.users.append(User(user_id, user_id.lower(), user_id, "reviewer"))
            channel = workspace.channel(CHANNEL)
            assert channel is not None
            channel.members.append(user_id)
        clickers = [REVIEWER, REVIEWER2, ADMIN, OUTSIDER, *extra]
        assert len(set(clickers)) == 8

        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        replies = await asyncio.gather(
            *(stack.click(user, request, blocks.APPROVE) for user in clickers)
        )
        assert [r.status for r in replies] == [200] * 8

        await stack.run_status(run_id, "succeeded")
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.status == "approved"
        winner = decided.decided_by
        assert winner in clickers
        assert decided.approvals == [winner]
        assert stack.effects.count("refund") == 1
        events = await _audit_events(stack, run_id, request.request_id)
        assert events.count("approved") == 1

        losers = [u for u in clickers if u != winner]

        async def all_told() -> bool:
            return all(stack.ephemerals(u) for u in losers)

        await eventually(all_told)
        for user in losers:
            [text] = stack.ephemerals(user)
            assert f"already *approved* by <@{winner}>" in text, (user, text)
        assert stack.ephemerals(winner) == []
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert f"Approved by <@{winner}>" in str(message["blocks"])
        assert EXPIRED_BY not in str(message["blocks"])


async def test_concurrent_clicks_with_quorum_two_record_exactly_two_approvals(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} quorum=2"), ADMIN)
        clickers = [REVIEWER, REVIEWER2, ADMIN, OUTSIDER]
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await asyncio.gather(*(stack.click(u, request, blocks.APPROVE) for u in clickers))

        await stack.run_status(run_id, "succeeded")
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.status == "approved"
        assert len(decided.approvals) == 2 and len(set(decided.approvals)) == 2
        assert decided.decided_by == decided.approvals[1]
        assert stack.effects.count("refund") == 1
        events = await _audit_events(stack, run_id, request.request_id)
        assert events.count("approval") == 1 and events.count("approved") == 1

        # The first approver hears "1 of 2", the deciding one nothing, the two late ones
        # that it was already approved.
        first, second = decided.approvals
        late = [u for u in clickers if u not in decided.approvals]

        async def all_told() -> bool:
            return all(stack.ephemerals(u) for u in [first, *late])

        await eventually(all_told)
        # "1 of 2", or "2 of 2" when the second approval landed before the re-read.
        assert "Your approval is recorded" in stack.ephemerals(first)[0]
        assert stack.ephemerals(second) == []
        for user in late:
            assert "already *approved*" in stack.ephemerals(user)[0]


async def test_failed_group_lookup_fails_closed_and_recovers(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(parse_spec(f"channel={CHANNEL} reviewers=S0REVIEWERS"), ADMIN)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        stack.standin.inject("usergroups.users.list", status=500)
        await stack.click(REVIEWER2, request, blocks.APPROVE)
        [refusal] = await stack.wait_ephemerals(REVIEWER2)
        assert "Not allowed" in refusal
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        await stack.click(REVIEWER2, request, blocks.APPROVE)  # Slack is back: allowed
        await stack.run_status(run_id, "succeeded")
        assert len(stack.standin.calls_to("usergroups.users.list")) == 2
        assert stack.effects.count("refund") == 1


async def test_click_is_answered_within_three_seconds_with_slow_group_lookups(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.workspace.usergroups.append(UserGroup("S0OPSTEAM", "ops", "Ops", [ADMIN]))
        await stack.bot.routes.add(
            parse_spec(f"channel={CHANNEL} reviewers=S0OPSTEAM,S0REVIEWERS"), ADMIN
        )
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        client = stack.bot.client
        lookup = client.usergroups_users_list

        async def slow_lookup(**kwargs: Any) -> Any:  # Slack answering slowly, but answering
            await asyncio.sleep(1.6)
            return await lookup(**kwargs)

        client.usergroups_users_list = slow_lookup
        timed_out = False
        try:
            reply = await stack.click(REVIEWER2, request, blocks.APPROVE)
            assert reply.status == 200
        except AppUnreachable:
            timed_out = True
        await stack.run_status(run_id, "succeeded")  # the approval counted either way
        assert stack.effects.count("refund") == 1
        assert not timed_out, "Slack showed the reviewer a timeout though the approval counted"
