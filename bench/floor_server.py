"""The floor of one approval cycle: what its I/O costs through the libraries countersign is
built on, with none of countersign's own work.

    python -m bench.floor_server PORT REDIS_URL SIGNING_SECRET SLACK_API_URL ROUND_TRIPS

POST /slack/events: the timestamp and HMAC-SHA256 signature checked over the raw bytes,
then Bolt's dispatch (an `AsyncApp` set up as countersign's: its own check off, listener
run before the response) to one action listener. The listener runs countersign's DECIDE
Lua script once and acks. After the ack, in a task of its own, the rest of the cycle's
I/O: ROUND_TRIPS - 1 more Redis round trips (a GET each, through a client connected as
`serve` connects), then the two Web API calls of a cycle through slack_sdk's
`AsyncWebClient`: the message updated (`chat.update`, with the message's blocks) and the
outcome posted in its thread (`chat.postMessage`).

No checkpoint read, decrypted or saved, no agent, no tool, no outbox or resume streams, no
reviewer rules: the CPU of a cycle that is only its traffic. `bench.steps floor:N` loads it
as it loads `serve`, and its CPU per cycle beside `serve`'s says how much of a cycle is
countersign's own work and how much the components' floor.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web
from redis.asyncio import Redis
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.durable.connection_pool import WaitingConnectionPool
from agent_host.durable.connections import _client_options
from agent_host.durable.scripts import DECIDE
from agent_host.durable.store import decide_keys
from bot.blocks.ids import APPROVE
from bot.server import start_site, stop_on_signals

from .bare_server import events_app
from .common import run_as_serve_runs

MAX_SKEW = 300  # seconds, as Bolt allows
TOKEN = "xoxb-bench-token"
_SIGNATURE = re.compile(r"^v0=[0-9a-f]{64}$")


def create_floor_app(
    redis: Redis, client: AsyncWebClient, secret: str, round_trips: int
) -> web.Application:
    decide = redis.register_script(DECIDE)
    tasks: set[asyncio.Task[None]] = set()
    bolt = AsyncApp(
        client=client,
        signing_secret=secret,
        request_verification_enabled=False,  # checked below, over the raw bytes
        process_before_response=True,
        ignoring_self_events_enabled=False,
    )

    async def rest_of_cycle(body: dict[str, Any]) -> None:
        for _ in range(round_trips - 1):
            await redis.get("floor")
        channel, message = body["channel"]["id"], body["message"]
        await client.chat_update(
            channel=channel, ts=message["ts"], text="Approved", blocks=message["blocks"]
        )
        await client.chat_postMessage(channel=channel, thread_ts=message["ts"], text="done")

    @bolt.action(APPROVE)
    async def on_click(ack: AsyncAck, body: dict[str, Any]) -> None:
        request_id, user = body["actions"][0]["value"], body["user"]["id"]
        decision = json.dumps({"kind": "approve", "decided_by": user})
        await decide(
            keys=decide_keys(request_id, body["channel"]["id"]),
            args=[request_id, "approve", "approved", decision, user, "", "0"],
        )
        await ack()
        task = asyncio.create_task(rest_of_cycle(body))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    key = secret.encode()

    async def slack_events(request: web.Request) -> web.Response:
        raw = await request.read()
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if not (stamp.isdigit() and _SIGNATURE.fullmatch(signature)):
            return web.Response(status=401)
        if abs(time.time() - int(stamp)) > MAX_SKEW:
            return web.Response(status=401)
        base = b"v0:" + stamp.encode() + b":" + raw
        expected = "v0=" + hmac.new(key, base, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            return web.Response(status=401)
        return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

    return events_app(slack_events)


async def serve(port: int, redis_url: str, secret: str, slack_url: str, round_trips: int) -> None:
    stop = stop_on_signals()
    options = _client_options(redis_url, one_shot=False)  # as `serve` connects
    redis = Redis.from_pool(WaitingConnectionPool.from_url(redis_url, **options))
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    client = AsyncWebClient(token=TOKEN, base_url=slack_url, timeout=10, session=session)
    app = create_floor_app(redis, client, secret, round_trips)
    runner, _ = await start_site(app, "127.0.0.1", port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await session.close()
        await redis.aclose()


def main(argv: list[str]) -> int:
    port, redis_url, secret, slack_url, round_trips = argv
    run_as_serve_runs(serve(int(port), redis_url, secret, slack_url, int(round_trips)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
