"""The ack baseline: a bare aiohttp server doing only what a click minimally needs.

    python -m bench.bare_server PORT REDIS_URL SIGNING_SECRET

POST /slack/events: check the timestamp and the HMAC-SHA256 signature, read the request id
out of the payload, run countersign's DECIDE Lua script once, answer 200. No Bolt, no
reviewer rules, no reads before or after the script. Served like `countersign serve` serves
(`bot.server.start_site`: an aiohttp AppRunner, no access log) until SIGTERM.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from aiohttp import web
from redis.asyncio import Redis

from agent_host.durable.scripts import DECIDE
from agent_host.durable.store import decide_keys
from bot.server import start_site, stop_on_signals
from slack_sandbox.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, compute_signature

MAX_SKEW = 300  # seconds, as Bolt allows


def create_bare_app(redis: Redis, secret: str, destination: str) -> web.Application:
    decide = redis.register_script(DECIDE)

    async def slack_events(request: web.Request) -> web.Response:
        body = await request.read()
        stamp = request.headers.get(TIMESTAMP_HEADER, "")
        given = request.headers.get(SIGNATURE_HEADER, "")
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > MAX_SKEW:
            return web.Response(status=401)
        if not hmac.compare_digest(compute_signature(secret, stamp, body), given):
            return web.Response(status=401)
        payload = json.loads(parse_qs(body.decode())["payload"][0])
        request_id, user = payload["actions"][0]["value"], payload["user"]["id"]
        decision = json.dumps({"kind": "approve", "decided_by": user})
        await decide(
            keys=decide_keys(request_id, destination),
            # DECIDE's arguments (agent_host/durable/scripts.py): no seen hash, no quorum
            # override; the time is Redis's own, read inside the script.
            args=[request_id, "approve", "approved", decision, user, "", "0"],
        )
        return web.Response(status=200)

    return events_app(slack_events)


def events_app(
    slack_events: Callable[[web.Request], Awaitable[web.Response]],
) -> web.Application:
    """POST /slack/events answered by `slack_events`, and GET /healthz (the bench waits
    for it), as a bench server is served."""
    app = web.Application()
    app.router.add_post("/slack/events", slack_events)
    app.router.add_get("/healthz", _ok)
    return app


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def serve(port: int, redis_url: str, secret: str) -> None:
    stop = stop_on_signals()
    redis = Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    runner, _ = await start_site(create_bare_app(redis, secret, "C0APPROVALS"), "127.0.0.1", port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await redis.aclose()


def main(argv: list[str]) -> int:
    port, redis_url, secret = argv
    asyncio.run(serve(int(port), redis_url, secret))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
