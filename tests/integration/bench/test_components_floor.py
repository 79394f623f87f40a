"""The components' floor of an approval cycle (`bench.floor_server`) does a cycle's traffic:
a signed click is decided through Bolt, its message updated and a reply posted in its
thread. A floor that skipped any of it would be measured cheaper than it is, and make
countersign's own share of a cycle look larger."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.durable.store import RunStore
from bench.common import clone_paused, refund_paused
from bench.floor_server import TOKEN, create_floor_app
from bench.stack import KEYRING, ROUTE, SECRET, prepare_clicks, standin
from slack_sandbox import SlackStandIn
from slack_sandbox.signing import sign_request
from tests.support.routers import StaticRouter

ROUND_TRIPS = 5


def _replied(slack: SlackStandIn, channel: str, ts: str) -> bool:
    return any(
        m.channel == channel and m.thread_ts == ts and m.ts != ts for m in slack.workspace.messages
    )


async def test_the_floor_decides_updates_and_replies_for_a_signed_click(redis: Redis) -> None:
    assert TOKEN == "xoxb-bench-token"  # the stand-in's token (bench.stack.TOKEN)
    async with standin() as slack, aiohttp.ClientSession() as session:
        requests, bodies = await prepare_clicks(redis, slack, [clone_paused(await refund_paused())])
        (request,), (body,) = requests, bodies
        client = AsyncWebClient(token=TOKEN, base_url=slack.url, session=session)
        calls_before = len(slack.calls)
        gets_before = await _gets(redis)
        app = create_floor_app(redis, client, SECRET, ROUND_TRIPS)
        async with TestClient(TestServer(app)) as http:
            forged = sign_request("another secret", int(time.time()), body)
            refused = await http.post("/slack/events", data=body, headers=_form(forged))
            assert refused.status == 401
            signed = sign_request(SECRET, int(time.time()), body)
            response = await http.post("/slack/events", data=body, headers=_form(signed))
            assert response.status == 200
            deadline = time.monotonic() + 10
            while not _replied(slack, request.message_channel, request.message_ts):
                assert time.monotonic() < deadline, "no reply in the message's thread"
                await asyncio.sleep(0.05)
    decided = await RunStore(redis, KEYRING, StaticRouter(ROUTE)).get_request(request.request_id)
    assert decided is not None and decided.status == "approved"
    assert await _gets(redis) - gets_before == ROUND_TRIPS - 1  # DECIDE being the first
    methods = [method for method, _ in slack.calls[calls_before:]]
    assert methods.count("chat.update") == 1 and methods.count("chat.postMessage") == 1
    (update,) = slack.calls_to("chat.update")
    assert (update["channel"], update["ts"]) == (request.message_channel, request.message_ts)


async def _gets(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


def _form(headers: dict[str, str]) -> dict[str, str]:
    return headers | {"Content-Type": "application/x-www-form-urlencoded"}
