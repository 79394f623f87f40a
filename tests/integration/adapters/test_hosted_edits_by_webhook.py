"""The approval webhook's `edited_arguments` on a hosted agent's call: the same approval
service checks as Slack's form, then the framework's tool runs with the edited arguments
once, and the API shows both sets of arguments (real Redis, the resume worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from tests.integration.agent_host.test_webhook_edits import Api, error_of, serving_api
from tests.support.hosted_agents import EDITABLE, build_registry

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in EDITABLE.items()]


@pytest_asyncio.fixture
async def api(redis: Redis, tmp_path: Path) -> AsyncIterator[Api]:
    async with serving_api(redis, tmp_path, build_registry) as served:
        yield served


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
