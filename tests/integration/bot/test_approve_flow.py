"""The reviewer's path in Slack, over real HTTP on loopback with a real Redis."""

from __future__ import annotations

from pathlib import Path

from bot import blocks
from tests.support.stack import CHANNEL, OUTSIDER, REQUESTER, REVIEWER, running_stack
from tests.support.waiting import eventually


async def test_approve_updates_message_resumes_run_and_posts_outcome(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.message_channel == CHANNEL
        posted = stack.message(CHANNEL, request.message_ts)
        actions = [b for b in posted["blocks"] if b["type"] == "actions"]
        assert next(e["text"]["text"] for e in actions[0]["elements"]) == "Approve"

        reply = await stack.click(REVIEWER, request, blocks.APPROVE)
        assert reply.status == 200

        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1

        async def updated() -> dict | None:
            message = stack.message(CHANNEL, request.message_ts)
            has_buttons = any(b["type"] == "actions" for b in message["blocks"])
            return None if has_buttons else message

        message = await eventually(updated)
        assert REVIEWER in str(message["blocks"])

        async def outcome() -> list | None:
            return stack.thread(CHANNEL, request.message_ts) or None

        [thread_reply] = await eventually(outcome)
        assert "Refund issued" in thread_reply["text"]


async def test_outsider_and_self_approval_are_refused_and_change_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await stack.bot.routes.add(
            __import__("agent_host.durable.route_book", fromlist=["parse_spec"]).parse_spec(
                f"tool=issue_refund channel={CHANNEL} reviewers=U0REVIEWER,S0REVIEWERS"
            ),
            "U0ADMIN",
        )
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(OUTSIDER, request, blocks.APPROVE)
        await stack.click(REQUESTER, request, blocks.APPROVE)

        async def refused() -> list | None:
            texts = stack.ephemerals(OUTSIDER) + stack.ephemerals(REQUESTER)
            return texts if len(texts) == 2 else None

        texts = await eventually(refused)
        assert "not a reviewer" in texts[0]
        assert "your own request" in texts[1]
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"
        assert stack.effects.count("refund") == 0
