"""A request whose sealed content cannot be opened (its key was dropped from the ring too
early) is shown as "[unreadable: <why>]" in Slack, `/approvals` and the HTTP API; no
listener fails on it; it cannot be approved, only rejected, and nothing of it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.sealed_fields import FieldSealer
from bot import blocks
from tests.support.replies import flat
from tests.support.stack import API_TOKEN, CHANNEL, REVIEWER, Stack, running_stack

UNREADABLE = "[unreadable: sealed under key 'gone', which is not in COUNTERSIGN_ENCRYPTION_KEYS]"


async def api_get(stack: Stack, path: str) -> Any:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.url + path, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def slash(stack: Stack, text: str) -> str:
    reply = await stack.approvals(REVIEWER, CHANNEL, text)
    assert reply.status == 200, reply.body
    body = json.loads(reply.body)
    return flat(body["text"], body.get("blocks"))  # the pending list is blocks


async def test_unreadable_arguments_are_shown_as_such_and_can_only_be_rejected(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", "delete /srv/contract.docx")
        [request] = await stack.pending_requests(run_id)
        gone = FieldSealer(KeyRing.parse(generate_key("gone")))
        sealed = gone.seal(
            '{"path": "/srv/contract.docx"}',
            run_id=run_id,
            record_id=request.request_id,
            field="arguments",
        )
        await stack.host.redis.hset(K.Keys(run_id).request(request.request_id), "arguments", sealed)

        shown = await slash(stack, f"show {request.request_id}")
        assert UNREADABLE in shown and "destructive: deletes a file" in shown
        assert request.request_id in await slash(stack, "pending")

        approve = await stack.click(REVIEWER, request, blocks.APPROVE)
        assert approve.status == 200
        told = (await stack.wait_ephemerals(REVIEWER, 3))[-1]  # after the two slash answers
        assert "arguments could not be decrypted" in told and "reject it" in told
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        assert (await stack.click(REVIEWER, request, blocks.REJECT)).status == 200
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "unreadable"}}
        )
        assert submitted.status == 200
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert UNREADABLE in json.dumps(message["blocks"]).replace('\\"', '"')
        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded" and info.output == "Cleanup finished: unreadable"
        assert stack.effects.count("delete_file") == 0

        detail = await api_get(stack, f"/api/v1/runs/{run_id}")
        [approval] = detail["approvals"]
        assert approval["arguments"] == UNREADABLE and approval["status"] == "rejected"
        assert detail["tool_calls"][0]["arguments"] == {"path": "/srv/contract.docx"}
