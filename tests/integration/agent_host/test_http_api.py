"""The HTTP API over a real Redis on loopback: bad input is a 4xx JSON answer, never a 5xx;
pagination, the signed approval webhook, health, readiness and metrics."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import hmac
import json
import logging
import os
import signal
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.connections import open_redis
from agent_host.durable.host import Host
from agent_host.examples import ExampleEffects
from agent_host.http import api as api_module
from agent_host.http.application import create_app
from agent_host.runtime.decisions import Approve
from agent_host.settings import load_settings
from tests.support import host_env
from tests.support.host_env import Env, FakeClock
from tests.support.keyspace import zcard_all
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.routers import QuorumRouter
from tests.support.signing import webhook_signature

TOKEN = "test-api-token"
SECRET = "test-webhook-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 4096


def make_host(redis: Redis, tmp_path: Path, **env: str) -> tuple[Host, ExampleEffects]:
    """A host over the example agents, its request bodies capped at MAX_BODY."""
    return host_env.make_host(redis, tmp_path, COUNTERSIGN_MAX_BODY=str(MAX_BODY), **env)


@dataclass
class Api:
    client: TestClient[Any, Any]
    host: Host
    env: Env

    async def start_run(self, agent: str, text: str) -> str:
        resp = await self.client.post(
            "/api/v1/runs", json={"agent": agent, "input": text}, headers=AUTH
        )
        assert resp.status == 202, await resp.text()
        body = await resp.json()
        assert body["status"] == "running"
        return str(body["run_id"])

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/api/v1/runs/{run_id}", headers=AUTH)
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())

    async def webhook(self, body: dict[str, Any] | bytes, secret: str = SECRET) -> ClientResponse:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sig = webhook_signature(raw, secret)
        return await self.client.post(
            "/api/v1/webhooks/approval-response",
            data=raw,
            headers={"X-Webhook-Signature": sig, "Content-Type": "application/json"},
        )


@pytest_asyncio.fixture
async def api(redis: Redis, tmp_path: Path) -> AsyncIterator[Api]:
    host, effects = make_host(
        redis,
        tmp_path,
        COUNTERSIGN_API_TOKEN=TOKEN,
        COUNTERSIGN_WEBHOOK_SECRET=SECRET,
    )
    host.store.clock = FakeClock()  # distinct, ordered creation scores
    env = Env(redis, host.keyring, host.store, host.runner, effects)
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
        yield Api(client, host, env)


async def assert_error(resp: ClientResponse, status: int, *words: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert isinstance(body.get("error"), str) and body["error"]
    for word in words:
        assert word in body["error"]
    return dict(body)


# -- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Bearer {TOKEN}x"},
    ],
)
async def test_missing_or_wrong_bearer_token_is_401(api: Api, headers: dict[str, str]) -> None:
    c = api.client
    for resp in (
        await c.post("/api/v1/runs", json={"agent": "refund-agent", "input": "x"}, headers=headers),
        await c.get("/api/v1/runs/run_0123456789abcdef", headers=headers),
        await c.get("/api/v1/approvals", headers=headers),
    ):
        await assert_error(resp, 401, "bearer")
    assert await zcard_all(api.env.redis, "runs") == 0


async def test_api_disabled_without_token_is_503(redis: Redis, tmp_path: Path) -> None:
    host, _ = make_host(redis, tmp_path)
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as c:
        await assert_error(
            await c.post(
                "/api/v1/runs", json={"agent": "refund-agent", "input": "x"}, headers=AUTH
            ),
            503,
            "COUNTERSIGN_API_TOKEN",
        )
        await assert_error(await c.get("/api/v1/approvals", headers=AUTH), 503)
        await assert_error(
            await c.post("/api/v1/webhooks/approval-response", data=b"{}"),
            503,
            "COUNTERSIGN_WEBHOOK_SECRET",
        )
        assert (await c.get("/healthz")).status == 200


# -- starting runs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", ("JSON",)),
        (b'{"agent": "refund-agent", "input": ', ("JSON",)),
        (b"\xff\xfe\x00garbage", ("JSON",)),
        (b"[1, 2, 3]", ("object",)),
        (b'"refund order 123"', ("object",)),
        (b"42", ("object",)),
        (b"null", ("object",)),
        (b"", ("object",)),
        (b'{"agent": "refund-agent"}', ("agent",)),
        (b'{"agent": 7, "input": "refund order 123"}', ("agent",)),
        (b'{"agent": "refund-agent", "input": ["x"]}', ("input",)),
        (b'{"agent": "refund-agent", "input": "x", "requested_by": 5}', ("requested_by",)),
        (
            b'{"agent": "refund-agent", "input": "x", "requested_by": "<@U0REQUESTER>"}',
            ("requested_by must be the requester's user id",),
        ),
        (b'{"agent": "no-such-agent", "input": "x"}', ("no-such-agent",)),
    ],
)
async def test_bad_run_bodies_are_400(api: Api, body: bytes, words: tuple[str, ...]) -> None:
    resp = await api.client.post(
        "/api/v1/runs", data=body, headers={**AUTH, "Content-Type": "application/json"}
    )
    await assert_error(resp, 400, *words)
    assert await zcard_all(api.env.redis, "runs") == 0


async def test_a_misspelt_run_field_is_refused_not_dropped(api: Api) -> None:
    """`requestedBy` for `requested_by` used to start a run without its requester, whom the
    self-approval rule then could not stop: every field not documented is a 400 that names
    it, suggests the near miss and lists the accepted ones, and no run starts."""
    body = {"agent": "refund-agent", "input": "refund order 123", "requestedBy": "U0REVIEWER"}
    resp = await api.client.post("/api/v1/runs", json=body, headers=AUTH)
    await assert_error(
        resp,
        400,
        "unknown field(s) 'requestedBy' (did you mean 'requested_by'?)",
        "the accepted fields are agent, input, requested_by",
        "no run was started",
    )
    resp = await api.client.post("/api/v1/runs", json=body | {"colour": "red"}, headers=AUTH)
    await assert_error(resp, 400, "'colour', 'requestedBy' (did you mean 'requested_by'?)")
    assert await zcard_all(api.env.redis, "runs") == 0

    body["requested_by"] = body.pop("requestedBy")  # every documented field is accepted
    resp = await api.client.post("/api/v1/runs", json=body, headers=AUTH)
    assert resp.status == 202, await resp.text()
    detail = await api.run((await resp.json())["run_id"])
    assert detail["requested_by"] == "U0REVIEWER"


async def test_oversized_bodies_are_413_json(api: Api) -> None:
    big = json.dumps({"agent": "refund-agent", "input": "x" * (MAX_BODY + 100)}).encode()
    resp = await api.client.post("/api/v1/runs", data=big, headers=AUTH)
    await assert_error(resp, 413, "too large")
    resp = await api.webhook(b'{"requestId": "' + b"x" * (MAX_BODY + 100) + b'"}')
    await assert_error(resp, 413, "too large")
    assert await zcard_all(api.env.redis, "runs") == 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_not_encoded_as_its_content_encoding_says_is_a_json_400(
    api: Api, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It was a 500 "internal error" with a traceback logged as unexpected: it is bad
    input, answered as such, with nothing changed; a body encoded as declared still works."""
    caplog.set_level(logging.WARNING)
    plain = {"agent": "refund-agent", "input": "refund order 123"}
    external = {"agent": "bot", "tool": "deploy", "arguments": {"env": "prod"}}
    for path, body in (("/api/v1/runs", plain), ("/api/v1/approvals", external)):
        resp = await api.client.post(
            path,
            data=json.dumps(body).encode(),  # declared compressed, sent as it is
            headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": encoding},
        )
        await assert_error(
            resp,
            400,
            f"could not be decoded as its Content-Encoding ({encoding}) says",
            "send it uncompressed, or encoded as declared",
        )
    assert await zcard_all(api.env.redis, "runs") == 0
    assert await zcard_all(api.env.redis, "pending") == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []

    encode = gzip.compress if encoding == "gzip" else zlib.compress
    resp = await api.client.post(  # the same client: the failed connection was not reused
        "/api/v1/runs",
        data=encode(json.dumps(plain).encode()),
        headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": encoding},
    )
    assert resp.status == 202, await resp.text()


async def test_deeply_nested_json_is_400_not_500(api: Api) -> None:
    body = b"[" * 2000 + b"]" * 2000  # valid JSON, under the body limit
    assert len(body) < MAX_BODY
    resp = await api.client.post(
        "/api/v1/runs", data=body, headers={**AUTH, "Content-Type": "application/json"}
    )
    await assert_error(resp, 400)
    resp = await api.webhook(body)
    await assert_error(resp, 400)


async def test_run_lifecycle_through_the_api(api: Api) -> None:
    run_id = await api.start_run("refund-agent", "refund order 123")
    assert K.token_of(run_id)
    detail = await api.run(run_id)
    assert detail["status"] == "running" and detail["approvals"] == []
    await api.env.drain()
    detail = await api.run(run_id)
    assert detail["status"] == "waiting"
    (approval,) = detail["approvals"]
    assert approval["tool"] == "issue_refund" and approval["status"] == "pending"
    assert approval["arguments"] == {"order_id": "123", "amount": 42.5}
    assert [c["tool"] for c in detail["tool_calls"]] == ["lookup_order", "issue_refund"]
    assert [a["event"] for a in detail["audit"]] == ["started", "paused"]


@pytest.mark.parametrize(
    "run_id",
    ["run_0123456789abcdef0123", "run_zz", "nonsense", "req_0123456789abcdef_1", "..%2F..%2Fetc"],
)
async def test_unknown_or_malformed_run_is_404(api: Api, run_id: str) -> None:
    resp = await api.client.get(f"/api/v1/runs/{run_id}", headers=AUTH)
    await assert_error(resp, 404)


# -- approvals --------------------------------------------------------------------------------


async def test_approvals_paginate_newest_first_by_cursor(api: Api) -> None:
    created = []
    for n in range(25):
        created.append(
            await api.start_run("refund-agent", f"refund order {(123, 124, 200)[n % 3]}")
        )
    await api.env.drain()
    requests = [r for run_id in created for r in await api.env.requests(run_id)]
    # newest pause first (workers may start queued runs in any order); ties by id, descending
    requests.sort(key=lambda r: (int(r.created_at * 1000), r.request_id), reverse=True)
    expected = [r.request_id for r in requests]

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = {"limit": "10", **({"cursor": cursor} if cursor else {})}
        resp = await api.client.get("/api/v1/approvals", params=query, headers=AUTH)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        pages += 1
        seen += [a["request_id"] for a in body["approvals"]]
        assert len(body["approvals"]) <= 10
        cursor = body["next_cursor"]
        if cursor is None or pages > 5:
            break
    assert pages == 3
    assert len(seen) == len(set(seen)) == 25
    assert seen == expected  # newest first

    resp = await api.client.get("/api/v1/approvals", params={"channel": "C-ops"}, headers=AUTH)
    assert len((await resp.json())["approvals"]) == 25
    resp = await api.client.get("/api/v1/approvals", params={"channel": "C-other"}, headers=AUTH)
    assert (await resp.json())["approvals"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "abc"},
        {"cursor": "12"},
        {"cursor": "x:req_0123456789abcdef_1"},
        {"cursor": "-5:req_0123456789abcdef_1"},
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "ten"},
        {"status": "approved"},
    ],
)
async def test_bad_approval_queries_are_400(api: Api, params: dict[str, str]) -> None:
    resp = await api.client.get("/api/v1/approvals", params=params, headers=AUTH)
    await assert_error(resp, 400)


async def test_pagination_lists_every_request_of_a_large_paused_turn(api: Api) -> None:
    paths = " ".join(f"/tmp/f{n}" for n in range(61))
    run_id = await api.start_run("cleanup-agent", f"remove {paths}")
    await api.env.drain()
    assert len(await api.env.requests(run_id)) == 61
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(20):
        query = {"limit": "10", **({"cursor": cursor} if cursor else {})}
        body = await (await api.client.get("/api/v1/approvals", params=query, headers=AUTH)).json()
        seen += [a["request_id"] for a in body["approvals"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert len(seen) == 61


# -- the approval webhook ---------------------------------------------------------------------


async def paused_refund(api: Api, order: str = "123") -> tuple[str, str]:
    run_id = await api.start_run("refund-agent", f"refund order {order}")
    await api.env.drain()
    (request,) = await api.env.requests(run_id)
    return run_id, request.request_id


async def test_webhook_rejects_bad_signatures_and_ids(api: Api) -> None:
    _, rid = await paused_refund(api)
    body = {"requestId": rid, "decision": "approved"}
    url = "/api/v1/webhooks/approval-response"
    raw = json.dumps(body).encode()

    await assert_error(await api.client.post(url, data=raw), 401, "X-Webhook-Signature")
    await assert_error(await api.webhook(body, secret="not-the-secret"), 401)
    wrong_scheme = "sha1=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
    resp = await api.client.post(url, data=raw, headers={"X-Webhook-Signature": wrong_scheme})
    await assert_error(resp, 401)
    # signed over different bytes than sent (same JSON, other spacing)
    signed = json.dumps(body, separators=(",", ":")).encode()
    sig = webhook_signature(signed, SECRET)
    resp = await api.client.post(url, data=raw, headers={"X-Webhook-Signature": sig})
    await assert_error(resp, 401)

    await assert_error(
        await api.webhook({"requestId": "req_0123456789abcdef_1", "decision": "approved"}), 404
    )
    await assert_error(await api.webhook({"requestId": "../../etc", "decision": "approved"}), 404)
    await assert_error(await api.webhook({"requestId": rid, "decision": "maybe"}), 400)
    await assert_error(await api.webhook({"requestId": 5, "decision": "approved"}), 400)
    for feedback in (["x"], 0, False, []):  # not text, however empty it looks
        await assert_error(
            await api.webhook({"requestId": rid, "decision": "rejected", "feedback": feedback}),
            400,
            "feedback must be a string",
        )
    await assert_error(await api.webhook(b"[1]"), 400, "object")
    await assert_error(await api.webhook(b"{oops"), 400, "JSON")
    # compressed: aiohttp would check the decoded bytes, not those sent (and signed)
    for signed_over in (gzip.compress(raw), raw):
        resp = await api.client.post(
            url,
            data=gzip.compress(raw),
            headers={
                "Content-Encoding": "gzip",
                "X-Webhook-Signature": webhook_signature(signed_over, SECRET),
            },
        )
        await assert_error(resp, 415, "uncompressed")
    # ... however the header says it: the decoder heeds the last of several
    raw_headers = [
        ("Content-Encoding", "identity"),
        ("Content-Encoding", "gzip"),
        ("X-Webhook-Signature", webhook_signature(raw, SECRET)),
    ]
    resp = await api.client.post(url, data=gzip.compress(raw), headers=CIMultiDict(raw_headers))
    await assert_error(resp, 415, "uncompressed")

    request = await api.env.store.get_request(rid)
    assert request is not None and request.status == "pending"
    assert api.env.effects.count("refund") == 0


async def test_a_webhook_field_it_does_not_know_decides_nothing(api: Api) -> None:
    """`decided_by` for `decidedBy` used to approve with the claim dropped (recorded as
    plain `webhook`), `EDITED_ARGUMENTS` without its edit: a field spelt as a documented
    one but for case and separators, or any naming edits, is a 400 naming the field meant,
    and nothing is decided. A field of the sender's own (`decidedAt`) is ignored: the wire
    format is shared with control planes that may add theirs."""
    _, rid = await paused_refund(api)
    near_misses = {
        "decided_by": ("U0REVIEWER", "decidedBy"),
        "DECIDED-BY": ("U0REVIEWER", "decidedBy"),
        "editedArguments": ({"amount": 21.25}, "edited_arguments"),
        "EDITED_ARGUMENTS": ({"amount": 21.25}, "edited_arguments"),
        "edited_args": ({"amount": 21.25}, "edited_arguments"),
        "edits": ({"amount": 21.25}, "edited_arguments"),
        "request_id": (rid, "requestId"),
    }
    for field, (value, meant) in near_misses.items():
        resp = await api.webhook({"requestId": rid, "decision": "approved", field: value})
        await assert_error(
            resp,
            400,
            f"misspelt field(s) '{field}' (the field is '{meant}')",
            "nothing was decided",
        )
    request = await api.env.store.get_request(rid)
    assert request is not None and request.status == "pending" and request.approvals == []
    assert api.env.effects.count("refund") == 0

    every_documented_field = {
        "requestId": rid,
        "decision": "approved",
        "feedback": "one item was kept",
        "decidedBy": "U0REVIEWER",
        "edited_arguments": {"amount": 21.25},
    }
    theirs = {
        "decidedAt": "2026-12-02T10:00:00Z",
        "editedAt": "2026-12-02T09:59:00Z",
        "editor": "U0LEAD",
        "executionId": "exec-42",
        "version": 2,
    }
    resp = await api.webhook(every_documented_field | theirs)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["status"] == "processed"
    decided = await api.env.store.get_request(rid)
    assert decided is not None and decided.decision is not None
    assert decided.decision.note == "U0REVIEWER"


async def test_webhook_approves_once_and_later_calls_learn_who_decided(api: Api) -> None:
    run_id, rid = await paused_refund(api)
    body = {"requestId": rid, "decision": "approved", "decidedBy": "U-bob"}
    resp = await api.webhook(body)
    assert resp.status == 200, await resp.text()
    # The webhook is one identity whatever name its caller claims; the claim is a note.
    assert await resp.json() == {
        "status": "processed",
        "request_id": rid,
        "decision": "approved",
        "decided_by": "webhook",
        "approvals": 1,
        "quorum": 1,
    }
    again = await api.webhook({"requestId": rid, "decision": "rejected", "decidedBy": "U-eve"})
    assert again.status == 200
    assert await again.json() == {
        "status": "already_processed",
        "request_id": rid,
        "decision": "approved",
        "decided_by": "webhook",
    }
    decided = await api.env.store.get_request(rid)
    assert decided is not None and decided.decision is not None
    assert decided.decision.note == "U-bob" and decided.decision.via == "webhook"
    await api.env.drain()
    detail = await api.run(run_id)
    assert detail["status"] == "succeeded" and "Refund issued" in detail["output"]
    assert api.env.effects.count("refund") == 1


async def test_a_decided_question_answers_already_processed_whatever_the_late_call_says(
    api: Api,
) -> None:
    """A sender that did not see a question answered sends its approval without text: it
    learns the question was decided, not that it should send an answer."""
    resp = await api.client.post(
        "/api/v1/approvals",
        json={"agent": "bot", "tool": "ask", "arguments": {}, "question": "Which account?"},
        headers=AUTH,
    )
    rid = (await resp.json())["request_id"]
    answered = await api.webhook({"requestId": rid, "decision": "approved", "feedback": "acct-1"})
    assert (await answered.json())["status"] == "processed"
    for late in ({}, {"feedback": "acct-2"}, {"edited_arguments": {"x": 1}}):
        again = await api.webhook({"requestId": rid, "decision": "approved"} | late)
        assert again.status == 200
        assert (await again.json())["status"] == "already_processed"
    current = await api.env.store.get_request(rid)
    assert current is not None and current.decision is not None
    assert getattr(current.decision, "text", None) == "acct-1"


async def test_a_webhook_approval_sent_again_towards_a_quorum_says_the_request_still_waits(
    api: Api,
) -> None:
    """A sender retrying its approval on a request that needs two: its vote counts once,
    and the answer says it is in and the request waits, not that it was processed."""
    api.env.store.router = QuorumRouter(2)
    _, rid = await paused_refund(api)
    approve = {"requestId": rid, "decision": "approved"}
    first = await (await api.webhook(approve)).json()
    again = await api.webhook(approve)

    assert first["status"] == "recorded" and first["approvals"] == 1
    assert again.status == 200
    assert await again.json() == {
        "status": "already_voted",
        "request_id": rid,
        "decision": "pending",
        "decided_by": None,
        "approvals": 1,
        "quorum": 2,
    }
    current = await api.env.store.get_request(rid)
    assert current is not None and current.approvals == ["webhook"]
    assert current.status == "pending"


async def test_a_webhook_vote_named_for_someone_who_voted_is_refused_saying_so(api: Api) -> None:
    """Not "already_voted" (the webhook's own vote is not in): the person it names has
    voted, and a vote in their name is not counted twice."""
    api.env.store.router = QuorumRouter(2)
    _, rid = await paused_refund(api)
    voted = await api.host.approvals.decide(rid, Approve(decided_by="U-bob"), via="slack")
    assert voted.outcome == "progress"
    resp = await api.webhook({"requestId": rid, "decision": "approved", "decidedBy": "U-bob"})
    await assert_error(resp, 409, "has approved it already")
    current = await api.env.store.get_request(rid)
    assert current is not None and current.approvals == ["U-bob"]


@pytest.mark.parametrize(
    "claimed", ["<@U-bob>", "<@U-bob|bob>", "U-bob ", " U-bob", "U-bob\n", "U bob"]
)
async def test_a_decider_claimed_in_another_form_than_a_user_id_is_refused(
    api: Api, claimed: str
) -> None:
    """A claimed decider is compared as given, with the requester (self-approval) and with
    those who voted (one vote each): the same person written with a mention's markup or a
    space would not be them, so the claim is refused as `requested_by` is, and nothing is
    decided."""
    api.env.store.router = QuorumRouter(2)
    _, rid = await paused_refund(api)
    voted = await api.host.approvals.decide(rid, Approve(decided_by="U-bob"), via="slack")
    assert voted.outcome == "progress"
    resp = await api.webhook({"requestId": rid, "decision": "approved", "decidedBy": claimed})
    await assert_error(resp, 400, "decidedBy must be the decider's user id")
    current = await api.env.store.get_request(rid)
    assert current is not None and current.approvals == ["U-bob"]
    assert current.status == "pending"


async def test_concurrent_webhook_deliveries_process_once(api: Api) -> None:
    _, rid = await paused_refund(api)
    responses = await asyncio.gather(
        *(
            api.webhook({"requestId": rid, "decision": "approved", "decidedBy": f"U{n}"})
            for n in range(10)
        )
    )
    bodies = [await r.json() for r in responses]
    assert all(r.status == 200 for r in responses)
    assert [b["status"] for b in bodies].count("processed") == 1
    winner = next(b for b in bodies if b["status"] == "processed")
    decided_by = (await api.env.store.get_request(rid)).decided_by  # type: ignore[union-attr]
    assert all(b["decided_by"] == decided_by for b in bodies if b["status"] == "already_processed")
    assert winner["decision"] == "approved"
    await api.env.drain()
    assert api.env.effects.count("refund") == 1


async def test_webhook_request_changes_feedback_reaches_the_model(api: Api) -> None:
    run_id, rid = await paused_refund(api)
    feedback = "refund only half, the customer kept one item"
    resp = await api.webhook(
        {"requestId": rid, "decision": "request_changes", "feedback": feedback}
    )
    assert resp.status == 200 and (await resp.json())["decision"] == "changes_requested"
    await api.env.drain()

    assert api.env.effects.count("refund") == 0
    state = await api.env.final_state(run_id)
    tool_messages = [m.content for m in state.transcript if m.role == "tool"]
    assert any(feedback in m for m in tool_messages), tool_messages
    detail = await api.run(run_id)
    assert detail["status"] == "succeeded" and feedback in detail["output"]
    refund = next(c for c in detail["tool_calls"] if c["tool"] == "issue_refund")
    assert refund["outcome"] == "rejected"


# -- health, readiness, metrics -------------------------------------------------------------


async def test_health_readiness_and_metrics(api: Api) -> None:
    assert (await api.client.get("/healthz")).status == 200
    ready = await api.client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["status"] == "ready"

    rids = [(await paused_refund(api, order))[1] for order in ("123", "124", "200")]
    text = await (await api.client.get("/metrics")).text()
    assert "countersign_pending_requests 3\n" in text
    assert 'countersign_decisions_total{status="approved"} 0' in text

    await api.webhook({"requestId": rids[0], "decision": "approved"})
    await api.webhook({"requestId": rids[1], "decision": "rejected"})
    metrics = await api.client.get("/metrics")
    assert metrics.status == 200 and metrics.content_type == "text/plain"
    text = await metrics.text()
    assert "countersign_pending_requests 1\n" in text
    assert 'countersign_decisions_total{status="approved"} 1' in text
    assert 'countersign_decisions_total{status="rejected"} 1' in text
    assert "countersign_resume_backlog 2\n" in text


async def test_scrapes_that_arrive_together_share_one_read_of_redis(api: Api) -> None:
    """/metrics answers without a token: a flood of scrapes must not become a flood of
    Redis commands (each scrape reads every shard)."""
    await paused_refund(api)

    async def commands() -> int:
        return int((await api.env.redis.info("stats"))["total_commands_processed"])

    before = await commands()
    alone = await (await api.client.get("/metrics")).text()
    one_scrape = await commands() - before - 1  # the INFO itself counts
    assert "countersign_pending_requests 1\n" in alone

    before = await commands()
    scrapes = await asyncio.gather(*(api.client.get("/metrics") for _ in range(30)))
    texts = [await r.text() for r in scrapes]
    spent = await commands() - before - 1
    assert all(r.status == 200 for r in scrapes) and set(texts) == {alone}
    assert spent <= 10 * one_scrape, (spent, one_scrape)  # 30 scrapes read alone: 30x


async def test_readyz_is_503_when_redis_is_down(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory()
    client = Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    host, _ = make_host(client, tmp_path, COUNTERSIGN_API_TOKEN=TOKEN)
    try:
        async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as c:
            assert (await c.get("/readyz")).status == 200
            server.stop()
            not_ready = await c.get("/readyz")
            await assert_error(not_ready, 503, "Redis is not reachable")
            assert str(server.port) not in await not_ready.text()  # no address for callers
            assert (await c.get("/healthz")).status == 200
            # Every API call says so too, as the API's documentation promises: 503, what
            # happened and what to do, and when to try again.
            for answer in (
                await c.get("/api/v1/approvals?status=pending", headers=AUTH),
                await c.post(
                    "/api/v1/runs", json={"agent": "refund-agent", "input": "x"}, headers=AUTH
                ),
            ):
                await assert_error(answer, 503, "Redis could not be used")
                assert "try again" in (await answer.json())["error"]
                assert str(server.port) not in await answer.text()  # nor here
                assert answer.headers["Retry-After"] == "1"
            server.start()
            assert (await c.get("/readyz")).status == 200
    finally:
        await client.aclose()


async def test_metrics_is_503_with_retry_after_when_redis_is_down(
    redis_server_factory: RedisServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As every endpoint that needs Redis: 503, try again, Retry-After, and one line in the
    log, not a 500 "internal error" with a traceback logged as unexpected."""
    server = redis_server_factory()
    client = Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    host, _ = make_host(client, tmp_path)
    try:
        async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as c:
            assert (await c.get("/metrics")).status == 200
            server.stop()
            caplog.clear()
            caplog.set_level(logging.WARNING)
            down = await c.get("/metrics")
            await assert_error(down, 503, "Redis could not be used", "try again")
            assert down.headers["Retry-After"] == "1"
            assert str(server.port) not in await down.text()  # no address for callers
            logged = [(r.levelno, r.exc_info) for r in caplog.records]
            assert logged == [(logging.WARNING, None)], caplog.text
            server.start()
            assert (await c.get("/metrics")).status == 200
    finally:
        await client.aclose()


async def test_a_redis_that_answers_nothing_gets_503s_not_hung_requests(
    redis_server_factory: RedisServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen Redis accepts the bytes and answers nothing. The client has no socket
    timeout, so /readyz and the API keep their own deadlines: 503, in seconds."""
    monkeypatch.setattr(api_module, "STORE_BUDGET_SECONDS", 1.0)
    monkeypatch.setattr(api_module, "READY_WITHIN_SECONDS", 0.5)
    server = redis_server_factory()
    client, _ = await open_redis(load_settings({"REDIS_URL": server.url}))
    host, _ = make_host(client, tmp_path, COUNTERSIGN_API_TOKEN=TOKEN)
    try:
        async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as c:
            assert (await c.get("/readyz")).status == 200
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                await assert_error(await c.get("/readyz"), 503, "Redis is not reachable")
                answer = await c.get("/api/v1/approvals?status=pending", headers=AUTH)
                await assert_error(answer, 503, "Redis did not answer within 1 s")
                assert "try again" in (await answer.json())["error"]
                assert answer.headers["Retry-After"] == "1"
                assert time.monotonic() - started < 6  # 0.5 s and 1 s, with room
            finally:
                os.kill(server.pid, signal.SIGCONT)
            assert (await c.get("/readyz")).status == 200
    finally:
        await client.aclose()


async def test_a_handlers_own_timeout_is_a_500_not_a_redis_503(
    redis: Redis, tmp_path: Path
) -> None:
    host, _ = make_host(redis, tmp_path, COUNTERSIGN_API_TOKEN=TOKEN)
    app = create_app(host)

    async def gave_up(request: web.Request) -> web.Response:
        raise TimeoutError  # e.g. a library's own timeout, not the request's budget

    app.router.add_get("/gives-up", gave_up)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        await assert_error(await client.get("/gives-up"), 500, "internal error")


async def test_detail_of_a_run_failed_at_resume_has_no_checkpoint_error(api: Api) -> None:
    run_id, rid = await paused_refund(api)
    await api.webhook({"requestId": rid, "decision": "approved"})
    registry = api.host.runner.registry
    original = registry.build

    def changed(name: str) -> Any:
        agent = original(name)
        agent.tools = [t for t in agent.tools if t.name != "lookup_order"]
        return agent

    registry.build = changed  # type: ignore[method-assign]
    api.host.runner.reload_agents()  # as a redeploy with the changed agent would
    await api.env.drain()
    detail = await api.run(run_id)
    assert detail["status"] == "failed" and "changed" in detail["error"]
    assert api.env.effects.count("refund") == 0
    assert "checkpoint_error" not in detail, detail["checkpoint_error"]
    assert [c["tool"] for c in detail["tool_calls"]] == ["lookup_order", "issue_refund"]
