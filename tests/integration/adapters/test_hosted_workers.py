"""Resume workers running hosted agents (tests/support/hosted_agents.py) against a real
Redis: a worker that dies after the framework ran calls, before the outcome was saved, and
the worker that takes its entry over.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.crashpoints import CrashPoints
from agent_host.durable.worker import ResumeWorker
from agent_host.examples import ExampleEffects
from agent_host.runtime.decisions import Approve
from tests.support.host_env import Env, make_env
from tests.support.hosted_agents import AGENTS, FINAL, TOLD, build_registry

FRAMEWORKS = [pytest.param(agent, id=framework) for framework, agent in AGENTS.items()]


class Died(BaseException):
    """The worker's process ended here (a BaseException: no handler of countersign's
    catches it, as none would run after a SIGKILL)."""


class DiesAfterTheToolsRan(CrashPoints):
    """The crash point of `COUNTERSIGN_CRASH_AT=after_tool_ran`, in process."""

    def reached(self, point: str) -> None:
        if point == "after_tool_ran":
            raise Died(point)


def hosted_env(redis: Redis) -> Env:
    effects = ExampleEffects()
    env = make_env(redis, registry=build_registry(effects))
    env.effects = effects
    return env


def events(env: Env, kind: str, agent: str) -> list[dict[str, Any]]:
    return [e for e in env.effects.all_events() if e["kind"] == kind and e["agent"] == agent]


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_worker_taking_over_continues_from_the_saved_turn_and_sends_one_note(
    agent: str, redis: Redis
) -> None:
    """After the approved refund the model writes the customer a note, a call the policy
    lets through, and words it afresh each time it is asked. The dying worker ran the
    framework to the end: refund, note, final answer. The worker taking over continues from
    the note's turn as it was saved before the note was sent, so the model is not asked for
    that turn again and the note is not sent twice."""
    env = hosted_env(redis)
    run_id = await env.start(agent, "refund order 124 and tell them")
    [request] = await env.requests(run_id)
    await env.store.decide(
        request.request_id, Approve(decided_by="bob", call_hash=request.call_hash)
    )
    stream = K.Keys(run_id).shard.resume
    taken: Any = await redis.xreadgroup(K.RESUME_GROUP, "dying", {stream: ">"}, count=10)
    [(_, [(entry_id, raw)])] = taken
    fields = {k.decode(): v.decode() for k, v in raw.items()}

    dying = ResumeWorker(env.store, env.runner, "dying", crash=DiesAfterTheToolsRan())
    with pytest.raises(Died):
        await dying.handle(entry_id.decode(), fields)
    [note] = events(env, "notify", agent)
    assert await env.status(run_id) == "resuming"

    survivor = env.worker("survivor", idle_ms=50)
    await asyncio.sleep(0.08)
    assert await survivor.consumer.poll(block_ms=1) == 1

    info = await env.info(run_id)
    assert info.status == "succeeded", info.error
    assert events(env, "notify", agent) == [note], "the note was sent once"
    assert len(events(env, "refund", agent)) == 1
    assert info.output == (f"{FINAL}order 124: paid twice; refunded 12.50 to order 124; {TOLD}")
    asked = [len(e["results"]) for e in events(env, "model_request", agent)]
    # the turn that planned the note was asked once; the final answer by each worker
    assert asked == [0, 2, 3, 3], asked
