"""Routing by agent, tool and severity: where the message lands and who may decide."""

from __future__ import annotations

from pathlib import Path

from agent_host.durable.route_book import parse_spec
from bot import blocks
from tests.support.stack import ADMIN, CHANNEL, OPS, REVIEWER, Stack, running_stack


async def _add(stack: Stack, spec: str) -> str:
    return (await stack.bot.routes.add(parse_spec(spec), ADMIN)).id


async def test_requests_land_in_the_first_matching_route_or_the_default_channel(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        r1 = await _add(stack, f"agent=repo-* severity=critical channel={OPS} reviewers={ADMIN}")
        r2 = await _add(stack, f"tool=delete_* channel={CHANNEL} reviewers={REVIEWER}")
        r3 = await _add(stack, f"tool=issue_refund severity=critical channel={OPS}")
        assert (r1, r2, r3) == ("r1", "r2", "r3")

        repo = await stack.start_run("repo-admin", "delete repos scratch, acme-prod")
        cleanup = await stack.start_run("cleanup-agent", "delete /old.txt")
        refund = await stack.start_run("refund-agent", "refund order 123")
        [prod] = await stack.pending_requests(repo)
        [old] = await stack.pending_requests(cleanup)
        [money] = await stack.pending_requests(refund)

        # repo-admin's critical call: r1 (r2's tool glob matches too, but r1 comes first).
        assert prod.arguments == {"name": "acme-prod"} and prod.severity == "critical"
        assert prod.route.route_id == "r1" and prod.message_channel == OPS
        assert prod.route.reviewers == (ADMIN,)
        assert "delete_repo" in str(stack.message(OPS, prod.message_ts)["blocks"])
        # cleanup-agent is not repo-*: r2.
        assert old.route.route_id == "r2" and old.message_channel == CHANNEL
        assert old.route.reviewers == (REVIEWER,)
        # issue_refund is only high, below r3's minimum: no rule, the default channel.
        assert money.severity == "high"
        assert money.route.route_id == "default" and money.message_channel == CHANNEL
        assert money.route.reviewers == ()

        ops_tops = stack.channel_messages(OPS)
        approvals_tops = stack.channel_messages(CHANNEL)
        assert [m["ts"] for m in ops_tops] == [prod.message_ts]
        assert sorted(m["ts"] for m in approvals_tops) == sorted([old.message_ts, money.message_ts])
        # The turn settles after its pause: not even the allowed `scratch` has run yet.
        assert stack.effects.count("delete_repo") == 0

        # The route's reviewers apply: REVIEWER may not decide r1's request, ADMIN may.
        await stack.click(REVIEWER, prod, blocks.APPROVE)
        [refusal] = await stack.wait_ephemerals(REVIEWER)
        assert "not a reviewer" in refusal
        await stack.click(ADMIN, prod, blocks.APPROVE)
        await stack.run_status(repo, "succeeded")
        deleted = [e["name"] for e in stack.effects.all_events() if e["kind"] == "delete_repo"]
        assert sorted(deleted) == ["acme-prod", "scratch"]
        [outcome] = await stack.thread_replies(OPS, prod.message_ts)
        assert "acme-prod" in outcome["text"]


async def test_removing_a_route_changes_where_later_requests_go(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _add(stack, f"agent=refund-agent channel={OPS}")
        first = await stack.start_run("refund-agent", "refund order 123")
        [before] = await stack.pending_requests(first)
        assert before.message_channel == OPS

        await stack.bot.routes.remove("r1", ADMIN)
        second = await stack.start_run("refund-agent", "refund order 200")
        [after] = await stack.pending_requests(second)
        assert after.message_channel == CHANNEL
        # The earlier request keeps the route it was created with.
        current = await stack.host.store.get_request(before.request_id)
        assert current is not None and current.route.destination == OPS
