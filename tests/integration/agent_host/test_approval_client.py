"""The Python client of the approval API (`agent_host.client`) against a whole stack: a
durable `pause()` decided by a signed click, the wait resumed by a new client after a
"crash", an answer to a question, and expiry as a value."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from agent_host import ApprovalClient, ApprovalClientError, ApprovalResult
from agent_host.approvals import DEFAULT_EXPIRY_SECONDS
from agent_host.approvals.external import external_call_hash
from bot import blocks
from tests.support.keyspace import pass_deadline
from tests.support.stack import API_TOKEN, REVIEWER, Stack, running_stack
from tests.support.waiting import eventually

ARGS = {"path": "/var/log/old"}


async def pending_id(stack: Stack) -> str:
    async def one() -> str | None:
        page = await stack.host.store.list_pending()
        return page.requests[0].request_id if page.requests else None

    return await eventually(one)


async def test_pause_returns_the_decision_of_a_click(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        async with ApprovalClient(stack.url, API_TOKEN) as client:
            paused = asyncio.create_task(
                client.pause(
                    tool="delete_file",
                    arguments=ARGS,
                    reason="deletes logs",
                    external_id="cleanup-1",
                    agent="cron-cleaner",
                )
            )
            request = await stack.posted(await pending_id(stack))
            assert not paused.done()
            # No expiry given: the route's (the default route's, here), not one of the client's.
            assert round(request.expires_at - request.created_at) == DEFAULT_EXPIRY_SECONDS
            await stack.click(REVIEWER, request, blocks.APPROVE)
            result = await paused
        assert result == ApprovalResult(
            decision="approved",
            feedback="",
            decided_by=REVIEWER,
            call_hash=external_call_hash("cron-cleaner", "delete_file", ARGS),
            request_id=request.request_id,
        )
        assert result.approved


async def test_after_a_crash_a_new_client_waits_for_the_same_decision(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        # The first process creates the request and dies before it is decided.
        code = (
            "import asyncio, sys\n"
            "from agent_host import ApprovalClient\n"
            "async def main():\n"
            "    async with ApprovalClient(sys.argv[1], sys.argv[2]) as c:\n"
            "        await c.pause(tool='delete_file', arguments={'path': '/tmp/x'},\n"
            "                      external_id='job-42', agent='cron-cleaner')\n"
            "asyncio.run(main())\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stack.url, API_TOKEN
        )
        try:
            request = await stack.posted(await pending_id(stack))
        finally:
            proc.kill()
            await proc.wait()
        # A new process: it finds the request by its external id and waits.
        async with ApprovalClient(stack.url, API_TOKEN) as client:
            waiting = asyncio.create_task(client.wait_for(external_id="job-42"))
            await stack.click(REVIEWER, request, blocks.APPROVE)
            result = await waiting
            assert result.decision == "approved" and result.request_id == request.request_id
            # pause() again with the same external id: the same request, already decided.
            again = await client.pause(
                tool="delete_file",
                arguments={"path": "/tmp/x"},
                external_id="job-42",
                agent="cron-cleaner",
            )
            assert again == result
        assert (await stack.host.store.list_pending()).requests == []


async def test_expiry_is_a_decision_not_an_exception(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        async with ApprovalClient(stack.url, API_TOKEN) as client:
            paused = asyncio.create_task(
                client.pause(tool="delete_file", arguments=ARGS, expires_in_hours=1)
            )
            request_id = await pending_id(stack)
            await pass_deadline(stack.host.redis, request_id)
            result = await paused
        assert result.decision == "expired" and result.decided_by


async def test_a_question_is_answered_through_the_webhook(redis_url: str, tmp_path: Path) -> None:
    import hashlib
    import hmac
    import json

    import aiohttp

    secret = "s3cret"
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=secret) as stack:
        async with ApprovalClient(stack.url, API_TOKEN) as client:
            created = await client.request_approval(
                tool="ask_operator", arguments={}, question="Which region?", agent="support"
            )
            assert (await client.get(created["request_id"]))["status"] == "pending"
            raw = json.dumps(
                {"requestId": created["request_id"], "decision": "approved", "feedback": "eu"}
            ).encode()
            signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    f"{stack.url}/api/v1/webhooks/approval-response",
                    data=raw,
                    headers={"X-Webhook-Signature": signature},
                ) as resp,
            ):
                assert resp.status == 200
            result = await client.wait_for(request_id=created["request_id"])
        assert result.decision == "answered" and result.feedback == "eu"


async def test_refusals_are_errors_that_say_why(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        async with ApprovalClient(stack.url, "wrong-token") as client:
            with pytest.raises(ApprovalClientError, match=r"401.*bearer token") as caught:
                await client.request_approval(tool="t", arguments={})
            assert caught.value.status == 401
        async with ApprovalClient(stack.url, API_TOKEN) as client:
            with pytest.raises(ApprovalClientError, match="no approval request was created"):
                await client.wait_for(external_id="never-made")
