"""Approval requests from agents that run elsewhere, over the HTTP API of a whole stack
(real Redis, the Slack stand-in, signed clicks): created, posted, decided by a click, the
webhook, `/approvals` or expiry, read, long-polled, and idempotent by external_id."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from agent_host.approvals.external import external_call_hash
from agent_host.http import api
from bot import blocks
from tests.support.keyspace import pass_deadline
from tests.support.replies import flat_body
from tests.support.signing import webhook_signature
from tests.support.stack import API_TOKEN, CHANNEL, REQUESTER, REVIEWER, Stack, running_stack
from tests.support.waiting import eventually

SECRET = "external-webhook-secret"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
REFUND = {
    "agent": "billing-bot",
    "tool": "issue_refund",
    "arguments": {"order_id": 123, "amount": 40},
    "requested_by": REQUESTER,
    "severity": "high",
    "reason": "refunds move money",
}


async def create(
    http: aiohttp.ClientSession, stack: Stack, body: dict[str, Any], status: int = 201
) -> dict[str, Any]:
    async with http.post(f"{stack.url}/api/v1/approvals", json=body, headers=AUTH) as resp:
        answer = await resp.json()
        assert resp.status == status, answer
        return dict(answer)


async def read(
    http: aiohttp.ClientSession, stack: Stack, request_id: str, wait: float = 0
) -> dict[str, Any]:
    url = f"{stack.url}/api/v1/approvals/{request_id}?wait={wait}"
    async with http.get(url, headers=AUTH) as resp:
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_a_request_from_elsewhere_is_posted_clicked_and_read(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND)
        assert created["status"] == "pending"
        assert created["call_hash"] == external_call_hash(
            "billing-bot", "issue_refund", {"order_id": 123, "amount": 40}
        )
        assert created["url"] == f"/api/v1/approvals/{created['request_id']}"
        request = await stack.posted(created["request_id"])
        # The message in the stand-in (what the sandbox page shows) names agent and tool.
        text = json.dumps(stack.message(request.message_channel, request.message_ts))
        assert "billing-bot" in text and "issue_refund" in text
        assert request.message_channel == CHANNEL

        waiting = asyncio.create_task(read(http, stack, created["request_id"], wait=30))
        await eventually(lambda: stack.host.external.watch.waiting(created["request_id"]) or None)
        assert not waiting.done()
        await stack.click(REVIEWER, request, blocks.APPROVE)
        decided = await waiting
        assert decided["status"] == "approved" and decided["verdict"] == "approved"
        assert decided["decided_by"] == REVIEWER
        assert decided["call_hash"] == created["call_hash"]
        assert decided["decision"]["call_hash"] == created["call_hash"]
        await stack.decided_message(request.message_channel, request.message_ts)
        # Read again later: the same decision, at once; nothing of a runtime resumed.
        assert (await read(http, stack, created["request_id"], wait=5))["verdict"] == "approved"
        run = await stack.host.store.run_info(request.run_id)
        assert run is not None and run.status == "succeeded" and run.output == "approved"
        events = [e["event"] for e in await stack.host.store.audit(request.run_id)]
        assert events == ["requested", "approved"]


async def test_a_long_poll_whose_client_hung_up_stops_waiting(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND)
        request_id = created["request_id"]
        url = f"{stack.url}/api/v1/approvals/{request_id}?wait=60"
        watch = stack.host.external.watch

        async def hangs_up() -> None:  # a client that gives up after a second
            with pytest.raises(TimeoutError):
                async with http.get(url, headers=AUTH, timeout=aiohttp.ClientTimeout(total=1)):
                    pass

        client = asyncio.create_task(hangs_up())
        await eventually(lambda: watch.waiting(request_id) or None)  # waited on meanwhile
        await client
        # ... and not for the rest of its 60 s once the client left.
        await eventually(lambda: watch.waiting(request_id) == 0 or None, within=5)
        # A client that stays still gets its answer when the decision comes.
        waiting = asyncio.create_task(read(http, stack, request_id, wait=30))
        await eventually(lambda: watch.waiting(request_id) or None)
        request = await stack.posted(request_id)
        await stack.click(REVIEWER, request, blocks.APPROVE)
        assert (await waiting)["verdict"] == "approved"


async def test_a_stopping_server_answers_its_long_polls_at_once(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """A deploy stops the server while an agent long-polls for 60 s: the poll is answered
    with the request as it stands (pending), and the stop waits for no poll."""
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND)
        request_id = created["request_id"]
        polling = asyncio.create_task(read(http, stack, request_id, wait=60))
        await eventually(lambda: stack.host.external.watch.waiting(request_id) or None)
        began = time.monotonic()
    stopped_after = time.monotonic() - began
    answer = await polling
    assert answer["request_id"] == request_id and answer["status"] == "pending"
    assert stopped_after < 10, stopped_after  # (aiohttp waits up to 60 s for handlers)


async def test_a_flood_of_long_polls_leaves_clicks_and_new_requests_working(
    redis_url: str, tmp_path: Path
) -> None:
    """More agents long-poll at once than the process has Redis connections: they still
    take none each, so a reviewer's click, a new request and /readyz go on working, and
    every poll gets the decision once it is made."""
    polls = 1100  # above the client's 1,024 connections (connections.py)
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        running_stack(redis_url, tmp_path) as stack,
    ):
        waited = await create(http, stack, REFUND)
        request_id = waited["request_id"]
        waiting = [
            asyncio.create_task(read(http, stack, request_id, wait=30)) for _ in range(polls)
        ]
        watch = stack.host.external.watch
        await eventually(lambda: watch.waiting(request_id) == polls or None, within=30)
        other = await create(http, stack, REFUND | {"arguments": {"order_id": 124}})
        clicked = await stack.posted(other["request_id"])
        await stack.click(REVIEWER, clicked, blocks.APPROVE)
        assert (await stack.decided(other["request_id"])).status == "approved"
        async with http.get(f"{stack.url}/readyz") as resp:
            assert resp.status == 200, await resp.text()
        assert not any(task.done() for task in waiting)
        await stack.click(REVIEWER, await stack.posted(request_id), blocks.APPROVE)
        answers = await asyncio.wait_for(asyncio.gather(*waiting), 30)
        assert {a["status"] for a in answers} == {"approved"}


async def test_the_same_external_id_gives_the_same_request_and_one_message(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        body = REFUND | {"external_id": "order-123-refund"}
        first = await create(http, stack, body)
        again = await create(http, stack, body, status=200)
        assert again["request_id"] == first["request_id"] and again["created"] is False
        await stack.posted(first["request_id"])
        clash = await create(http, stack, body | {"arguments": {"order_id": 999}}, status=409)
        assert first["request_id"] in clash["error"]
        posted = [m for m in stack.channel_messages(CHANNEL) if "issue_refund" in json.dumps(m)]
        assert len(posted) == 1
        page = await stack.host.store.list_pending()
        assert [r.request_id for r in page.requests] == [first["request_id"]]


async def test_the_webhook_decides_it_and_the_reviewers_words_reach_the_caller(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET) as stack:
        created = await create(http, stack, REFUND)
        raw = json.dumps(
            {"requestId": created["request_id"], "decision": "rejected", "feedback": "too much"}
        ).encode()
        async with http.post(
            f"{stack.url}/api/v1/webhooks/approval-response",
            data=raw,
            headers={"X-Webhook-Signature": webhook_signature(raw, SECRET)},
        ) as resp:
            assert resp.status == 200, await resp.text()
        decided = await read(http, stack, created["request_id"], wait=10)
        assert decided["verdict"] == "rejected" and decided["feedback"] == "too much"
        assert decided["decided_by"] == "webhook"


async def test_an_unanswered_request_expires_as_a_value(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND | {"expires_in_hours": 1})
        request = await stack.posted(created["request_id"])
        await pass_deadline(stack.host.redis, request.request_id)
        decided = await read(http, stack, created["request_id"], wait=30)
        assert decided["verdict"] == "expired" and decided["status"] == "expired"


def nested(levels: int) -> dict[str, Any]:
    """An object holding `levels` levels of objects and arrays, itself included."""
    value: Any = None
    for level in range(levels, 0, -1):  # odd levels objects, even ones arrays
        value = {"in": value} if level % 2 else [value]
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"tool": "t", "arguments": {}}, "agent is required"),
        (REFUND | {"arguments": [1, 2]}, "arguments must be a JSON object"),
        (REFUND | {"severity": "urgent"}, "severity must be one of low, medium, high"),
        (REFUND | {"expires_in_hours": 0}, "expires_in_hours must be a whole number from 1"),
        (REFUND | {"expires_in_hours": 721}, "from 1 to 720"),
        (REFUND | {"expires_in_hours": True}, "expires_in_hours"),
        (REFUND | {"colour": "red"}, "unknown field(s) colour"),
        (REFUND | {"callback_url": "http://10.0.0.5/hook"}, "COUNTERSIGN_CALLBACK_HOSTS"),
        (REFUND | {"callback_url": "ftp://example.com/x"}, "http:// or https://"),
        (REFUND | {"arguments": {"x": "a" * 70_000}}, "larger than"),
        (REFUND | {"arguments": nested(33)}, "more than 32 levels deep"),
        (REFUND | {"external_id": ".."}, 'external_id may not be "." or ".."'),
        (REFUND | {"requested_by": "<@U0REQUESTER>"}, "requested_by must be the requester's"),
        (REFUND | {"requested_by": "U0REQUESTER "}, "requested_by must be the requester's"),
        (REFUND | {"question": " \n\t"}, "question is blank"),
        (REFUND | {"question": "\u200b\u2060 "}, "question is blank"),
    ],
)
async def test_bad_requests_are_refused_and_change_nothing(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession, body: dict[str, Any], says: str
) -> None:
    async with running_stack(
        redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET, COUNTERSIGN_MAX_BODY="200000"
    ) as stack:
        answer = await create(http, stack, body, status=400)
        assert says in answer["error"]
        assert await stack.host.store.pending_count() == 0


async def test_nan_wait_odd_json_and_unknown_ids_are_refused(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        async with http.post(
            f"{stack.url}/api/v1/approvals",
            data=b'{"agent": "a", "tool": "t", "arguments": {"x": NaN}}',
            headers=AUTH,
        ) as resp:
            assert resp.status == 400
        for query in ("wait=61", "wait=nan", "wait=-1", "wait=soon"):
            async with http.get(f"{stack.url}/api/v1/approvals/req_0_1?{query}", headers=AUTH) as r:
                assert r.status == 400, query
        async with http.get(f"{stack.url}/api/v1/approvals/req_00000000_0001", headers=AUTH) as r:
            assert r.status == 404
        head = b'{"agent": "a", "tool": "t", "arguments": '
        utf16 = (head + b'{"x": "\\ud800"}}').decode().encode("utf-16")  # JSON is UTF-8
        for raw, says in (
            (head + b'{"x": "\\ud800"}}', "surrogate"),
            (utf16, "not UTF-8"),
            (head + b'{"n": ' + b"9" * 5000 + b"}}", "digits"),
            (head + b"[" * 5000 + b"]" * 5000 + b"}", "deep"),
        ):
            async with http.post(f"{stack.url}/api/v1/approvals", data=raw, headers=AUTH) as resp:
                assert resp.status == 400, await resp.text()
                assert says in (await resp.json())["error"]
        assert await stack.host.store.pending_count() == 0
        deepest = await create(http, stack, REFUND | {"arguments": nested(32)})  # the most
        await stack.posted(deepest["request_id"])  # and shown to its reviewers
        with_bom = json.dumps(REFUND | {"external_id": "bom"}).encode("utf-8-sig")
        async with http.post(f"{stack.url}/api/v1/approvals", data=with_bom, headers=AUTH) as r:
            assert r.status == 201, await r.text()  # a UTF-8 byte order mark may be ignored
        async with http.post(f"{stack.url}/api/v1/approvals", json=REFUND) as resp:
            assert resp.status == 401


async def test_it_is_listed_by_slash_approvals_like_any_request(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND)
        await stack.posted(created["request_id"])
        listed = await slash(stack, "pending")
        assert created["request_id"] in listed and "issue_refund" in listed, listed
        shown = await slash(stack, f"show {created['request_id']}")
        assert "billing-bot" in shown and "*pending*" in shown, shown


async def slash(stack: Stack, text: str) -> str:
    reply = await stack.approvals(REVIEWER, CHANNEL, text)
    assert reply.status == 200, reply.body
    return flat_body(json.loads(reply.body))


async def test_any_external_id_taken_at_creation_can_be_looked_up(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """As the client looks it up after a crash: the id percent-encoded in the path."""
    odd = ["orders/{7}/refund", "{x}", "a.b", "...", "50%", "naïve id", "?q=1#f", "a\\b"]
    async with running_stack(redis_url, tmp_path) as stack:
        for external_id in odd:
            created = await create(http, stack, REFUND | {"external_id": external_id})
            url = f"{stack.url}/api/v1/approvals/by-external-id/{quote(external_id, safe='')}"
            async with http.get(url, headers=AUTH) as resp:
                assert resp.status == 200, (external_id, await resp.text())
                assert (await resp.json())["request_id"] == created["request_id"]


async def test_a_long_poll_is_held_its_wait_beyond_the_requests_budget(
    redis_url: str, tmp_path: Path, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every API request has a budget (a Redis that answers nothing gets a 503), and a long
    poll's is its wait beyond it: held, then answered as it is, never a 503 for waiting."""
    monkeypatch.setattr(api, "STORE_BUDGET_SECONDS", 0.5)
    async with running_stack(redis_url, tmp_path) as stack:
        created = await create(http, stack, REFUND)
        started = time.monotonic()
        answer = await read(http, stack, created["request_id"], wait=1.5)
        assert answer["status"] == "pending"
        assert time.monotonic() - started >= 1.4
