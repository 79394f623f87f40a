"""The ack benchmark's baseline (`bench.bare_server`) really decides the request it is sent:
a baseline that ran DECIDE with the wrong arguments would be measured doing nothing."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host.approvals import FixedRouter
from bench.bare_server import create_bare_app
from slack_sandbox.signing import sign_request
from tests.support.host_env import make_env

SECRET = "bench-secret"


async def test_the_bare_baseline_decides_the_clicked_request(redis: Redis) -> None:
    env = make_env(redis, router=FixedRouter("C0APPROVALS"))
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    payload = {"actions": [{"value": request.request_id}], "user": {"id": "U0REVIEWER"}}
    body = urlencode({"payload": json.dumps(payload)})
    headers = sign_request(SECRET, int(time.time()), body)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    async with TestClient(TestServer(create_bare_app(redis, SECRET, "C0APPROVALS"))) as client:
        response = await client.post("/slack/events", data=body, headers=headers)
        assert response.status == 200
    decided = await env.store.get_request(request.request_id)
    assert decided is not None and decided.status == "approved"
    assert decided.decided_by == "U0REVIEWER"
