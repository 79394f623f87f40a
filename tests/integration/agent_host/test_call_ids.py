"""Call ids are the runner's: a model that repeats its ids still gets every call shown to a
reviewer, decided and run. Driven through the store, real Redis and a
resume worker, as a run started over the HTTP API is."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host.http.application import create_app
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.decisions import Approve
from agent_host.runtime.messages import ModelResponse, ToolCall
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.policy import Permission
from tests.support.agents import Recorder, counting_tool, registry_of, scripted, tc
from tests.support.host_env import Env, make_env, make_host


def refunder(rec: Recorder, *turns: list[ToolCall] | ModelResponse) -> AgentRegistry:
    refund = counting_tool(rec, "refund", Permission.ASK, reason="moves money")
    return registry_of("refunder", [refund], scripted(*turns, reply("done")))


async def approve_all_pending(env: Env, run_id: str) -> list[str]:
    """Approve every pending request of the run, as reviewers clicking; their targets."""
    shown = []
    for request in await env.pending_requests(run_id):
        shown.append(request.arguments["target"])
        result = await env.store.decide(request.request_id, Approve(decided_by="U_REVIEWER"))
        assert result.accepted, result
    await env.drain()
    return shown


async def test_the_same_model_call_id_twice_in_a_turn_shows_and_runs_both_calls(
    redis: Redis,
) -> None:
    rec = Recorder()
    env = make_env(
        redis,
        registry=refunder(
            rec,
            [tc("call_1", "refund", target="order 1"), tc("call_1", "refund", target="order 2")],
        ),
    )
    run_id = await env.start("refunder", "refund orders 1 and 2")

    requests = await env.requests(run_id)
    assert len({r.request_id for r in requests}) == 2, "each gated call gets its own request"
    assert len({r.call_id for r in requests}) == 2
    assert sorted(await approve_all_pending(env, run_id)) == ["order 1", "order 2"]

    assert await env.status(run_id) == "succeeded"
    assert sorted(rec.targets("refund")) == ["order 1", "order 2"]
    state = await env.final_state(run_id)
    assert [(c.model_call_id, c.outcome) for c in state.calls] == [
        ("call_1", "executed"),
        ("call_1", "executed"),
    ]
    # the model's transcript still answers its own ids, once per call, in order
    replies = [(m.tool_call_id, m.content) for m in state.transcript if m.role == "tool"]
    assert replies == [("call_1", "refund done: order 1"), ("call_1", "refund done: order 2")]


async def test_a_model_id_reused_in_a_later_turn_runs_the_new_approved_call(
    redis: Redis,
) -> None:
    rec = Recorder()
    env = make_env(
        redis,
        registry=refunder(
            rec,
            [tc("call_1", "refund", target="order 1")],
            [tc("call_1", "refund", target="order 2")],  # the same id, a different call
        ),
    )
    run_id = await env.start("refunder", "refund order 1, then order 2")

    assert await approve_all_pending(env, run_id) == ["order 1"]
    assert await env.status(run_id) == "waiting"
    assert await approve_all_pending(env, run_id) == ["order 2"]

    assert await env.status(run_id) == "succeeded"
    assert rec.targets("refund") == ["order 1", "order 2"], "the second refund really ran"
    second = (await env.final_state(run_id)).calls[1]
    assert (second.outcome, second.result) == ("executed", "refund done: order 2")
    assert second.call_id != (await env.final_state(run_id)).calls[0].call_id


async def test_the_runs_api_lists_each_call_under_the_runners_id(
    redis: Redis, tmp_path: Path
) -> None:
    rec = Recorder()
    registry = refunder(
        rec, [tc("dup", "refund", target="order 1"), tc("dup", "refund", target="order 2")]
    )
    host, effects = make_host(redis, tmp_path, registry=registry, COUNTERSIGN_API_TOKEN="t0ken")
    env = Env(redis, host.keyring, host.store, host.runner, effects)
    auth = {"Authorization": "Bearer t0ken"}
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
        resp = await client.post(
            "/api/v1/runs", json={"agent": "refunder", "input": "go"}, headers=auth
        )
        assert resp.status == 202, await resp.text()
        run_id = (await resp.json())["run_id"]
        await env.drain()
        resp = await client.get(f"/api/v1/runs/{run_id}", headers=auth)
        detail = await resp.json()

    calls = detail["tool_calls"]
    assert [(c["tool"], c["arguments"]) for c in calls] == [
        ("refund", {"target": "order 1"}),
        ("refund", {"target": "order 2"}),
    ]
    assert len({c["call_id"] for c in calls}) == 2 and "dup" not in {c["call_id"] for c in calls}
    assert {"call_id", "tool", "arguments", "outcome"} <= set(calls[0])
    assert len({a["request_id"] for a in detail["approvals"]}) == 2
