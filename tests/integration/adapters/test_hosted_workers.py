"""Resume workers running hosted agents (tests/support/hosted_agents.py) against a real
Redis: a worker that dies after the framework ran calls, before the outcome was saved, and
the worker that takes its entry over.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis.asyncio import Redis

from agent_host.adapters.pydantic_ai import PydanticAIAgent
from agent_host.durable import keys as K
from agent_host.durable.crashpoints import CrashPoints
from agent_host.durable.worker import ResumeWorker
from agent_host.errors import CheckpointError
from agent_host.examples import ExampleEffects
from agent_host.runtime import hosted_runner
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.decisions import Approve
from tests.support.host_env import Env, make_env, polled_until
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


async def given_up(env: Env, run_id: str) -> None:
    worker = env.worker("given-up", idle_ms=30)

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(worker, ended)


async def approved(env: Env, agent: str) -> tuple[str, str]:
    run_id = await env.start(agent, "refund order 124")
    [request] = await env.requests(run_id)
    decision = Approve(decided_by="bob", call_hash=request.call_hash)
    assert (await env.store.decide(request.request_id, decision)).resume_queued
    return run_id, request.call_id


@pytest.mark.parametrize("agent", FRAMEWORKS)
async def test_a_run_failed_after_its_approved_call_ran_records_that_it_ran(
    redis: Redis, agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its outcome cannot be saved (five times over), or countersign refuses to go on after
    the framework ran the call: either way the run fails, its final state says the refund
    ran (the guard's ledger entries are keyed by call and hash), and its error says to
    check that before starting it again."""
    env = hosted_env(redis)
    run_id, call_id = await approved(env, agent)

    async def save_fails(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("the state would not serialize")

    monkeypatch.setattr(env.store, "save_outcome", save_fails)  # a pause's
    monkeypatch.setattr(env.store, "finish_at_turn", save_fails)  # an end's
    await given_up(env, run_id)
    monkeypatch.undo()

    info = await env.info(run_id)
    assert info.status == "failed" and "check them" in info.error, info.error
    assert len(events(env, "refund", agent)) == 1
    record = (await env.final_state(run_id)).call(call_id)
    assert record is not None and record.outcome == "executed"

    env = hosted_env(redis)  # a second run: countersign's own error after the call ran
    run_id, call_id = await approved(env, agent)

    async def refuses(self: Any, agent: Any, state: Any, step: Any, guard: Any) -> Any:
        hosted_runner._settle(state, guard)
        raise CheckpointError("the framework's state could not be checked")

    monkeypatch.setattr(hosted_runner.HostedRunner, "_continue", refuses)
    await given_up(env, run_id)

    info = await env.info(run_id)
    assert info.status == "failed" and "could not be checked" in info.error
    assert "check them" in info.error
    record = (await env.final_state(run_id)).call(call_id)
    assert record is not None and record.outcome == "executed"


@pytest.mark.parametrize("b_says", ["a call for a person", "an error", "a final answer"])
async def test_an_outcome_of_a_turn_another_worker_saved_and_ran_gives_way_to_it(
    redis: Redis, b_says: str
) -> None:
    """Two workers on one resume entry (B took it over while A, stalled, still lived). A's
    model answers the turn after the refund with a note, which the policy lets through: A
    saves that turn and sends the note, then dies. B's model, asked the same turn before A
    saved it, comes to another outcome of that turn: a call that asks a person (the run
    would pause on it), an error (the framework raises: the run would fail), or a final
    answer. B's outcome gives way to the turn A saved first, and B continues from it: the
    note is on record and sent once, nobody is asked about a turn the run never took, and
    the run ends as A's turn leads it to. The hosted runner is one for every framework;
    Pydantic AI's FunctionModel lets the test decide what each worker's model says."""
    notes: list[str] = []
    env = make_env(redis)  # its registry is replaced below, once the agent is built
    entry: dict[str, Any] = {"asked": False}

    async def worker_a_sends_the_note_and_dies() -> None:
        dying = ResumeWorker(env.store, env.runner, "A", crash=DiesAfterTheToolsRan())
        with contextlib.suppress(Died):  # in a context of its own, as in another process
            await asyncio.create_task(
                dying.handle(entry["id"], entry["fields"]), context=contextvars.Context()
            )

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = [p.tool_name for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not done:
            return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": "124"})])
        if "notify" in done:
            return ModelResponse(parts=[TextPart("all done")])
        if not entry["asked"]:  # B asks first; A answers the same turn meanwhile: the note
            entry["asked"] = True
            await worker_a_sends_the_note_and_dies()
            assert notes == ["your refund is on its way"]
            if b_says == "an error":
                raise RuntimeError("the model endpoint answered 429")
            if b_says == "a final answer":
                return ModelResponse(parts=[TextPart("nothing more to do")])
            return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": "125"})])
        return ModelResponse(parts=[ToolCallPart("notify", {"text": "your refund is on its way"})])

    agent: PydanticAgent[None, str] = PydanticAgent(FunctionModel(respond), name="racer")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    @agent.tool_plain
    def notify(text: str) -> str:
        """Tell the customer."""
        notes.append(text)
        return "told"

    env.runner.registry = AgentRegistry({"racer": lambda: PydanticAIAgent(agent, name="racer")})
    run_id = await env.start("racer", "refund order 124")
    [request] = await env.requests(run_id)
    decision = Approve(decided_by="bob", call_hash=request.call_hash)
    assert (await env.store.decide(request.request_id, decision)).resume_queued
    stream = K.Keys(run_id).shard.resume
    taken: Any = await redis.xreadgroup(K.RESUME_GROUP, "B", {stream: ">"}, count=10)
    [(_, [(entry_id, raw)])] = taken
    entry |= {"id": entry_id.decode(), "fields": {k.decode(): v.decode() for k, v in raw.items()}}

    await ResumeWorker(env.store, env.runner, "B").handle(entry["id"], entry["fields"])

    info = await env.info(run_id)
    assert (info.status, info.output) == ("succeeded", "all done"), info.error
    assert notes == ["your refund is on its way"], f"the note was sent {len(notes)} times"
    assert await env.pending_requests(run_id) == []  # nobody asked about B's turn
    ran = [c.tool for c in (await env.final_state(run_id)).calls if c.outcome == "executed"]
    assert ran == ["issue_refund", "notify"]
