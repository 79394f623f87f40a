"""Requests nobody decides in time expire: message updated, run told it was not approved."""

from __future__ import annotations

import time
from pathlib import Path

from agent_host.durable.sweeper import EXPIRED_BY
from tests.support.keyspace import pass_deadline
from tests.support.stack import ADMIN, CHANNEL, running_stack


async def test_request_expires_on_a_short_route_expiry(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        added = await stack.approvals(
            ADMIN, CHANNEL, f"route add tool=issue_refund channel={CHANNEL} expiry=1s"
        )
        assert "Added route" in added.json()["text"]
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.route.expiry_seconds == 1
        assert abs(request.expires_at - request.created_at - 1) < 0.5  # deadline: Redis clock

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert "not approved" in info.output
        assert stack.effects.count("refund") == 0

        expired = await stack.host.store.get_request(request.request_id)
        assert expired is not None
        assert expired.status == "expired" and expired.decided_by == EXPIRED_BY
        assert expired.decided_at is not None and expired.decided_at >= request.expires_at

        message = await stack.decided_message(CHANNEL, request.message_ts)
        shown = str(message["blocks"])
        assert "Expired" in shown and "the call was not run" in shown
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert "expired before anyone decided" in outcome["text"]
        pending = await stack.approvals(ADMIN, CHANNEL, "pending all")
        assert "Nothing is waiting" in pending.json()["text"]


async def test_question_expires_when_its_deadline_passes(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("support-agent", "where is my parcel?")
        [request] = await stack.pending_requests(run_id)
        assert request.expires_at > time.time() + 3600  # the default expiry is long
        await pass_deadline(stack.host.redis, request.request_id)

        expired = await stack.decided(request.request_id)
        assert expired.status == "expired"
        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert stack.effects.count("support_reply") == 1
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert "the question went unanswered" in str(message["blocks"])
