"""The approval webhook and the API with an approval's comment (`feedback` on `approved`) and
`edited_arguments`: the same approval service path and checks as Slack's edit form, the
decision as the API shows it, the run resumed with the edited call once, and the runner
refusing at resume an edit that does not match what was recorded."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host import ApprovalClient
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.host import Host
from agent_host.examples import ExampleEffects
from agent_host.http.application import create_app
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.decisions import Approve
from tests.support import host_env
from tests.support.edit_agents import PAYOUT_AGENT, with_payouts
from tests.support.host_env import Env, FakeClock
from tests.support.signing import webhook_signature
from tests.support.stack import API_TOKEN, running_stack

TOKEN = "test-api-token"
SECRET = "test-webhook-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Api:
    client: TestClient[Any, Any]
    host: Host
    env: Env

    async def paused(self, agent: str, text: str) -> tuple[str, str]:
        resp = await self.client.post(
            "/api/v1/runs", json={"agent": agent, "input": text}, headers=AUTH
        )
        assert resp.status == 202, await resp.text()
        run_id = str((await resp.json())["run_id"])
        await self.env.drain()
        (request,) = await self.env.requests(run_id)
        return run_id, request.request_id

    async def webhook(self, body: dict[str, Any]) -> ClientResponse:
        raw = json.dumps(body).encode()
        return await self.client.post(
            "/api/v1/webhooks/approval-response",
            data=raw,
            headers={
                "X-Webhook-Signature": webhook_signature(raw, SECRET),
                "Content-Type": "application/json",
            },
        )

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/api/v1/runs/{run_id}", headers=AUTH)
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())

    async def still_pending(self, request_id: str, effect: str) -> None:
        current = await self.host.store.get_request(request_id)
        assert current is not None and current.status == "pending" and current.approvals == []
        assert self.env.effects.count(effect) == 0


@contextlib.asynccontextmanager
async def serving_api(
    redis: Redis, tmp_path: Path, registry: Callable[[ExampleEffects], AgentRegistry]
) -> AsyncIterator[Api]:
    """The HTTP API (webhook secret and API token set) over a host of `registry`'s agents."""
    effects = ExampleEffects()
    host, _ = host_env.make_host(
        redis,
        tmp_path,
        registry=registry(effects),
        COUNTERSIGN_API_TOKEN=TOKEN,
        COUNTERSIGN_WEBHOOK_SECRET=SECRET,
    )
    host.store.clock = FakeClock()
    env = Env(redis, host.keyring, host.store, host.runner, effects)
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
        yield Api(client, host, env)


@pytest_asyncio.fixture
async def api(redis: Redis, tmp_path: Path) -> AsyncIterator[Api]:
    async with serving_api(redis, tmp_path, with_payouts) as served:
        yield served


async def error_of(resp: ClientResponse, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert isinstance(body["error"], str) and "nothing was decided" in body["error"]
    return dict(body)


def tool_results(state: Any, tool: str) -> list[str]:
    return [m.content for m in state.transcript if m.role == "tool" and m.name == tool]


async def test_feedback_on_approved_is_the_approvals_comment(api: Api) -> None:
    run_id, rid = await api.paused("refund-agent", "refund order 123")
    comment = "Verified the double charge in Stripe. Refund is correct."
    resp = await api.webhook({"requestId": rid, "decision": "approved", "feedback": comment})
    assert resp.status == 200 and (await resp.json())["status"] == "processed"
    await api.env.drain()

    detail = await api.run(run_id)
    assert detail["status"] == "succeeded"
    [approval] = detail["approvals"]
    assert approval["decision"]["comment"] == comment
    assert approval["decision"]["edited_arguments"] is None
    [result] = tool_results(await api.env.final_state(run_id), "issue_refund")
    assert result.endswith(f"Reviewer webhook commented: {comment}")
    audit = [e for e in detail["audit"] if e.get("event") == "approved"]
    assert comment in audit[0]["detail"]


async def test_edited_arguments_run_once_as_edited_and_the_api_shows_both(api: Api) -> None:
    run_id, rid = await api.paused("refund-agent", "refund order 123")
    body = {
        "requestId": rid,
        "decision": "approved",
        "feedback": "half: one item was kept",
        "decidedBy": "finance-bot",
        "edited_arguments": {"amount": 21.25},
    }
    resp = await api.webhook(body)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    _, fingerprint = api.host.runner.agent("refund-agent")
    edited = {"order_id": "123", "amount": 21.25}
    assert answer["edited_arguments"] == edited
    assert answer["edited_hash"] == call_hash(fingerprint, "issue_refund", edited)

    replay = await api.webhook(body)  # a replayed delivery changes nothing
    assert (await replay.json())["status"] == "already_processed"
    await api.env.drain()
    await api.env.drain()
    refunds = [e for e in api.env.effects.events if e["kind"] == "refund"]
    assert [(e["order_id"], e["amount"]) for e in refunds] == [("123", 21.25)]

    detail = await api.run(run_id)
    [approval] = detail["approvals"]
    decision = approval["decision"]
    assert decision["call_hash"] == approval["call_hash"]  # the call as it was shown
    assert decision["original_arguments"] == {"order_id": "123", "amount": 42.5}
    assert decision["edited_arguments"] == edited and decision["edited_by"] == "webhook"
    assert decision["note"] == "finance-bot"
    [call] = [c for c in detail["tool_calls"] if c["tool"] == "issue_refund"]
    assert call["arguments"] == {"order_id": "123", "amount": 42.5}
    assert call["edited_arguments"] == edited
    assert "Refund issued: $21.25" in call["result"]
    assert "reviewer webhook edited the arguments" in call["result"]


async def test_bad_edited_arguments_are_refused_and_change_nothing(api: Api) -> None:
    _, rid = await api.paused("refund-agent", "refund order 123")
    invalid = await error_of(
        await api.webhook(
            {"requestId": rid, "decision": "approved", "edited_arguments": {"amount": "lots"}}
        ),
        400,
    )
    assert set(invalid["errors"]) == {"amount"}
    fixed = await error_of(
        await api.webhook(
            {"requestId": rid, "decision": "approved", "edited_arguments": {"order_id": "999"}}
        ),
        400,
    )
    assert fixed["errors"] == {"order_id": "issue_refund does not let a reviewer edit order_id"}
    for body in (
        {"requestId": rid, "decision": "rejected", "edited_arguments": {"amount": 1}},
        {"requestId": rid, "decision": "approved", "edited_arguments": [1]},
        {"requestId": rid, "decision": "approved", "editedArguments": {"amount": 1}},
    ):
        resp = await api.webhook(body)
        assert resp.status == 400, await resp.text()
    await api.env.drain()
    await api.still_pending(rid, "refund")


async def test_an_edit_that_would_raise_the_severity_is_refused(api: Api) -> None:
    _, rid = await api.paused(PAYOUT_AGENT, "pay 250")
    resp = await api.webhook(
        {"requestId": rid, "decision": "approved", "edited_arguments": {"amount": 5000}}
    )
    body = await error_of(resp, 409)
    assert "needs critical severity, above this request's high" in body["error"]
    await api.env.drain()
    await api.still_pending(rid, "payout")


async def test_the_runner_refuses_an_edit_that_does_not_match_what_was_recorded(
    api: Api,
) -> None:
    """An edit recorded, then changed in Redis before the resume (by hand, a bug, an old
    writer): the run fails closed with the reason and nothing runs."""
    run_id, rid = await api.paused(PAYOUT_AGENT, "pay 250")
    resp = await api.webhook(
        {"requestId": rid, "decision": "approved", "edited_arguments": {"amount": 200}}
    )
    assert resp.status == 200
    key = K.Keys(rid).request(rid)
    sealer, where = api.host.store.sealed.sealer, {"run_id": run_id, "record_id": rid}
    raw = as_text(await api.host.redis.hget(key, "decision") or b"")
    stored = Approve.model_validate_json(sealer.open(raw, **where, field="decision"))
    tampered = stored.model_copy(
        update={"edited_arguments": {**(stored.edited_arguments or {}), "amount": 999.0}}
    )
    # sealed as the store would: only a writer holding the key gets this far
    forged = sealer.seal(tampered.model_dump_json(), **where, field="decision")
    await api.host.redis.hset(key, "decision", forged)
    await api.env.drain()

    detail = await api.run(run_id)
    assert detail["status"] == "failed"
    assert "edited arguments are not the ones recorded" in detail["error"]
    assert "nothing was run" in detail["error"]
    assert api.env.effects.count("payout") == 0


async def test_an_external_request_takes_a_comment_but_no_edit(
    redis_url: str, tmp_path: Path
) -> None:
    """Its caller reads the comment as `feedback`, with the client as with the API."""
    async with (
        running_stack(redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET) as stack,
        ApprovalClient(stack.url, API_TOKEN) as client,
    ):
        created = await client.request_approval(
            tool="issue_refund", arguments={"order_id": 7, "amount": 40}, agent="billing-bot"
        )
        rid = str(created["request_id"])

        async def webhook(body: dict[str, Any]) -> Any:
            raw = json.dumps(body).encode()
            session = client._session
            assert session is not None
            headers = {"X-Webhook-Signature": webhook_signature(raw, SECRET)}
            url = f"{stack.url}/api/v1/webhooks/approval-response"
            async with session.post(url, data=raw, headers=headers) as resp:
                return resp.status, await resp.json()

        status, body = await webhook(
            {"requestId": rid, "decision": "approved", "edited_arguments": {"amount": 1}}
        )
        assert status == 409 and "runs elsewhere" in body["error"]
        assert (await client.get(rid))["status"] == "pending"

        status, _ = await webhook({"requestId": rid, "decision": "approved", "feedback": "ok: 40"})
        assert status == 200
        result = await client.wait_for(request_id=rid)
        assert result.decision == "approved" and result.feedback == "ok: 40"
        shown = await client.get(rid)
        assert shown["feedback"] == "ok: 40" and shown["decision"]["comment"] == "ok: 40"


async def test_the_service_completes_an_edit_itself_and_ignores_what_a_caller_claims(
    api: Api,
) -> None:
    """Only `edited_arguments` come from the decider: the arguments shown, who edited and
    the edited call's hash are the approval service's, whatever a caller put in them."""
    _, rid = await api.paused("refund-agent", "refund order 123")
    _, other = await api.paused("refund-agent", "refund order 200")
    forged = {
        "original_arguments": {"order_id": "123", "amount": 1.0},
        "edited_hash": "f" * 64,
        "edited_by": "U0SOMEONE_ELSE",
    }
    result = await api.host.approvals.decide(
        rid,
        Approve(decided_by="U0REVIEWER", edited_arguments={"amount": 30}, **forged),
        via="api",
    )
    assert result.accepted
    recorded = result.request.decision if result.request else None
    assert isinstance(recorded, Approve)
    _, fingerprint = api.host.runner.agent("refund-agent")
    edited = {"order_id": "123", "amount": 30.0}
    assert recorded.original_arguments == {"order_id": "123", "amount": 42.5}
    assert recorded.edited_hash == call_hash(fingerprint, "issue_refund", edited)
    assert recorded.edited_by == "U0REVIEWER"

    plain = await api.host.approvals.decide(
        other, Approve(decided_by="U0REVIEWER", **forged), via="api"
    )
    recorded = plain.request.decision if plain.request else None
    assert isinstance(recorded, Approve) and not recorded.edited
    assert (recorded.original_arguments, recorded.edited_hash, recorded.edited_by) == (None, "", "")


async def test_an_edit_cannot_be_approved_for_the_whole_run(api: Api) -> None:
    _, rid = await api.paused("refund-agent", "refund order 123")
    result = await api.host.approvals.decide(
        rid,
        Approve(decided_by="U0REVIEWER", always=True, edited_arguments={"amount": 30}),
        via="api",
    )
    assert result.outcome == "refused" and "approved once" in result.reason
    await api.still_pending(rid, "refund")
