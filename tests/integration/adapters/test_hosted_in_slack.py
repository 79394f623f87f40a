"""Agents of other frameworks hosted by countersign, the whole way: a real Redis, the Slack
stand-in, signed clicks, the resume worker. Every test runs once per framework (Pydantic AI
and the OpenAI Agents SDK, each on its own offline model: tests/support/hosted_agents.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_host.runtime.decisions import DEFAULT_EXPIRED_MESSAGE
from bot import blocks
from tests.support.hosted_agents import AGENTS, FINAL, REGISTRY, build_registry
from tests.support.stack import API_TOKEN, CHANNEL, REVIEWER, Stack, running_stack

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in AGENTS.items()]
REFUND = {"order_id": "124", "amount": 12.5}


@asynccontextmanager
async def hosted_stack(redis_url: str, tmp_path: Path, **env: str) -> AsyncIterator[Stack]:
    """The whole stack in one process, serving tests/support/hosted_agents.py's agents."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=REGISTRY, **env) as stack:
        yield stack


def effects(stack: Stack, kind: str, agent: str) -> list[dict[str, Any]]:
    return [e for e in stack.effects.all_events() if e["kind"] == kind and e["agent"] == agent]


async def run_detail(stack: Stack, run_id: str) -> dict[str, Any]:
    """GET /api/v1/runs/{id}, as an operator reads a run."""
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{stack.url}/api/v1/runs/{run_id}", headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        detail: dict[str, Any] = await resp.json()
        return detail


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_an_approve_click_resumes_the_hosted_run_and_the_refund_runs_once(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)

        # The whole turn paused: the lookup the policy lets through has not run either.
        assert effects(stack, "lookup", agent) == []
        assert effects(stack, "refund", agent) == []
        assert (request.tool, request.arguments) == ("issue_refund", REFUND)
        posted = str(stack.message(CHANNEL, request.message_ts)["blocks"])
        assert "issue_refund" in posted and "12.5" in posted and request.request_id in posted

        reply = await stack.click(REVIEWER, request, blocks.APPROVE)
        assert reply.status == 200
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "succeeded", info.error
        assert info.output == f"{FINAL}order 124: paid twice; refunded 12.50 to order 124"
        [refund] = effects(stack, "refund", agent)
        assert (refund["order_id"], refund["amount"]) == ("124", 12.5)
        assert len(effects(stack, "lookup", agent)) == 1
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert outcome["text"] == f"Run finished: {info.output}"
        message = await stack.decided_message(CHANNEL, request.message_ts)
        assert REVIEWER in str(message["blocks"])
        detail = await run_detail(stack, run_id)
        assert [(c["tool"], c["outcome"]) for c in detail["tool_calls"]] == [
            ("lookup_order", "executed"),
            ("issue_refund", "executed"),
        ]
        assert [(a["tool"], a["status"], a["decided_by"]) for a in detail["approvals"]] == [
            ("issue_refund", "approved", REVIEWER)
        ]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_reject_click_never_runs_the_refund_and_the_model_reads_the_reason(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    reason = "the customer was refunded by bank transfer already"
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)

        await stack.click(REVIEWER, request, blocks.REJECT)
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
        )
        assert submitted.status == 200
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "succeeded", info.error
        assert effects(stack, "refund", agent) == []
        assert len(effects(stack, "lookup", agent)) == 1  # its turn went on without the refund
        # what the framework handed its model as the refund's result: the reviewer's reason
        last_request = effects(stack, "model_request", agent)[-1]
        assert last_request["results"] == ["order 124: paid twice", reason]
        assert info.output == f"{FINAL}order 124: paid twice; {reason}"
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert reason in outcome["text"] and "was rejected by <@U0REVIEWER>" in outcome["text"]
        detail = await run_detail(stack, run_id)
        assert [(c["tool"], c["outcome"]) for c in detail["tool_calls"]] == [
            ("lookup_order", "executed"),
            ("issue_refund", "rejected"),
        ]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_hosted_agent_changed_while_paused_is_refused_at_resume(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    async with hosted_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)
        # redeployed while the run waited: issue_refund takes one more parameter
        runner = stack.host.runner
        runner.registry = build_registry(stack.effects, changed=True)
        runner.reload_agents()

        await stack.click(REVIEWER, request, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")

        assert info.status == "failed"
        assert f"agent {agent!r} changed since run {run_id} paused" in info.error
        assert "schema of tool issue_refund changed" in info.error
        assert "must be asked again in a new run" in info.error
        assert effects(stack, "refund", agent) == []
        assert effects(stack, "lookup", agent) == []
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert outcome["text"].startswith("Run failed: ")
        assert "schema of tool issue_refund changed" in outcome["text"]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_request_nobody_decided_expires_and_the_refund_never_runs(
    agent: str, redis_url: str, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yml"
    routes.write_text(f"routes:\n  - tool: issue_refund\n    channel: {CHANNEL}\n    expiry: 1s\n")
    async with hosted_stack(redis_url, tmp_path, COUNTERSIGN_ROUTES_FILE=str(routes)) as stack:
        run_id = await stack.start_run(agent, "refund order 124")
        [request] = await stack.pending_requests(run_id)

        info = await stack.run_status(run_id, "succeeded", "failed")  # the sweeper decides

        assert info.status == "succeeded", info.error
        assert effects(stack, "refund", agent) == []
        assert effects(stack, "model_request", agent)[-1]["results"] == [
            "order 124: paid twice",
            DEFAULT_EXPIRED_MESSAGE,
        ]
        expired = await stack.decided(request.request_id)
        assert expired.status == "expired"
        detail = await run_detail(stack, run_id)
        assert [(c["tool"], c["outcome"]) for c in detail["tool_calls"]] == [
            ("lookup_order", "executed"),
            ("issue_refund", "expired"),
        ]
