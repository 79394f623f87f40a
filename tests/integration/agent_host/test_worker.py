"""Resume workers: at most once per call across concurrent workers, crashed workers,
redelivered entries and failed handlers; tampered checkpoints fail closed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.poison import POISON_AFTER, SUSPECT_AFTER
from agent_host.durable.worker import ResumeWorker
from agent_host.examples import ExampleEffects
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.decisions import Approve
from agent_host.runtime.messages import Message, ModelResponse, ToolSpec
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import UNKNOWN_OUTCOME
from agent_host.runtime.tools import ToolContext, tool
from tests.support.agents import Recorder, counting_tool, registry_of, tc
from tests.support.edit_agents import PAYOUT_AGENT, SANCTIONED, with_payouts
from tests.support.host_env import (
    Env,
    killed_while_polling,
    make_env,
    pending_entries,
    polled_until,
    resume_entries,
)
from tests.support.waiting import eventually


async def approved_refund(env: Env, order: str = "123") -> str:
    run_id = await env.start("refund-agent", f"refund order {order}")
    (request,) = await env.requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).resume_queued
    return run_id


async def test_two_workers_polling_concurrently_run_each_tool_once(redis: Redis) -> None:
    env = make_env(redis)
    runs = [
        await env.start("refund-agent", f"refund order {n}") for n in ("123", "124", "200", "123")
    ]
    for run_id in runs:
        (request,) = await env.requests(run_id)
        await env.store.decide(request.request_id, Approve(decided_by="bob"))
    w1, w2 = env.worker("w1"), env.worker("w2")
    await asyncio.gather(w1.consumer.ensure_groups(), w2.consumer.ensure_groups())
    handled = await asyncio.gather(*(w.consumer.poll(block_ms=5) for w in (w1, w2, w1, w2)))
    assert sum(handled) == len(runs)
    assert await pending_entries(redis) == 0
    for run_id in runs:
        assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == len(runs)
    keys = [e["key"] for e in env.effects.all_events()]
    assert len(set(keys)) == len(runs)  # one idempotency key per call


async def test_same_entry_handled_by_two_workers_at_once_runs_the_tool_once(redis: Redis) -> None:
    env = make_env(redis)
    for _ in range(5):
        run_id = await approved_refund(env)
        (entry,) = await resume_entries(redis, run_id)
        w1, w2 = env.worker("a"), env.worker("b")
        await asyncio.gather(w1.handle("1-0", entry), w2.handle("1-0", entry))
        assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 5


async def test_worker_died_after_the_tool_ran_reclaimed_run_succeeds_tool_ran_once(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)

    # the "dead" worker: takes the entry, resumes (the refund runs, the ledger marks it done),
    # then dies before saving the outcome or acknowledging the entry
    stream = K.Keys(run_id).shard.resume
    reply_: Any = await redis.xreadgroup(K.RESUME_GROUP, "dead", {stream: ">"}, count=10)
    ((_, entries),) = reply_
    assert len(entries) == 1
    info = await env.info(run_id)
    state = await env.store.load_checkpoint(run_id, info.pause_id)
    decisions = await env.store.decisions_for(run_id, info.pause_id)
    outcome = await env.runner.resume(state, decisions)
    assert outcome.kind == "succeeded"
    assert env.effects.count("refund") == 1
    assert await env.status(run_id) == "resuming"
    assert await pending_entries(redis) == 1

    survivor = env.worker("survivor", idle_ms=50)
    await asyncio.sleep(0.08)
    assert await survivor.consumer.poll(block_ms=1) == 1

    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 1
    output = (await env.info(run_id)).output
    assert output.startswith("Done. Refund issued: $42.50 to order 123")
    calls = (await env.final_state(run_id)).calls
    assert [c.outcome for c in calls] == ["executed", "executed"]
    assert await pending_entries(redis) == 0


async def test_call_started_but_unfinished_is_reported_not_rerun(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    (request,) = await env.requests(run_id)
    await redis.hset(K.Keys(run_id).ledger, request.call_id, "started")

    await env.drain()

    assert env.effects.count("refund") == 0
    state = await env.final_state(run_id)
    refund = state.call(request.call_id)
    assert refund is not None
    assert refund.outcome == "unknown_outcome" and refund.result == UNKNOWN_OUTCOME
    assert "unknown" in (await env.info(run_id)).output
    assert await redis.hget(K.Keys(run_id).ledger, request.call_id) == b"started"


async def test_tampered_checkpoint_fails_the_run_and_never_runs_the_tool(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    key = K.Keys(run_id).checkpoint
    blob = bytearray(await redis.get(key) or b"")
    blob[-20] ^= 0x01
    await redis.set(key, bytes(blob))

    await env.drain()

    info = await env.info(run_id)
    assert info.status == "failed"
    assert "decrypt" in info.error and "verif" in info.error
    assert env.effects.count("refund") == 0
    assert await pending_entries(redis) == 0
    (request,) = await env.requests(run_id)
    assert not await redis.hexists(K.Keys(run_id).ledger, request.call_id)


async def test_a_missing_or_overwritten_checkpoint_fails_the_run_instead_of_retrying(
    redis: Redis,
) -> None:
    """No retry can mend a checkpoint that is gone or that another kind of value replaced:
    the run is failed with the reason, its entry acknowledged, and nothing runs."""
    env = make_env(redis)
    gone = await env.start("refund-agent", "refund order 123")
    overwritten = await env.start("refund-agent", "refund order 124")
    for run_id in (gone, overwritten):  # both approved, neither resumed yet
        (request,) = await env.requests(run_id)
        assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).outcome
    await redis.delete(K.Keys(gone).checkpoint)
    key = K.Keys(overwritten).checkpoint
    await redis.delete(key)
    await redis.rpush(key, "not a checkpoint")

    await env.drain()

    assert "has no checkpoint" in (await env.info(gone)).error
    assert "another kind of value" in (await env.info(overwritten)).error
    for run_id in (gone, overwritten):
        assert (await env.info(run_id)).status == "failed"
    assert env.effects.count("refund") == 0


async def test_checkpoint_copied_from_another_run_fails_closed(redis: Redis) -> None:
    env = make_env(redis)
    donor = await env.start("refund-agent", "refund order 123")
    victim = await approved_refund(env, "124")
    await redis.set(K.Keys(victim).checkpoint, await redis.get(K.Keys(donor).checkpoint) or b"")

    await env.drain()

    info = await env.info(victim)
    assert info.status == "failed" and "decrypt" in info.error
    assert env.effects.count("refund") == 0


async def test_a_run_that_failed_closed_cannot_be_resumed_from_its_final_state(
    redis: Redis,
) -> None:
    """A run fails closed on a decision its resume refuses (here an edit the policy denies,
    written into Redis by someone with access to it, not the keys). Its final state keeps
    that decision in its call for the record; someone setting the run's status back and
    queueing a resume naming its final pause must not get the call run: the final state
    is sealed as failed, and no resume entry naming a final pause is taken."""
    effects = ExampleEffects()
    env = make_env(redis, registry=with_payouts(effects))
    run_id = await env.start(PAYOUT_AGENT, "pay 250")
    [request] = await env.pending_requests(run_id)
    paused = await env.store.load_checkpoint(run_id, request.pause_id)
    [record] = paused.pending
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).accepted
    edited = {**record.arguments, "vendor": SANCTIONED}
    forged = Approve(  # read as a decision written before decisions were sealed
        decided_by="bob",
        call_hash=record.call_hash,
        edited_arguments=edited,
        original_arguments=record.arguments,
        edited_hash=call_hash(paused.agent_fingerprint, record.tool, edited),
        edited_by="bob",
    )
    k = K.Keys(run_id)
    await redis.hset(k.request(request.request_id), "decision", forged.model_dump_json())
    await env.drain()
    failed = await env.info(run_id)
    assert failed.status == "failed" and "denied by the policy" in failed.error, failed.error
    final = await env.store.load_checkpoint(run_id, failed.pause_id)
    assert final.status == "failed" and final.error == failed.error

    await redis.hset(k.run, "status", "resuming")
    revived = {"type": "resume", "run_id": run_id, "pause_id": failed.pause_id, "requests": "[]"}
    await redis.xadd(k.shard.resume, revived)
    await env.drain()
    assert effects.count("payout") == 0
    after = await env.info(run_id)  # the entry was skipped: nothing more was done
    assert (after.pause_id, after.error) == (failed.pause_id, failed.error)


async def test_redelivered_resume_entry_after_success_changes_nothing(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    (entry,) = await resume_entries(redis, run_id)
    await env.drain()
    assert env.effects.count("refund") == 1
    before = await env.info(run_id)

    await redis.xadd(K.Keys(run_id).shard.resume, entry)  # a duplicate of the same resume
    assert await env.drain() == 1
    await env.worker("other").handle("9-9", entry)
    assert env.effects.count("refund") == 1
    assert await env.info(run_id) == before


async def test_failed_handler_leaves_the_entry_pending_and_it_is_retried(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    worker = env.worker("flaky", idle_ms=30)
    real_reads = env.store.resume_reads_from  # the resume's checkpoint and requests, as read
    calls = 0

    def flaky_reads(rows: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("redis went away")
        return real_reads(rows)

    env.store.resume_reads_from = flaky_reads  # type: ignore[method-assign]
    assert await worker.consumer.poll(block_ms=1) == 0
    assert await pending_entries(redis) == 1
    assert await env.status(run_id) == "resuming"

    async def done() -> bool:
        await worker.consumer.poll(block_ms=1)
        return await env.status(run_id) == "succeeded"

    await eventually(done, within=5)
    assert calls == 2 and env.effects.count("refund") == 1
    assert await pending_entries(redis) == 0


async def test_a_resume_failing_with_our_own_error_fails_the_run_saying_why(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    worker = env.worker("poisoned", idle_ms=30)
    attempts = 0

    def broken_reads(rows: Any) -> Any:
        nonlocal attempts
        attempts += 1
        raise ValueError("a bug reading the pause")

    env.store.resume_reads_from = broken_reads  # type: ignore[method-assign]

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(worker, ended)

    assert attempts == POISON_AFTER
    info = await env.store.run_info(run_id)
    assert info is not None and info.status == "failed"
    assert f"failed {POISON_AFTER} times" in info.error and "(ValueError)" in info.error
    assert "a bug reading the pause" not in info.error  # its text stays in the log only
    assert env.effects.count("refund") == 0  # nothing of it ran
    assert await pending_entries(redis) == 0  # acknowledged: not retried again
    finished = [
        fields
        for shard in K.shards()
        for _, fields in await redis.xrange(shard.outbox)
        if fields[b"type"] == b"run_finished"
    ]
    assert [f[b"run_id"].decode() for f in finished] == [run_id]  # the thread hears of it


async def dies_handling(worker: ResumeWorker) -> None:
    """`worker` takes the run's resume entry and its process is killed meanwhile: the entry
    stays pending under its name and no error is ever caught."""
    taken = asyncio.Event()

    async def killed(entry_id: str, fields: dict[str, str]) -> None:
        taken.set()
        await asyncio.Event().wait()  # never returns: the process is gone

    for consumer in worker.consumer.consumers:
        consumer.handler = killed
    await killed_while_polling(worker.consumer, taken)


async def test_a_resume_that_kills_every_worker_taking_it_is_given_up_not_taken_again(
    redis: Redis,
) -> None:
    """Nothing is caught when a process dies (out of memory, a crash in native code): each
    worker reclaiming the entry would die in turn, for ever. Redis tells it apart (its
    delivery count); handled alone, it dies POISON_AFTER times more, and the next worker
    fails the run without handling the entry again."""
    env = make_env(redis)
    run_id = await approved_refund(env)
    # SUSPECT_AFTER deliveries before it is a suspect, then POISON_AFTER attempts alone
    for attempt in range(SUSPECT_AFTER + POISON_AFTER):
        await dies_handling(env.worker(f"killed-{attempt}", idle_ms=30))
        await asyncio.sleep(0.05)  # idle past idle_ms: the next worker reclaims it
    assert await env.status(run_id) == "resuming" and await pending_entries(redis) == 1

    survivor = env.worker("survivor", idle_ms=30)
    handled: list[str] = []
    real_handler = survivor.handle_entry

    async def watched(entry_id: str, fields: dict[str, str]) -> Any:
        handled.append(entry_id)
        return await real_handler(entry_id, fields)

    for consumer in survivor.consumer.consumers:
        consumer.handler = watched

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(survivor, ended)

    assert handled == []  # given up without being handled again
    info = await env.info(run_id)
    assert info.status == "failed", info
    assert f"stopped the worker handling it {POISON_AFTER} times" in info.error
    assert env.effects.count("refund") == 0
    assert await pending_entries(redis) == 0  # acknowledged: nobody takes it again


async def stopped_on_purpose(worker: ResumeWorker) -> None:
    """`worker` takes the run's resume entry and its process is stopped (a deploy) while
    the entry is handled: its grace period over, the entry is cut short, left pending."""
    taken = asyncio.Event()

    async def slow(entry_id: str, fields: dict[str, str]) -> None:
        taken.set()
        await asyncio.Event().wait()

    for consumer in worker.consumer.consumers:
        consumer.handler = slow
    await worker.consumer.ensure_groups()
    stop = asyncio.Event()
    running = asyncio.create_task(worker.consumer.run(stop))
    try:
        await asyncio.wait_for(taken.wait(), 5)
    except TimeoutError:
        raise AssertionError("the entry was not taken again (given up?)") from None
    stop.set()  # no new entry is begun; then, the grace period over, this one is cut short
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


async def test_a_resume_cut_short_by_deploys_is_not_taken_for_one_that_kills_workers(
    redis: Redis,
) -> None:
    """A process stopped on purpose lets its entries go as it stops: those deliveries are
    not counted as deaths, however many deploys an entry sits through."""
    env = make_env(redis)
    run_id = await approved_refund(env)
    for attempt in range(POISON_AFTER + 1):
        await stopped_on_purpose(env.worker(f"deployed-{attempt}", idle_ms=30))
        await asyncio.sleep(0.05)
    survivor = env.worker("survivor", idle_ms=30)

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(survivor, ended)

    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 1


class FailsOnceTheToolRan:
    """Asks for the refund; once its result is in the transcript, raises an error that is
    not a ModelError (a provider's malformed reply), so the resume fails every time."""

    name = "breaks-after-the-refund"

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        if any(message.role == "tool" for message in messages):
            raise KeyError("choices")
        return ModelResponse(text="", tool_calls=[tc("m1", "refund", target="order 1")])


async def test_a_run_given_up_after_its_approved_call_ran_records_that_it_ran(
    redis: Redis,
) -> None:
    """The requester reads in the run's final state what ran before it stopped, so that
    starting it again (a new run, whose calls run anew) is a decision made knowingly."""
    recorder = Recorder()
    refund = counting_tool(recorder, "refund", Permission.ASK, reason="moves money")
    agent = registry_of("refunder", [refund], FailsOnceTheToolRan())
    env = make_env(redis, registry=agent)
    run_id = await env.start("refunder", "refund order 1")
    (request,) = await env.pending_requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).resume_queued
    worker = env.worker("given-up", idle_ms=30)

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(worker, ended)

    info = await env.info(run_id)
    assert info.status == "failed" and "(KeyError)" in info.error
    assert f"GET /api/v1/runs/{run_id}" in info.error and "check them" in info.error
    assert recorder.count("refund") == 1  # retried five times, run once
    record = (await env.final_state(run_id)).call(request.call_id)
    assert record is not None and record.outcome == "executed"
    assert record.result is not None and "order 1" in record.result
    # and who approved it (with their edit, had they made one): the checkpoint had neither
    assert record.decision is not None and record.decision.decided_by == "bob"


async def test_redis_away_is_waited_out_however_many_resumes_it_fails(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await approved_refund(env)
    worker = env.worker("patient", idle_ms=30)
    real_reads = env.store.resume_reads_from
    attempts = 0

    def unavailable_for_a_while(rows: Any) -> Any:
        nonlocal attempts
        attempts += 1
        if attempts <= 2 * POISON_AFTER:
            raise ConnectionError("redis went away")
        return real_reads(rows)

    env.store.resume_reads_from = unavailable_for_a_while  # type: ignore[method-assign]

    async def ended() -> bool:
        return await env.status(run_id) != "resuming"

    await polled_until(worker, ended)

    assert await env.status(run_id) == "succeeded"
    assert attempts == 2 * POISON_AFTER + 1 and env.effects.count("refund") == 1


def slow_registry(entered: asyncio.Event, release: asyncio.Event, runs: list[str]) -> AgentRegistry:
    @tool(permission=Permission.ASK, reason="slow payment")
    async def slow_pay(order_id: str, ctx: ToolContext) -> str:
        """Pay, slowly."""
        runs.append(ctx.call_id)
        if len(runs) == 1:  # only the first execution is slow (a second one would be a bug)
            entered.set()
            await release.wait()
        return f"paid {order_id}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("slow_pay", order_id="7")])
        return reply(f"result: {c.result('slow_pay')}")

    def build() -> Agent:
        return Agent(
            name="slow-agent",
            instructions="Pay slowly.",
            tools=[slow_pay],
            model=ScriptedModel(script, name="slow"),
        )

    return AgentRegistry({"slow-agent": build})


async def test_slow_tool_outliving_idle_ms_is_not_run_twice(redis: Redis) -> None:
    entered, release, runs = asyncio.Event(), asyncio.Event(), []
    env = make_env(redis, registry=slow_registry(entered, release, runs))
    run_id = await env.start("slow-agent", "pay")
    (request,) = await env.requests(run_id)
    await env.store.decide(request.request_id, Approve(decided_by="bob"))

    slow, other = env.worker("slow", idle_ms=50), env.worker("other", idle_ms=50)
    first = asyncio.create_task(slow.consumer.poll(block_ms=5))
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.sleep(0.08)  # longer than idle_ms: the entry looks abandoned
    await other.consumer.poll(block_ms=1)
    release.set()
    await first
    await env.drain(other)

    assert len(runs) == 1  # invariant 1 holds either way
    assert await env.status(run_id) == "succeeded"


async def test_slow_tool_reclaimed_while_running_is_reported_truthfully(redis: Redis) -> None:
    entered, release, runs = asyncio.Event(), asyncio.Event(), []
    env = make_env(redis, registry=slow_registry(entered, release, runs))
    run_id = await env.start("slow-agent", "pay")
    (request,) = await env.requests(run_id)
    await env.store.decide(request.request_id, Approve(decided_by="bob"))

    slow, other = env.worker("slow", idle_ms=50), env.worker("other", idle_ms=50)
    first = asyncio.create_task(slow.consumer.poll(block_ms=5))
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.sleep(0.08)
    await other.consumer.poll(block_ms=1)  # the slow worker is alive, only slow
    release.set()
    await first
    await env.drain(other)

    assert len(runs) == 1
    state = await env.final_state(run_id)
    call_record = state.call(request.call_id)
    assert call_record is not None
    assert call_record.outcome == "executed", call_record.result
    assert (await env.info(run_id)).output == "result: paid 7"


async def test_a_worker_takes_only_the_run_it_resumes_and_leaves_the_next_to_others(
    redis: Redis,
) -> None:
    """Two decided runs wait in one shard's resume stream; one worker's tool is slow. The
    other worker resumes the second run meanwhile: the slow one never took it."""
    entered, release, runs = asyncio.Event(), asyncio.Event(), []
    env = make_env(redis, registry=slow_registry(entered, release, runs))
    by_shard: dict[str, list[str]] = {}
    while not any(len(ids) == 2 for ids in by_shard.values()):  # two runs of one shard
        run_id = await env.start("slow-agent", "pay")
        by_shard.setdefault(K.Keys(run_id).shard.resume, []).append(run_id)
    first_run, second_run = next(ids for ids in by_shard.values() if len(ids) == 2)
    for run_id in (first_run, second_run):
        (request,) = await env.requests(run_id)
        await env.store.decide(request.request_id, Approve(decided_by="bob"))

    slow, other = env.worker("slow"), env.worker("other")
    slow_poll = asyncio.create_task(slow.consumer.poll(block_ms=1))
    await asyncio.wait_for(entered.wait(), 5)  # the first run's tool is running, slowly

    async def second_resumed() -> bool:
        await other.consumer.poll(block_ms=1)
        return await env.status(second_run) == "succeeded"

    await eventually(second_resumed, within=5, what="the second run resumed by the other")
    assert await env.status(first_run) == "resuming"
    release.set()
    await slow_poll
    assert await env.status(first_run) == "succeeded"
    assert len(runs) == 2  # each run's call once


def count_fresh_reads(env: Env) -> list[str]:
    """The runs whose resume read its requests afresh (`RunStore.resume_reads`)."""
    runs: list[str] = []
    real = env.store.resume_reads

    async def counted(info: Any) -> Any:
        runs.append(info.run_id)
        return await real(info)

    env.store.resume_reads = counted  # type: ignore[method-assign]
    return runs


async def _latency_count(redis: Redis, run_id: str) -> int:
    metrics = await redis.hget(K.Keys(run_id).shard.metrics, "resume_latency_seconds_count")
    return int(metrics or 0)


async def test_a_resume_entry_names_its_pause_requests_and_the_worker_reads_them_with_the_run(
    redis: Redis,
) -> None:
    """DECIDE writes the pause's request ids into the resume entry, so the worker's first
    read takes the checkpoint and the requests too; the latency is counted once."""
    env = make_env(redis)
    run_id = await approved_refund(env)
    (entry,) = await resume_entries(redis, run_id)
    (request,) = await env.requests(run_id)
    assert json.loads(entry["requests"]) == [request.request_id]
    fresh_reads = count_fresh_reads(env)
    assert await env.drain() == 1
    assert await env.status(run_id) == "succeeded" and env.effects.count("refund") == 1
    assert fresh_reads == []
    assert await _latency_count(redis, run_id) == 1


@pytest.mark.parametrize(
    "named",
    [None, "not json", '["req_0000000000000000000f_0009"]', "[]", "[1]"],
    ids=["older-entry", "garbled", "other-ids", "none", "not-ids"],
)
async def test_an_entry_naming_no_or_other_requests_reads_the_pause_requests_afresh(
    redis: Redis, named: str | None
) -> None:
    """The ids an entry names are used only when they are exactly the run's pause requests:
    an entry written before they were named, or naming others, resumes on a fresh read of
    the run's own requests, with the approval they record."""
    env = make_env(redis)
    run_id = await approved_refund(env)
    (entry,) = await resume_entries(redis, run_id)
    altered = {k: v for k, v in entry.items() if k != "requests"}
    if named is not None:
        altered["requests"] = named
    fresh_reads = count_fresh_reads(env)
    await env.worker().handle("1-0", altered)
    assert len(fresh_reads) == 1
    assert await env.status(run_id) == "succeeded" and env.effects.count("refund") == 1
    assert await _latency_count(redis, run_id) == 1


async def test_a_result_that_is_not_text_is_recorded_escaped_and_the_tool_runs_once(
    redis: Redis,
) -> None:
    """A tool's result holding a lone surrogate (no character at all) could not be sealed
    into the ledger: the call stayed started, the run retried and was given up, and the
    result was lost. It is recorded with the surrogate escaped; the run goes on."""
    ran: list[str] = []

    @tool(permission=Permission.ASK)
    def read_file(path: str) -> str:
        ran.append(path)
        return "bytes \udc80 of " + path

    model = ScriptedModel.from_turns([tc("m1", "read_file", path="/x")], reply("done"))
    env = make_env(redis, registry=registry_of("reader", [read_file], model))
    run_id = await env.start("reader", "read /x")
    (request,) = await env.pending_requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).resume_queued
    await env.drain()

    assert await env.status(run_id) == "succeeded"
    assert ran == ["/x"]
    record = (await env.final_state(run_id)).call(request.call_id)
    assert record is not None and record.outcome == "executed"
    assert record.result == "bytes \\udc80 of /x"
