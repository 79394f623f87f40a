"""Randomized in-process trials of the decision compare-and-set and the resume, over a real
Redis: fresh paused runs (each turn gates CALLS_PER_TURN calls, so one request per call),
then concurrent approvals (quorum 1 or 2, duplicate votes, stale hashes), rejections and
sweeps from three "replicas" (separate clients), then the resume entries handled once, twice
in a row or twice at once by two workers.

A trial is one request. Per request: exactly one terminal decision (or none, if still
pending), agreeing with what the compare-and-set told each caller and with the audit. Per
run: one resume iff every request of the turn is decided, none before. Per call: at most
one execution; exactly one iff approved and its turn resumed.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

from agent_host.approvals import TERMINAL, ApprovalRequest, DecideResult, Route
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.redis_ledger import RedisLedger
from agent_host.durable.sealed_records import SealedRecords
from agent_host.durable.store import RunStore
from agent_host.durable.sweeper import Sweeper
from agent_host.durable.worker import ResumeWorker
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.decisions import Approve, Reject
from agent_host.runtime.ledger import InMemoryLedger
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Paused, Runner
from agent_host.runtime.tools import ToolContext, tool
from tests.support.routers import RouterByAgent

__all__ = ["TrialStats", "run_trials"]

CALLS_PER_TURN = 4
USERS = ("U1", "U2", "U3")
REJECTER = "U9"
DUE_SHIFT = 60.0  # the sweeper's clock runs this far ahead, which must not make anything due early
ROUTES = {
    "t-q1": Route(route_id="q1", destination="C1", quorum=1, expiry_seconds=3600),
    "t-q2": Route(route_id="q2", destination="C1", quorum=2, expiry_seconds=3600),
    "t-q1-due": Route(route_id="q1d", destination="C1", quorum=1, expiry_seconds=1),
    "t-q2-due": Route(route_id="q2d", destination="C2", quorum=2, expiry_seconds=1),
}


def registry(executions: Counter[tuple[str, str]]) -> AgentRegistry:
    @tool(permission=Permission.ASK, reason="moves money", severity="high")
    async def pay(target: str, ctx: ToolContext) -> str:
        """Pay a target."""
        executions[(ctx.run_id, ctx.call_id)] += 1
        await asyncio.sleep(0)  # let a concurrent duplicate resume interleave here
        return f"paid {target}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            targets = [f"{c.input}-{n}" for n in range(CALLS_PER_TURN)]
            return ModelResponse(tool_calls=[call("pay", target=t) for t in targets])
        return reply(" | ".join(m.content for m in c.results))

    model = ScriptedModel(script, name="scripted-trials")

    def factory(name: str) -> Callable[[], Agent]:
        return lambda: Agent(name=name, instructions="Pay.", tools=[pay], model=model)

    return AgentRegistry({name: factory(name) for name in ROUTES})


@dataclass
class Trial:
    run_id: str
    agent: str
    request: ApprovalRequest
    results: list[tuple[str, DecideResult]] = field(default_factory=list)

    @property
    def quorum(self) -> int:
        return ROUTES[self.agent].quorum


@dataclass
class RunTrials:
    run_id: str
    agent: str
    trials: list[Trial]


@dataclass
class TrialStats:
    trials: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    resume_modes: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)  # resume entries per run id
    executions: int = 0
    unknown_outcome_saved: int = 0  # a concurrent duplicate resume won the save


class Replica:
    """One "process": its own client, store, runner (Redis ledger) and resume worker."""

    def __init__(
        self, url: str, keyring: KeyRing, name: str, reg: AgentRegistry, shift: float = 0.0
    ) -> None:
        # a bounded pool: thousands of concurrent calls share a few dozen connections
        pool = BlockingConnectionPool.from_url(url, max_connections=32, timeout=30)
        self.redis = Redis(connection_pool=pool)
        self.store = RunStore(
            self.redis, keyring, RouterByAgent(ROUTES), clock=lambda: time.time() + shift
        )
        self.worker = ResumeWorker(self.store, Runner(reg, RedisLedger(self.redis, keyring)), name)

    async def close(self) -> None:
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()


async def run_trials(
    url: str,
    trials: int = 10_000,
    *,
    batch: int = 500,
    seed: int = 20_240_601,
    stop: threading.Event | None = None,
) -> TrialStats:
    rng = random.Random(seed)
    executions: Counter[tuple[str, str]] = Counter()
    reg = registry(executions)
    keyring = KeyRing.parse(generate_key("trials"))
    a, b = Replica(url, keyring, "A", reg), Replica(url, keyring, "B", reg)
    sweeper_replica = Replica(url, keyring, "S", reg, shift=DUE_SHIFT)
    sweeper = Sweeper(sweeper_replica.store, batch=100)
    pauser = Runner(reg, InMemoryLedger())  # turn 0 only proposes the gated call
    stats = TrialStats()
    last_resume = {shard.resume: "0-0" for shard in K.shards()}
    try:
        for start in range(0, trials, batch):
            if stop is not None and stop.is_set():
                raise RuntimeError(f"stopped early after {start} trials (session ending)")
            runs = -(-min(batch, trials - start) // CALLS_PER_TURN)
            batch_runs = await _pause(rng, a.store, pauser, runs)
            batch_trials = [t for run in batch_runs for t in run.trials]
            await _decide_all(rng, batch_trials, a, b, sweeper)
            last_resume = await _resume_all(rng, a, b, last_resume, stats)
            await _check(batch_runs, a.redis, a.store.sealed, executions, stats)
    finally:
        for replica in (a, b, sweeper_replica):
            await replica.close()
    return stats


async def _pause(rng: random.Random, store: RunStore, pauser: Runner, size: int) -> list[RunTrials]:
    agents = [rng.choice(tuple(ROUTES)) for _ in range(size)]
    run_ids = await asyncio.gather(*(store.create_run(a, "trial", "U0") for a in agents))
    outcomes = await asyncio.gather(
        *(
            pauser.run(agent, f"t-{rid}", run_id=rid, requested_by="U0")
            for agent, rid in zip(agents, run_ids, strict=True)
        )
    )
    for outcome in outcomes:
        assert isinstance(outcome, Paused), outcome
    saved = await asyncio.gather(*(store.save_outcome(o, "", "trials") for o in outcomes))
    assert all(saved)
    requests = await asyncio.gather(*(store.run_requests(rid) for rid in run_ids))
    runs = []
    for agent, rid, reqs in zip(agents, run_ids, requests, strict=True):
        assert len(reqs) == CALLS_PER_TURN and all(r.status == "pending" for r in reqs)
        runs.append(RunTrials(rid, agent, [Trial(rid, agent, r) for r in reqs]))
    return runs


async def _decide_all(
    rng: random.Random, trials: list[Trial], a: Replica, b: Replica, sweeper: Sweeper
) -> None:
    calls: list[Awaitable[Any]] = []

    def decide(trial: Trial, label: str, decision: Any) -> Awaitable[None]:
        store = rng.choice((a, b)).store

        async def go() -> None:
            trial.results.append((label, await store.decide(trial.request.request_id, decision)))

        return go()

    for trial in trials:
        h = trial.request.call_hash
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
            user = rng.choice(USERS)  # duplicates happen: the same user twice
            calls.append(decide(trial, f"approve:{user}", Approve(decided_by=user, call_hash=h)))
        if rng.random() < 0.3:
            calls.append(decide(trial, "reject", Reject(decided_by=REJECTER, call_hash=h)))
        if rng.random() < 0.1:
            stale = Approve(decided_by=rng.choice(USERS), call_hash="0" * 64)
            calls.append(decide(trial, "stale", stale))
    calls += [sweeper.sweep() for _ in range(3)]  # three sweepers race the clicks and each other
    rng.shuffle(calls)
    await asyncio.gather(*calls)
    # Whatever is due and still pending expires now. "Due" is by Redis's clock: a batch that
    # ran in under a second would leave 1 s requests pending, to expire (and be resumed) in
    # the next batch, after their runs were checked.
    due = [t.request.expires_at for t in trials if ROUTES[t.agent].expiry_seconds == 1]
    await _redis_clock_passes(sweeper.store.redis, max(due, default=0.0))
    while await sweeper.sweep():
        pass


async def _redis_clock_passes(redis: Redis, at: float) -> None:
    """Wait until Redis's clock is past `at` (seconds)."""
    while True:
        seconds, micros = await redis.time()
        left = at - (seconds + micros / 1e6)
        if left < 0:
            return
        await asyncio.sleep(left + 0.01)


async def _resume_all(
    rng: random.Random,
    a: Replica,
    b: Replica,
    last: dict[str, str],
    stats: TrialStats,
) -> dict[str, str]:
    """Every new entry of every shard's resume stream, handled once, twice in a row or twice
    at once by the two replicas' workers (redelivery, reclaim races)."""
    entries: list[Any] = []
    async with a.redis.pipeline(transaction=False) as pipe:
        for stream, seen in last.items():
            pipe.xrange(stream, min=f"({seen}" if seen != "0-0" else "-")
        for stream, rows in zip(list(last), await pipe.execute(), strict=True):
            entries += rows
            if rows:
                last = {**last, stream: as_text(rows[-1][0])}
    jobs: list[Awaitable[None]] = []

    async def twice_in_a_row(entry_id: str, fields: dict[str, str]) -> None:
        await a.worker.handle(entry_id, fields)
        await b.worker.handle(entry_id, fields)

    for raw_id, raw in entries:
        entry_id = as_text(raw_id)
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        if fields.get("type") != "resume":
            continue  # the runs' start entries: these runs were paused by `_pause` already
        stats.resumes[fields["run_id"]] += 1
        mode = rng.choice(("once", "in_a_row", "at_once"))
        stats.resume_modes[mode] += 1
        if mode == "once":
            jobs.append(rng.choice((a, b)).worker.handle(entry_id, fields))
        elif mode == "in_a_row":
            jobs.append(twice_in_a_row(entry_id, fields))
        else:
            jobs += [a.worker.handle(entry_id, fields), b.worker.handle(entry_id, fields)]
    rng.shuffle(jobs)
    await asyncio.gather(*jobs)
    return last


async def _check(
    runs: list[RunTrials],
    redis: Redis,
    records: SealedRecords,
    executions: Counter[tuple[str, str]],
    stats: TrialStats,
) -> None:
    """Read back raw, as stored (sealed fields opened as the store opens them)."""
    async with redis.pipeline(transaction=False) as pipe:
        for run in runs:
            k = K.Keys(run.run_id)
            pipe.xrange(k.audit)
            pipe.hgetall(k.run)
            for t in run.trials:
                pipe.hgetall(k.request(t.request.request_id))
        rows = iter(await pipe.execute())
    for run in runs:
        events = [{as_text(k): as_text(v) for k, v in f.items()} for _, f in next(rows)]
        info, _, _ = records.open_run({as_text(k): as_text(v) for k, v in next(rows).items()})
        resumes = stats.resumes.pop(run.run_id, 0)
        statuses = []
        for trial in run.trials:
            raw = next(rows)
            opened, _, _ = records.open_request({as_text(k): as_text(v) for k, v in raw.items()})
            request = ApprovalRequest.from_hash(opened)
            statuses.append(request.status)
            _check_request(trial, request, events, stats)
        where = f"run {run.run_id} ({run.agent}): {statuses}, {info.get('status')}"
        ran = [executions[(run.run_id, t.request.call_id)] for t in run.trials]
        if "pending" in statuses:
            # nothing of a turn runs before all its gated calls are decided
            assert resumes == 0 and info["status"] == "waiting" and not any(ran), (where, ran)
            continue
        assert resumes == 1, (where, resumes)  # one resume per fully decided turn
        assert info["status"] == "succeeded", (where, info)
        assert ran == [1 if s == "approved" else 0 for s in statuses], (where, ran)
        stats.executions += sum(ran)
        paid = info.get("output", "").count("paid ")
        if paid != statuses.count("approved"):
            stats.unknown_outcome_saved += 1  # a concurrent duplicate resume won the save


def _check_request(
    trial: Trial, request: ApprovalRequest, events: list[dict[str, str]], stats: TrialStats
) -> None:
    rid = request.request_id
    terminal = [e for e in events if e.get("request_id") == rid and e.get("event") in TERMINAL]
    won = [label for label, r in trial.results if r.outcome == "decided"]
    for _, result in trial.results:
        stats.outcomes[result.outcome] += 1
    stats.statuses[request.status] += 1
    stats.trials += 1
    where = f"request {rid} ({trial.agent}): {trial.results} -> {request.status}"
    if request.status == "pending":
        assert not terminal and not won, where
        return
    # exactly one terminal decision: the one the compare-and-set reported
    assert len(terminal) == 1 and terminal[0]["event"] == request.status, (where, terminal)
    if request.status == "expired":
        assert won == [] and request.decided_by == "countersign (expired)", where
        assert trial.agent.endswith("-due"), where
        return
    assert len(won) == 1, where
    kind = {"approved": "approve", "rejected": "reject"}[request.status]
    assert won[0].split(":")[0] == kind, where
    if request.status == "approved":
        assert len(set(request.approvals)) == len(request.approvals) >= trial.quorum, where
        assert request.decided_by == request.approvals[-1], where
