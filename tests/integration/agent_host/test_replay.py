"""A model's response is saved before any of its calls runs; a worker that takes a run over
after a crash replays it and never asks the model again.

The model here answers every request with fresh call ids (as hosted models do), so the
execution ledger alone could not tell a repeated request's calls from new ones. A "crash" is
a BaseException escaping the worker mid-turn, which leaves the stream entry pending exactly
as a killed process does; tests/system/faults/test_replayed_turns.py kills real processes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key, kid_of
from agent_host.durable.progress import ProgressStore
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.errors import ModelError
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.decisions import Approve
from agent_host.runtime.messages import Message, ModelResponse, ToolSpec
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import UNKNOWN_OUTCOME
from agent_host.runtime.tools import ToolContext, tool
from tests.support.host_env import Env, make_env


class Crash(BaseException):
    """The worker process dying here (nothing in the host catches a BaseException)."""


class FreshIdsModel:
    """A scripted model that gives every call a new random id and counts its requests per
    turn; `crash_at_turn` makes the first request of that turn kill the "process"."""

    name = "fresh-ids"

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.requests: Counter[int] = Counter()
        self.crash_at_turn: int | None = None
        self.barrier: asyncio.Barrier | None = None  # makes concurrent requests meet

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        turn = sum(1 for m in messages if m.role == "assistant")
        self.requests[turn] += 1
        if turn == self.crash_at_turn:
            self.crash_at_turn = None
            raise Crash
        if self.barrier is not None:
            await self.barrier.wait()
        response = await self.inner.respond(messages, tools)
        calls = [
            c.model_copy(update={"id": f"call_{uuid.uuid4().hex}"}) for c in response.tool_calls
        ]
        return response.model_copy(update={"tool_calls": calls})


class Shop:
    """An agent whose ALLOW tool `notify` and ASK tool `refund` leave countable marks."""

    def __init__(self, *turns: Any) -> None:
        self.notified: list[str] = []
        self.refunded: list[str] = []
        self.crash_in_notify = False
        self.model = FreshIdsModel(ScriptedModel(self._script(turns)))

    @staticmethod
    def _script(turns: tuple[Any, ...]) -> Any:
        def script(c: Conversation) -> ModelResponse:
            turn = turns[min(c.turn, len(turns) - 1)]
            return turn if isinstance(turn, ModelResponse) else ModelResponse(tool_calls=turn)

        return script

    def registry(self) -> AgentRegistry:
        @tool
        def notify(target: str, ctx: ToolContext) -> str:
            """Tell the customer."""
            self.notified.append(target)
            if self.crash_in_notify:
                self.crash_in_notify = False
                raise Crash
            return f"notified {target}"

        @tool(permission=Permission.ASK, reason="moves money")
        def refund(target: str, ctx: ToolContext) -> str:
            """Refund an order."""
            self.refunded.append(target)
            return f"refunded {target}"

        def build() -> Agent:
            return Agent(
                name="shop",
                instructions="You run a shop.",
                tools=[notify, refund],
                model=self.model,
            )

        return AgentRegistry({"shop": build})


async def start_entry(env: Env, run_id: str) -> dict[str, str]:
    entries: Any = await env.redis.xrange(K.Keys(run_id).shard.resume)
    for _, raw in entries:
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        if fields["run_id"] == run_id:
            return fields
    raise AssertionError(f"no start entry for {run_id}")


@pytest.mark.parametrize("where", ["in_the_tool", "at_the_next_model_request"])
async def test_a_start_entry_redelivered_after_a_crash_replays_the_saved_turn(
    redis: Redis, where: str
) -> None:
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    if where == "in_the_tool":
        shop.crash_in_notify = True  # after its side effect, before the ledger records it
    else:
        shop.model.crash_at_turn = 1  # the ALLOW call ran and was recorded

    with pytest.raises(Crash):
        await env.worker("dies").handle("1-0", entry)
    assert shop.notified == ["order 7"]
    assert await env.status(run_id) == "running"

    await env.worker("takes-over").handle("1-0", entry)  # the redelivered entry

    assert shop.notified == ["order 7"], "the ALLOW tool ran once"
    assert shop.model.requests[0] == 1, "the model was asked once for the first turn"
    assert await env.status(run_id) == "succeeded"
    [notify] = (await env.final_state(run_id)).calls
    if where == "in_the_tool":
        assert (notify.outcome, notify.result) == ("unknown_outcome", UNKNOWN_OUTCOME)
    else:
        assert (notify.outcome, notify.result) == ("executed", "notified order 7")
    assert not await redis.exists(K.Keys(run_id).progress), "progress is dropped when saved"


async def test_a_resume_entry_redelivered_after_a_crash_replays_the_saved_turn(
    redis: Redis,
) -> None:
    shop = Shop(
        [call("refund", target="order 7")],
        [call("notify", target="order 7")],
        reply("refunded and told them"),
    )
    env = make_env(redis, registry=shop.registry())
    run_id = await env.start("shop", "refund order 7")
    (request,) = await env.requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).resume_queued
    entries: Any = await redis.xrange(K.Keys(run_id).shard.resume)
    entry = {k.decode(): v.decode() for k, v in entries[-1][1].items()}
    assert entry["type"] == "resume"
    shop.model.crash_at_turn = 2  # after notify (ALLOW, turn 1) ran and was recorded

    with pytest.raises(Crash):
        await env.worker("dies").handle("2-0", entry)
    await env.worker("takes-over").handle("2-0", entry)

    assert await env.status(run_id) == "succeeded"
    assert shop.refunded == ["order 7"] and shop.notified == ["order 7"]
    assert shop.model.requests[1] == 1, "the model was asked once for the turn after the pause"
    outcomes = [c.outcome for c in (await env.final_state(run_id)).calls]
    assert outcomes == ["executed", "executed"]


async def test_two_workers_on_one_entry_settle_on_the_response_saved_first(
    redis: Redis,
) -> None:
    # Each model request proposes a different call; both workers ask at once.
    asked: list[int] = []

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            asked.append(len(asked))
            return ModelResponse(tool_calls=[call("notify", target=f"answer {len(asked)}")])
        return reply("done")

    shop = Shop()
    shop.model.inner = ScriptedModel(script)
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell someone", "alice")
    entry = await start_entry(env, run_id)
    shop.model.barrier = asyncio.Barrier(2)

    await asyncio.gather(env.worker("a").handle("1-0", entry), env.worker("b").handle("1-0", entry))

    assert shop.model.requests[0] == 2 and len(asked) == 2
    assert len(shop.notified) == 1, f"one response's calls ran, not both: {shop.notified}"
    assert await env.status(run_id) == "succeeded"
    [notify] = (await env.final_state(run_id)).calls
    assert notify.arguments == {"target": shop.notified[0]}


async def test_damaged_progress_fails_the_run_closed_and_runs_nothing_again(redis: Redis) -> None:
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    shop.model.crash_at_turn = 1
    with pytest.raises(Crash):
        await env.worker("dies").handle("1-0", entry)
    progress = K.Keys(run_id).progress

    # progress sealed to another run or pause does not open (one sealed under a key this
    # ring lacks is not damage: it waits for the key, see test_rotation.py)
    assert await redis.hget(progress, "pause_id") == b""
    await redis.hset(progress, "blob", env.keyring.encrypt(b"{}", run_id=run_id, request_id="x"))

    await env.worker("takes-over").handle("1-0", entry)

    info = await env.info(run_id)
    assert info.status == "failed"
    assert "saved progress could not be decrypted or verified" in info.error
    assert shop.notified == ["order 7"], "nothing ran again"
    assert not await redis.exists(progress), "the failed run's saved turn went with it"


def dies_at_the_final_answer(env: Env, *, saved: bool) -> None:
    """The next worker to save a final answer dies right after that step (`saved`) or
    right before it; the workers after it save as usual."""
    real_finish_answer = env.store.finish_answer

    async def dies(*args: Any, **kwargs: Any) -> Any:
        env.store.finish_answer = real_finish_answer  # type: ignore[method-assign]
        if saved:
            await real_finish_answer(*args, **kwargs)
        raise Crash

    env.store.finish_answer = dies  # type: ignore[method-assign]


async def test_a_final_answer_saved_before_a_crash_is_not_asked_for_again(redis: Redis) -> None:
    """A final answer is saved as the run's outcome (FINISH, fenced as a turn): a worker
    that dies after that step, before its entry is acknowledged, leaves a finished run."""
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    dies_at_the_final_answer(env, saved=True)
    with pytest.raises(Crash):
        await env.worker("dies").handle("1-0", entry)
    assert shop.model.requests == Counter({0: 1, 1: 1})
    assert await env.status(run_id) == "succeeded"

    await env.worker("takes-over").handle("1-0", entry)

    assert shop.model.requests == Counter({0: 1, 1: 1}), "no turn was asked twice"
    assert (await env.info(run_id)).output == "told them"
    assert shop.notified == ["order 7"]
    assert not await redis.exists(K.Keys(run_id).progress), "the saved turn went with it"


async def test_a_final_answer_not_yet_saved_is_asked_for_again_and_nothing_runs_twice(
    redis: Redis,
) -> None:
    """A worker that dies between the model's final answer and its save asks again for
    that answer only, as for any response it had not saved: the call before it ran once."""
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    dies_at_the_final_answer(env, saved=False)
    with pytest.raises(Crash):
        await env.worker("dies").handle("1-0", entry)
    assert await env.status(run_id) == "running"

    await env.worker("takes-over").handle("1-0", entry)

    assert shop.model.requests == Counter({0: 1, 1: 2}), "only the unsaved answer again"
    assert shop.notified == ["order 7"], "the ALLOW call ran once"
    assert (await env.info(run_id)).output == "told them"


async def test_a_final_answer_to_a_turn_another_worker_saved_first_goes_on_from_that_turn(
    redis: Redis,
) -> None:
    """Two workers on one entry asked the same turn: one got a call and saved it, then
    died in the tool; the other got a final answer. The call saved first wins: the final
    answer is dropped, the call is not run again, and the run goes on from it."""
    b_asked, released = asyncio.Event(), asyncio.Event()

    class TwoMinds:
        name = "two-minds"

        async def respond(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelResponse:
            if sum(1 for m in messages if m.role == "assistant"):
                return reply("told them")
            if not b_asked.is_set():  # worker b, asked first, answers last
                b_asked.set()
                await released.wait()
                return reply("nothing to do")
            return ModelResponse(tool_calls=[call("notify", target="order 7")])

    shop = Shop()
    shop.model = TwoMinds()  # type: ignore[assignment]
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    b = asyncio.create_task(env.worker("b").handle("1-0", entry))
    await b_asked.wait()
    shop.crash_in_notify = True
    with pytest.raises(Crash):
        await env.worker("a").handle("1-0", entry)  # saved its turn, died in the tool
    released.set()
    await b

    info = await env.info(run_id)
    assert (info.status, info.output) == ("succeeded", "told them")
    assert shop.notified == ["order 7"], "the call saved first ran once"
    [notify] = (await env.final_state(run_id)).calls
    assert (notify.outcome, notify.result) == ("unknown_outcome", UNKNOWN_OUTCOME)


@pytest.mark.parametrize("a_gets", ["a final answer", "a model error"])
async def test_an_outcome_of_a_turn_another_worker_went_past_goes_on_from_its_last_turn(
    redis: Redis, a_gets: str
) -> None:
    """Worker a's model request for turn 1 ends the run, with a final answer or an error
    (a 429), while worker b, a turn ahead, saved turns 1 and 2 and ran both calls, then
    died: a's outcome is of a turn b already saved, so it gives way (ending the run on it
    would leave both calls out of its final state): a goes on from b's latest saved turn,
    and the run ends with both calls on record, each run once."""
    a_asked, released = asyncio.Event(), asyncio.Event()
    b_died: list[bool] = []

    class AheadAndBehind:
        name = "ahead-and-behind"

        async def respond(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelResponse:
            turn = sum(1 for m in messages if m.role == "assistant")
            if turn == 0 and not a_asked.is_set():  # worker a, asked first, answers last
                a_asked.set()
                await released.wait()
                if a_gets == "a model error":
                    raise ModelError("429 rate limited")
                return reply("nothing to do")
            if turn < 2:
                return ModelResponse(tool_calls=[call("notify", target=f"call {turn + 1}")])
            if not b_died:
                b_died.append(True)
                raise Crash
            return reply("told them")

    shop = Shop()
    shop.model = AheadAndBehind()  # type: ignore[assignment]
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell them twice", "alice")
    entry = await start_entry(env, run_id)
    a = asyncio.create_task(env.worker("a").handle("1-0", entry))
    await a_asked.wait()
    with pytest.raises(Crash):
        await env.worker("b").handle("1-0", entry)  # saved turns 1 and 2, ran both calls
    released.set()
    await a

    info = await env.info(run_id)
    assert (info.status, info.output, info.error) == ("succeeded", "told them", "")
    assert shop.notified == ["call 1", "call 2"], "each call ran once"
    calls = (await env.final_state(run_id)).calls
    assert [(c.arguments, c.outcome) for c in calls] == [
        ({"target": "call 1"}, "executed"),
        ({"target": "call 2"}, "executed"),
    ]


async def test_a_model_error_with_no_later_turn_saved_fails_the_run_saying_so(
    redis: Redis,
) -> None:
    """The same failure with nobody ahead: the run fails with the model's error, and its
    final state keeps the call it ran."""

    class FailsSecond:
        name = "fails-second"

        async def respond(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelResponse:
            if sum(1 for m in messages if m.role == "assistant"):
                raise ModelError("429 rate limited")
            return ModelResponse(tool_calls=[call("notify", target="order 7")])

    shop = Shop()
    shop.model = FailsSecond()  # type: ignore[assignment]
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell them", "alice")
    await env.worker("a").handle("1-0", await start_entry(env, run_id))

    info = await env.info(run_id)
    assert (info.status, info.error) == ("failed", "model error: 429 rate limited")
    [notify] = (await env.final_state(run_id)).calls
    assert (notify.arguments, notify.outcome) == ({"target": "order 7"}, "executed")
    assert shop.notified == ["order 7"]


async def test_a_final_answer_an_older_worker_saved_as_progress_is_not_asked_for_again(
    redis: Redis,
) -> None:
    """Progress left by a worker that saved final answers as a turn (before they were saved
    as the run's outcome) and died before finishing: the next worker finishes the run with
    that answer and asks nothing again."""
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry())
    run_id = await env.store.create_run("shop", "tell order 7", "alice")
    entry = await start_entry(env, run_id)
    older = ProgressStore(redis, env.keyring).journal(run_id, "")  # saves every answer as a turn
    outcome = await env.runner.run("shop", "tell order 7", run_id=run_id, journal=older)
    assert outcome.kind == "succeeded" and await env.status(run_id) == "running"
    assert await redis.hget(K.Keys(run_id).progress, "turn") == b"2"

    await env.worker("takes-over").handle("1-0", entry)

    assert shop.model.requests == Counter({0: 1, 1: 1}), "no turn was asked twice"
    assert (await env.info(run_id)).output == "told them"
    assert shop.notified == ["order 7"]
    assert not await redis.exists(K.Keys(run_id).progress)


async def test_a_turn_saved_under_a_rotated_away_key_still_replays(redis: Redis) -> None:
    """`keys rotate` re-encrypts a turn saved when its worker stopped mid-turn, so the old
    key can be dropped before the turn is replayed."""
    key_a, key_b = generate_key("kA"), generate_key("kB")
    shop = Shop(
        [call("refund", target="order 7")],
        [call("notify", target="order 7")],
        reply("refunded and told them"),
    )
    env_a = make_env(redis, registry=shop.registry(), keyring=KeyRing.parse(key_a))
    run_id = await env_a.start("shop", "refund order 7")
    (request,) = await env_a.requests(run_id)
    assert (await env_a.store.decide(request.request_id, Approve(decided_by="bob"))).resume_queued
    entries: Any = await redis.xrange(K.Keys(run_id).shard.resume)
    entry = {k.decode(): v.decode() for k, v in entries[-1][1].items()}
    shop.model.crash_at_turn = 2  # turn 1 (notify) saved and run; the worker dies after
    with pytest.raises(Crash):
        await env_a.worker("dies").handle("2-0", entry)
    saved = await redis.hget(K.Keys(run_id).progress, "blob")
    assert saved is not None and kid_of(saved) == "kA"

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{key_b},{key_a}"))

    assert (report.progress, report.damaged) == (1, {})
    rotated = await redis.hget(K.Keys(run_id).progress, "blob")
    assert rotated is not None and kid_of(rotated) == "kB"
    env_b = make_env(redis, registry=shop.registry(), keyring=KeyRing.parse(key_b))
    await env_b.worker("takes-over").handle("2-0", entry)  # the old key is gone
    assert await env_b.status(run_id) == "succeeded", (await env_b.info(run_id)).error
    assert shop.refunded == ["order 7"] and shop.notified == ["order 7"]
    assert shop.model.requests[1] == 1, "the saved turn was replayed, not asked again"


async def test_rotation_reports_damaged_saved_progress_and_rotates_the_rest(
    redis: Redis,
) -> None:
    key_a, key_b = generate_key("kA"), generate_key("kB")
    shop = Shop([call("notify", target="order 7")], reply("told them"))
    env = make_env(redis, registry=shop.registry(), keyring=KeyRing.parse(key_a))
    runs = [await env.store.create_run("shop", f"tell order {n}", "alice") for n in (7, 8)]
    for run_id in runs:
        shop.model.crash_at_turn = 1
        with pytest.raises(Crash):
            await env.worker("dies").handle("1-0", await start_entry(env, run_id))
    damaged, healthy = runs
    await redis.hset(K.Keys(damaged).progress, "blob", b"garbage, not a saved turn")

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{key_b},{key_a}"))

    assert report.progress == 1
    assert "its saved progress" in report.damaged[damaged], report.damaged
    assert await redis.hget(K.Keys(damaged).progress, "blob") == b"garbage, not a saved turn"
    rotated = await redis.hget(K.Keys(healthy).progress, "blob")
    assert rotated is not None and kid_of(rotated) == "kB"
