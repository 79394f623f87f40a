"""Replicas: two `countersign serve` and two `countersign worker` processes share one Redis;
the Slack stand-in sends each interaction to replica A or B, alternately. Racing clicks on
one request across replicas, approve against reject, and approve against the sweepers at
the request's deadline: each gives exactly one terminal decision, and the tool runs once
iff approved. Plus 10,000 randomized in-process trials of the compare-and-set and the
resume (tests/system/faults/trials.py), which run alongside in another thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent_host.durable.redis_server import RedisServer
from bot import blocks

from .harness import (
    ADMIN,
    APPROVALS,
    EARLY_STOP,
    OPS,
    REVIEWER,
    REVIEWER2,
    SPAWN_LOCK,
    Proc,
    World,
    run_concurrently,
    start_early,
    until,
    world,
)
from .trials import TrialStats, run_trials

TRIALS = 10_000
TRIALS_TEST = "test_randomized_trials_one_decision_per_request_one_execution_per_call"


def journal_for(w: World, kind: str, run_id: str) -> list[dict[str, Any]]:
    return [e for e in w.effects(kind) if e["key"].startswith(f"{run_id}:")]


async def one_outcome(w: World, request: Any, procs: list[Proc]) -> Any:
    """The run finished, its request decided exactly once; returns the final request."""
    info = await w.run_reaches(request.run_id, "succeeded", "failed", within=25.0, watch=procs)
    assert info.status == "succeeded", info
    final = await w.request(request.request_id)
    events = await w.terminal_events(request.request_id)
    assert len(events) == 1 and events[0]["event"] == final.status, events
    return final


def new_ephemerals(w: World, user: str, seen: int) -> Callable[[], Awaitable[list[str] | None]]:
    """A check for `until`: the ephemerals `user` got after the first `seen`."""

    async def check() -> list[str] | None:
        return w.ephemerals(user)[seen:] or None

    return check


def view_number(w: World, n: int) -> Callable[[], Awaitable[Any]]:
    """A check for `until`: the stand-in's `n`-th opened view (0-based), once it exists."""

    async def check() -> Any:
        views = w.standin.workspace.views
        return views[n] if len(views) > n else None

    return check


async def racing_approvals(w: World, a: Proc, b: Proc, procs: list[Proc]) -> dict[str, int]:
    """Two reviewers approve the same request at once, through different replicas."""
    runs = [await w.start_run(via) for via in (a, b, a, b)]
    requests = [await w.only_request(r, posted=True, within=25.0, watch=procs) for r in runs]
    winners: Counter[str] = Counter()
    for n, request in enumerate(requests):
        first, second = (a, b) if n % 2 == 0 else (b, a)
        ch, ts = request.message_channel, request.message_ts
        already = {u: len(w.ephemerals(u)) for u in (REVIEWER, REVIEWER2)}
        sends = [
            (first, partial(w.standin.click, REVIEWER, ch, ts, blocks.APPROVE)),
            (second, partial(w.standin.click, REVIEWER2, ch, ts, blocks.APPROVE)),
        ]
        replies = await w.at_once(*(sends if n < 2 else sends[::-1]))  # either sent first
        assert all(getattr(r, "status", None) == 200 for r in replies), replies
        final = await one_outcome(w, request, procs)
        assert final.status == "approved" and final.decided_by in (REVIEWER, REVIEWER2)
        assert final.approvals == [final.decided_by]
        assert len(journal_for(w, "refund", request.run_id)) == 1
        loser = REVIEWER2 if final.decided_by == REVIEWER else REVIEWER

        told = await until(
            f"{loser} told who decided", new_ephemerals(w, loser, already[loser]), within=10.0
        )
        assert len(told) == 1 and "already *approved*" in told[0], told
        assert f"<@{final.decided_by}>" in told[0], told
        winner = final.decided_by
        assert len(w.ephemerals(winner)) == already[winner], "the winner gets no ephemeral"
        winners[winner] += 1
    assert len(w.top_level_posts(APPROVALS)) == len(runs)
    return dict(winners)


async def approve_vs_reject(w: World, a: Proc, b: Proc, procs: list[Proc]) -> dict[str, int]:
    """One reviewer approves while another submits the reject modal, on different replicas."""
    runs = [await w.start_run(via) for via in (b, a, b)]
    requests = [await w.only_request(r, posted=True, within=25.0, watch=procs) for r in runs]
    outcomes: Counter[str] = Counter()
    for n, request in enumerate(requests):
        approver, rejecter = (a, b) if n % 2 == 0 else (b, a)
        ch, ts = request.message_channel, request.message_ts
        views_before = len(w.standin.workspace.views)
        w.standin.events_url = rejecter.events_url
        opened = await w.standin.click(REVIEWER2, ch, ts, blocks.REJECT)
        assert opened.status == 200, opened

        view = await until("the reject modal", view_number(w, views_before), within=10.0)
        seen = len(w.ephemerals(REVIEWER))
        values = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not today"}}
        sends = [
            (approver, partial(w.standin.click, REVIEWER, ch, ts, blocks.APPROVE)),
            (rejecter, partial(w.standin.submit_view, REVIEWER2, view.id, values)),
        ]
        if n % 2:  # the submit sent first
            submit, click = await w.at_once(*sends[::-1])
        else:
            click, submit = await w.at_once(*sends)
        assert getattr(click, "status", None) == 200, click
        assert getattr(submit, "status", None) == 200, submit
        final = await one_outcome(w, request, procs)
        refunds = journal_for(w, "refund", request.run_id)
        if final.status == "approved":
            assert final.decided_by == REVIEWER and len(refunds) == 1
            answer = submit.json()  # the modal stays open, saying who decided
            assert answer and answer.get("response_action") == "errors", submit
        else:
            assert final.status == "rejected" and final.decided_by == REVIEWER2, final
            assert refunds == []
            assert not submit.body.strip(), submit  # the modal closed

            texts = await until(
                "the approver told it was rejected",
                new_ephemerals(w, REVIEWER, seen),
                within=10.0,
            )
            assert "already *rejected*" in texts[0], texts
        outcomes[final.status] += 1
    return dict(outcomes)


async def approve_vs_expiry(w: World, a: Proc, b: Proc, procs: list[Proc]) -> dict[str, int]:
    """A click lands at the request's deadline, while four sweepers (one per process) run."""
    w.standin.events_url = a.events_url
    added = await w.standin.slash(
        ADMIN, OPS, "/approvals", "route add agent=cleanup-agent channel=C0OPS expiry=1s"
    )
    assert added.status == 200 and "Added route" in (added.json() or {}).get("text", ""), added
    outcomes: Counter[str] = Counter()
    # Clicks spread around the deadline: the four sweepers tick once a second each, at
    # unknown phases, so somewhere in here each side wins some.
    offsets = [-0.1, 0.15, 0.4, 0.65, 0.9]
    for n, offset in enumerate(offsets):
        via = (a, b)[n % 2]
        run_id = await w.start_run(via, agent="cleanup-agent", text=f"delete /tmp/race-{n}.docx")
        request = await w.only_request(run_id, posted=True, within=10.0, watch=procs)
        assert request.route.expiry_seconds == 1 and request.message_channel == OPS
        await asyncio.sleep(max(0.0, request.expires_at + offset - time.time()))
        w.standin.events_url = via.events_url
        try:
            reply = await w.standin.click(REVIEWER, OPS, request.message_ts, blocks.APPROVE)
            assert reply.status == 200, reply
        except LookupError:  # a sweeper won and the message already lost its buttons
            outcomes["expired-before-click"] += 1
            assert (await w.request(request.request_id)).status == "expired"
        final = await one_outcome(w, request, procs)
        assert final.status in ("approved", "expired"), final
        deletes = journal_for(w, "delete_file", run_id)
        assert len(deletes) == (1 if final.status == "approved" else 0), (final.status, deletes)
        outcomes[final.status] += 1
    return dict(outcomes)


RACES = {
    "clicks": racing_approvals,
    "approve-vs-reject": approve_vs_reject,
    "approve-vs-expiry": approve_vs_expiry,
}


async def replicas(tmp: Path) -> dict[str, Any]:
    """One deployment, the races one after another; each race's result or exception."""
    async with world(tmp) as w:
        a, b = w.serve(events=False), w.serve(events=False)
        workers = [w.worker(), w.worker()]
        procs = [a, b, *workers]
        await w.ready(*procs)
        results: dict[str, Any] = {}
        for name, race in RACES.items():
            try:
                results[name] = await race(w, a, b, procs)
            except Exception as exc:  # reported by that race's test
                results[name] = exc
        for proc in procs:
            assert proc.alive(), proc.tail()
        return results


async def trials(tmp: Path) -> TrialStats:
    with SPAWN_LOCK:  # no AOF: these trials are about concurrency, not durability
        server = RedisServer(tmp / "redis", appendonly=False).start()
    try:
        return await run_trials(server.url, TRIALS, batch=1000, stop=EARLY_STOP)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    jobs = {"replicas": (replicas, 30.0)}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=1) as futures:
        yield futures


def race_result(futures: dict[str, concurrent.futures.Future[Any]], name: str) -> Any:
    result = futures["replicas"].result(timeout=110)[name]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("scenario", ["replicas"])
def test_racing_clicks_across_replicas_give_one_terminal_decision(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    winners = race_result(scenarios, "clicks")
    assert sum(winners.values()) == 4


@pytest.mark.parametrize("scenario", ["replicas"])
def test_approve_racing_reject_across_replicas_gives_one_outcome(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    outcomes = race_result(scenarios, "approve-vs-reject")
    assert sum(outcomes.values()) == 3


@pytest.mark.parametrize("scenario", ["replicas"])
def test_approve_at_the_deadline_racing_the_sweepers_gives_one_outcome(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    outcomes = race_result(scenarios, "approve-vs-expiry")
    assert outcomes.get("approved", 0) + outcomes.get("expired", 0) == 5, outcomes


def test_randomized_trials_one_decision_per_request_one_execution_per_call(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # started early by tests/system/faults/conftest.py, or now if that did not happen
    future = start_early("trials", trials, tmp_path_factory.mktemp("trials"))
    stats: TrialStats = future.result(timeout=115)
    assert stats.trials == TRIALS
    # every path was exercised, not just the easy one
    assert {"approved", "rejected", "expired", "pending"} <= set(stats.statuses), stats.statuses
    wanted = {"decided", "progress", "already_decided", "duplicate_vote", "hash_mismatch"}
    assert wanted <= set(stats.outcomes), stats.outcomes
    assert set(stats.resume_modes) == {"once", "in_a_row", "at_once"}, stats.resume_modes
    assert stats.executions > 0 and not stats.resumes, "every resume entry was checked"
