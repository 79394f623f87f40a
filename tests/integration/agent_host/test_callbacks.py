"""Decision callbacks over real HTTP: a receiver on loopback (allowed by
COUNTERSIGN_CALLBACK_HOSTS) that checks the signature gets each decision at least once,
again after a failed attempt, and a callback that keeps failing is dead-lettered where the
API and /metrics show it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agent_host.approvals.external import ExternalRequestSpec
from agent_host.durable import keys as K
from agent_host.durable.callbacks import CallbackDelivery, dead_callbacks
from agent_host.durable.external_store import ExternalRequests
from agent_host.durable.poison import POISON_AFTER
from agent_host.durable.sweeper import Sweeper
from agent_host.runtime.decisions import Approve
from agent_host.settings import load_settings
from bot import blocks
from tests.support.host_env import make_env, pending_entries
from tests.support.stack import API_TOKEN, REVIEWER, Stack, running_stack, serve_app
from tests.support.waiting import eventually

SECRET = "callback-secret"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@dataclass
class Receiver:
    """Answers each POST with the next status of `statuses` (then 200), and keeps the
    deliveries whose signature checked out; a bad signature is an assertion failure."""

    url: str = ""
    statuses: list[int] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    bad_signatures: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        timestamp = request.headers["X-Countersign-Timestamp"]
        expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256)
        given = request.headers["X-Countersign-Signature"]
        if not hmac.compare_digest(given, "sha256=" + expected.hexdigest()):
            self.bad_signatures += 1
            return web.Response(status=401)
        assert abs(int(timestamp) - time.time()) < 300
        self.attempts += 1
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.received.append(
                {"delivery": request.headers["X-Countersign-Delivery"], "body": json.loads(raw)}
            )
        return web.Response(status=status)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner, url = await serve_app(app)
    found.url = f"{url}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


def signed_callbacks(redis_url: str, tmp_path: Path, hosts: str) -> Any:
    """The whole stack, its callbacks signed and allowed to `hosts`."""
    return running_stack(
        redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET, COUNTERSIGN_CALLBACK_HOSTS=hosts
    )


def host_of(url: str) -> str:
    return url.split("/")[2]


async def create(
    stack: Stack,
    callback_url: str,
    status: int = 201,
    arguments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = {
        "agent": "billing-bot",
        "tool": "issue_refund",
        "arguments": arguments or {"order_id": 7},
        "callback_url": callback_url,
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{stack.url}/api/v1/approvals", json=body, headers=AUTH) as resp,
    ):
        answer = dict(await resp.json())
        assert resp.status == status, answer
        return answer


async def dead_letters(stack: Stack) -> list[dict[str, Any]] | None:
    """The dead-lettered callbacks, as `GET /api/v1/callbacks/dead` lists them; None if none."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{stack.url}/api/v1/callbacks/dead", headers=AUTH) as resp,
    ):
        assert resp.status == 200
        return (await resp.json())["dead"] or None


async def test_a_decision_is_posted_signed_and_retried_after_a_failure(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.statuses = [500]  # the first attempt fails
    async with signed_callbacks(
        redis_url, tmp_path, f"example.com, {host_of(receiver.url)}"
    ) as stack:
        created = await create(stack, receiver.url)
        request = await stack.posted(created["request_id"])
        await stack.click(REVIEWER, request, blocks.APPROVE)
        [delivery] = await eventually(lambda: _some(receiver.received))
        assert receiver.attempts == 2 and receiver.bad_signatures == 0
        body = delivery["body"]
        # The id to deduplicate by is signed with the body; the header repeats it.
        assert body["delivery_id"] == delivery["delivery"] and body["delivery_id"]
        assert body["request_id"] == created["request_id"]
        assert body["verdict"] == "approved" and body["decided_by"] == REVIEWER
        assert body["call_hash"] == created["call_hash"]
        metrics = await _metrics(stack)
        assert 'countersign_callbacks_total{result="delivered"} 1' in metrics
        assert 'countersign_callbacks_total{result="retried"} 1' in metrics

        # Both attempts' entries, acknowledged, are trimmed like the other streams'.
        stream = K.Keys(created["request_id"]).shard.callbacks
        sweeper = Sweeper(stack.host.store)

        async def trimmed() -> bool | None:
            await sweeper.trim()
            return True if await stack.host.redis.xlen(stream) == 0 else None

        assert await eventually(trimmed)


async def test_decisions_made_at_once_are_delivered_under_ids_of_their_own(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    """Receivers deduplicate by `delivery_id`: two requests' decisions must never share
    one, though they land on the shards' streams in the same millisecond (a sweep expiring
    many, a Reject all)."""
    async with signed_callbacks(redis_url, tmp_path, host_of(receiver.url)) as stack:
        created = [await create(stack, receiver.url, arguments={"order_id": n}) for n in range(40)]
        ids = [c["request_id"] for c in created]
        store = stack.host.store
        await asyncio.gather(*(store.decide(rid, Approve(decided_by=REVIEWER)) for rid in ids))

        async def all_delivered() -> list[dict[str, Any]] | None:
            return list(receiver.received) if len(receiver.received) >= len(ids) else None

        delivered = await eventually(all_delivered)
        by_request = {d["body"]["request_id"]: d["body"]["delivery_id"] for d in delivered}
        assert sorted(by_request) == sorted(ids)
        assert len(set(by_request.values())) == len(ids)  # one id each


async def test_a_callback_that_keeps_failing_is_dead_lettered(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.statuses = [503, 503, 503, 503]
    async with signed_callbacks(redis_url, tmp_path, host_of(receiver.url)) as stack:
        created = await create(stack, receiver.url)
        request = await stack.posted(created["request_id"])
        await stack.click(REVIEWER, request, blocks.APPROVE)

        [letter] = await eventually(lambda: dead_letters(stack))
        assert letter["request_id"] == created["request_id"]
        assert letter["attempts"] == "3" and "HTTP 503" in letter["error"]
        assert letter["callback_url"] == receiver.url
        assert receiver.attempts == 3 and receiver.received == []
        assert 'countersign_callbacks_total{result="dead"} 1' in await _metrics(stack)


async def test_a_callback_host_not_on_the_list_is_refused_at_creation(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    async with signed_callbacks(redis_url, tmp_path, "hooks.example.com") as stack:
        answer = await create(stack, receiver.url, status=400)
        assert "COUNTERSIGN_CALLBACK_HOSTS" in answer["error"]
        assert host_of(receiver.url) in answer["error"]
        assert await stack.host.store.pending_count() == 0


async def test_a_listed_name_that_points_at_loopback_is_not_called(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    """A listed name's owner controls where it points: a name resolving to this machine's
    loopback (here `localhost`) is not called, or any caller with the API token could
    reach services listening only there. The address itself, listed, still is."""
    port = host_of(receiver.url).rsplit(":", 1)[1]
    by_name = receiver.url.replace("127.0.0.1", "localhost")
    async with signed_callbacks(redis_url, tmp_path, f"localhost:{port}") as stack:
        created = await create(stack, by_name)  # the name is on the list
        request = await stack.posted(created["request_id"])
        await stack.click(REVIEWER, request, blocks.APPROVE)

        [letter] = await eventually(lambda: dead_letters(stack))
        assert "localhost resolves to 127.0.0.1" in letter["error"], letter
        assert "list the address itself in COUNTERSIGN_CALLBACK_HOSTS" in letter["error"]
        assert receiver.attempts == 0


async def test_callbacks_need_the_webhook_secret_to_sign_them(
    redis_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    async with running_stack(
        redis_url, tmp_path, COUNTERSIGN_CALLBACK_HOSTS=host_of(receiver.url)
    ) as stack:
        answer = await create(stack, receiver.url, status=400)
        assert "COUNTERSIGN_WEBHOOK_SECRET" in answer["error"]


class BrokenSender:
    """A sender with a bug of countersign's own: every send raises it."""

    def __init__(self) -> None:
        self.attempts = 0

    async def send(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        self.attempts += 1
        raise ValueError("a bug in the sender")


@pytest.mark.parametrize("broken", ["sender", "request"])
async def test_a_callback_failing_with_our_own_error_is_dead_lettered_not_retried_for_ever(
    redis: Any, redis_url: str, broken: str
) -> None:
    env = make_env(redis)
    spec = ExternalRequestSpec(
        agent="billing-bot",
        tool="issue_refund",
        arguments={"order_id": 7},
        callback_url="https://hooks.example.com/countersign",
    )
    created = await ExternalRequests(env.store).create(spec)
    await env.store.decide(created.request_id, Approve(decided_by="bob"))
    settings = load_settings(
        {
            "REDIS_URL": redis_url,
            "COUNTERSIGN_WEBHOOK_SECRET": SECRET,
            "COUNTERSIGN_CALLBACK_HOSTS": "hooks.example.com",
        }
    )
    sender = BrokenSender()
    delivery = CallbackDelivery(env.store, settings, sender, "poisoned", idle_ms=30)
    await delivery.consumer.ensure_groups()
    reads = 0
    if broken == "request":  # its request cannot be read, when sending or giving up

        async def unreadable(request_id: str) -> Any:
            nonlocal reads
            reads += 1
            raise ValueError("a bug reading the request")

        env.store.get_request = unreadable  # type: ignore[method-assign]

    async def dead() -> list[dict[str, str]] | None:
        await delivery.consumer.poll(block_ms=1)
        return await dead_callbacks(redis) or None

    [letter] = await eventually(dead, within=10)
    assert letter["request_id"] == created.request_id
    assert f"failed {POISON_AFTER} times" in letter["error"]
    if broken == "sender":
        assert "a bug in the sender" in letter["error"]
        assert sender.attempts == POISON_AFTER
    else:
        assert "a bug reading the request" in letter["error"]
        assert letter["callback_url"] == "" and sender.attempts == 0
        assert reads == POISON_AFTER + 1  # each attempt, then the dead letter's own read
    assert await pending_entries(redis, "callbacks") == 0  # acknowledged: not retried again


async def _some(items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return list(items) or None


async def _metrics(stack: Stack) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{stack.url}/metrics") as resp:
        return await resp.text()
