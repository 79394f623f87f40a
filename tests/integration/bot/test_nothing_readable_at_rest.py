"""Nothing readable at rest: the example agents and an external request run end to end over
the HTTP API, signed Slack clicks, modals and the webhook, with a canary string in every
piece of content (inputs, tool arguments, reasons, a question, a rejection's reason, an
answer, feedback, an external id). Then every key of the Redis database (every type, every
field, member and stream entry) and every file of its data dir (its append-only file) are
read raw: the canary is nowhere, though every reader shows it. The same after `keys rotate`,
which re-seals every value under the new key and has the AOF rewritten."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agent_host.approvals import FixedRouter
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.durable.store import RunStore
from bot import blocks
from tests.support.at_rest import files_holding, keys_holding, raw_contents, sealed_kids
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.signing import webhook_signature
from tests.support.stack import (
    API_TOKEN,
    CHANNEL,
    REQUESTER,
    REVIEWER,
    Stack,
    running_stack,
    serve_app,
)
from tests.support.waiting import eventually

SECRET = "at-rest-webhook-secret"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
async def received() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A callback receiver on loopback: its URL and the bodies it got."""
    bodies: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(json.loads(await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner, url = await serve_app(app)
    try:
        yield f"{url}/hook", bodies
    finally:
        await runner.cleanup()


class Api:
    def __init__(self, http: aiohttp.ClientSession, stack: Stack) -> None:
        self.http, self.url = http, stack.url

    async def call(self, method: str, path: str, status: int, **kwargs: Any) -> Any:
        async with self.http.request(method, self.url + path, headers=AUTH, **kwargs) as resp:
            body = await resp.json()
            assert resp.status == status, body
            return body

    async def webhook(self, request_id: str, decision: str, feedback: str) -> None:
        raw = json.dumps({"requestId": request_id, "decision": decision, "feedback": feedback})
        async with self.http.post(
            f"{self.url}/api/v1/webhooks/approval-response",
            data=raw.encode(),
            headers={"X-Webhook-Signature": webhook_signature(raw.encode(), SECRET)},
        ) as resp:
            assert resp.status == 200, await resp.text()


async def test_no_content_is_readable_in_redis_or_its_aof_before_or_after_rotation(
    redis_server_factory: RedisServerFactory,
    tmp_path: Path,
    received: tuple[str, list[dict[str, Any]]],
) -> None:
    # AOF on, every write synced, and a plain (not RDB, so never compressed) base file after a
    # rewrite: whatever was written is in the file as it was written.
    server = redis_server_factory(appendfsync="always", extra_args=["--aof-use-rdb-preamble", "no"])
    canary = f"cnry{secrets.token_hex(8)}"
    callback_url, callbacks = received
    callback_host = callback_url.split("/")[2]
    async with (
        running_stack(
            server.url,
            tmp_path,
            COUNTERSIGN_WEBHOOK_SECRET=SECRET,
            COUNTERSIGN_CALLBACK_HOSTS=callback_host,
        ) as stack,
        aiohttp.ClientSession() as http,
    ):
        api = Api(http, stack)
        redis = stack.host.redis

        # cleanup-agent, started over the HTTP API: the canary is in its input and in the
        # path it asks to delete; approved by a signed click; the tool runs, its result and
        # the run's output hold the canary too.
        started = await api.call(
            "POST",
            "/api/v1/runs",
            202,
            json={"agent": "cleanup-agent", "input": f"delete /srv/{canary}-a.docx"},
        )
        cleanup = started["run_id"]
        [request] = await stack.pending_requests(cleanup)
        assert canary in json.dumps(stack.message(CHANNEL, request.message_ts))  # shown
        assert (await stack.click(REVIEWER, request, blocks.APPROVE)).status == 200

        # repo-admin: a production repository named with the canary, rejected in the modal
        # with the canary in the reason.
        started = await api.call(
            "POST",
            "/api/v1/runs",
            202,
            json={
                "agent": "repo-admin",
                "input": f"delete repo prod-{canary}",
                "requested_by": REQUESTER,
            },
        )
        repo = started["run_id"]
        [request] = await stack.pending_requests(repo)
        await stack.click(REVIEWER, request, blocks.REJECT)
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: f"not {canary}, ever"}}
        assert (await stack.standin.submit_view(REVIEWER, view["id"], reason)).status == 200

        # support-agent: the question holds the canary; answered in the modal with it.
        started = await api.call(
            "POST",
            "/api/v1/runs",
            202,
            json={"agent": "support-agent", "input": f"where is {canary}?"},
        )
        support = started["run_id"]
        [question] = await stack.pending_requests(support)
        shown = await stack.approvals(REVIEWER, CHANNEL, f"show {question.request_id}")
        assert canary in shown.body
        await stack.click(REVIEWER, question, blocks.ANSWER)
        view = await stack.opened_view(REVIEWER, blocks.ANSWER_MODAL)
        answer = {blocks.ANSWER_BLOCK: {blocks.ANSWER_INPUT: f"{canary} ships Monday"}}
        assert (await stack.standin.submit_view(REVIEWER, view["id"], answer)).status == 200

        # An agent that runs elsewhere: the canary in its arguments, reason and external id;
        # the webhook asks for changes with the canary in the feedback; the callback gets it.
        external = await api.call(
            "POST",
            "/api/v1/approvals",
            201,
            json={
                "agent": "billing-bot",
                "tool": "issue_refund",
                "arguments": {"customer": f"{canary} Ltd", "amount": 40},
                "reason": f"{canary} asked twice",
                "external_id": f"refund-{canary}",
                "callback_url": callback_url,
            },
        )
        await stack.posted(external["request_id"])
        await api.webhook(external["request_id"], "request_changes", f"ask {canary} first")
        asked = await api.call(
            "POST",
            "/api/v1/approvals",
            201,
            json={"agent": "billing-bot", "tool": "ask", "arguments": {}, "question": f"{canary}?"},
        )
        await stack.posted(asked["request_id"])
        await api.webhook(asked["request_id"], "approved", f"{canary}, yes")

        for run_id in (cleanup, repo, support):
            assert (await stack.run_status(run_id, "succeeded", "failed")).status == "succeeded"
        assert stack.effects.count("delete_file") == 1 and stack.effects.count("delete_repo") == 0
        [called] = await eventually(lambda: callbacks or None)
        assert called["feedback"] == f"ask {canary} first"

        # Every reader shows the content...
        detail = await api.call("GET", f"/api/v1/runs/{cleanup}", 200)
        assert canary in detail["output"] and canary in json.dumps(detail["approvals"])
        assert canary in json.dumps(detail["tool_calls"])
        detail = await api.call("GET", f"/api/v1/runs/{repo}", 200)
        assert f"not {canary}, ever" in json.dumps(detail["audit"])
        changes = await api.call("GET", f"/api/v1/approvals/{external['request_id']}", 200)
        assert changes["feedback"] == f"ask {canary} first"
        assert changes["arguments"]["customer"] == f"{canary} Ltd"
        answered = await api.call("GET", f"/api/v1/approvals/{asked['request_id']}", 200)
        assert answered["feedback"] == f"{canary}, yes"

        # ... and nothing at rest holds it.
        contents = await raw_contents(redis)
        kinds = {kind for kind, _ in contents.values()}
        assert {"string", "hash", "list", "set", "zset", "stream"} <= kinds, kinds
        assert len(contents) > 40
        assert await keys_holding(redis, canary) == []
        assert files_holding(server.data_dir, canary) == []
        # (the scan sees what is clear: the run ids are found, in Redis and in the AOF)
        assert await keys_holding(redis, cleanup) != []
        assert files_holding(server.data_dir, cleanup) != []

        # Rotation: every sealed value under the new key, the AOF rewritten, still no canary.
        old_keys = stack.host.settings.encryption_keys
        new_key = generate_key("rotated")
        report = await rotate_checkpoints(redis, KeyRing.parse(f"{new_key},{old_keys}"))
        assert report.damaged == {} and report.fields > 20 and report.rotated == 3
        assert report.aof == "append-only file rewritten"
        assert set.union(*(await sealed_kids(redis)).values()) == {"rotated"}
        assert await keys_holding(redis, canary) == []
        assert await eventually(lambda: files_holding(server.data_dir, canary) == [])
        assert files_holding(server.data_dir, cleanup) != []

        # The new key alone reads everything back.
        store = RunStore(redis, KeyRing.parse(new_key), FixedRouter(CHANNEL))
        info = await store.run_info(cleanup)
        assert info is not None and info.output == f"Cleanup finished: Deleted /srv/{canary}-a.docx"
        [decided] = await store.run_requests(repo)
        assert decided.arguments == {"name": f"prod-{canary}"} and decided.unreadable == {}
        audit = json.dumps(await store.audit(repo))
        assert f"not {canary}, ever" in audit and "unreadable" not in audit
        changed = await store.get_request(external["request_id"])
        assert changed is not None and changed.reason == f"{canary} asked twice"
