"""The approval webhook's `edited_arguments` on a hosted agent's call: the same approval
service checks as Slack's form, then the framework's tool runs with the edited arguments
once, and the API shows both sets of arguments (real Redis, the resume worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host.examples import ExampleEffects
from agent_host.http.application import create_app
from tests.integration.agent_host.test_webhook_edits import SECRET, TOKEN, Api, error_of
from tests.support import host_env
from tests.support.host_env import Env, FakeClock
from tests.support.hosted_agents import EDITABLE, build_registry

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in EDITABLE.items()]


@pytest_asyncio.fixture
async def api(redis: Redis, tmp_path: Path) -> AsyncIterator[Api]:
    effects = ExampleEffects()
    host, _ = host_env.make_host(
        redis,
        tmp_path,
        registry=build_registry(effects),
        COUNTERSIGN_API_TOKEN=TOKEN,
        COUNTERSIGN_WEBHOOK_SECRET=SECRET,
    )
    host.store.clock = FakeClock()
    env = Env(redis, host.keyring, host.store, host.runner, effects)
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
        yield Api(client, host, env)


def refunds(api: Api, agent: str) -> list[tuple[Any, Any]]:
    return [
        (e["order_id"], e["amount"])
        for e in api.env.effects.events
        if e["kind"] == "refund" and e["agent"] == agent
    ]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_webhook_edited_arguments_run_the_hosted_tool_once_as_edited(
    agent: str, api: Api
) -> None:
    run_id, rid = await api.paused(agent, "refund order 124")
    refused = await error_of(
        await api.webhook(
            {"requestId": rid, "decision": "approved", "edited_arguments": {"order_id": "9"}}
        ),
        400,
    )
    assert set(refused["errors"]) == {"order_id"}
    await api.still_pending(rid, "refund")

    body = {"requestId": rid, "decision": "approved", "edited_arguments": {"amount": 4}}
    resp = await api.webhook(body)
    assert resp.status == 200, await resp.text()
    replay = await api.webhook(body)
    assert (await replay.json())["status"] == "already_processed"
    await api.env.drain()
    await api.env.drain()

    assert refunds(api, agent) == [("124", 4.0)]
    detail = await api.run(run_id)
    assert detail["status"] == "succeeded", detail
    [call] = [c for c in detail["tool_calls"] if c["tool"] == "issue_refund"]
    assert call["arguments"] == {"order_id": "124", "amount": 12.5}
    assert call["edited_arguments"]["amount"] == 4
    assert call["result"].startswith("refunded 4.00 to order 124")
    assert "reviewer webhook edited the arguments" in call["result"]
