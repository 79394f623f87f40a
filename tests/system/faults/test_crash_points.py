"""Crash points: a real `countersign serve` (or `worker`) SIGKILLs itself at each named point
(COUNTERSIGN_CRASH_AT, agent_host/durable/crashpoints.py); a fresh process without the crash point
finishes the flow. Nothing pending is lost, nothing runs twice, the Slack message is posted
once (at most twice when the crash falls between Slack's accept and the saved ts).

Each case runs the real `python -m bot.cli`; a process seen past its crash point alive
fails the case at once (the crash point had no effect).

The scenarios are independent (own Redis, stand-in, processes, tmp dir) and mostly wait
(the outbox reclaims a dead consumer's entry after 5 s, the resume stream after 30 s), so a
module fixture runs them concurrently in threads; each test collects its own scenario.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_host.durable.sweeper import EXPIRED_BY

from .harness import (
    APPROVALS,
    CLI,
    REVIEWER,
    Proc,
    World,
    run_concurrently,
    until,
    world,
    write_file,
)

POINTS = ("after_pause_saved", "after_post", "after_tool_ran", "sweeper_after_due")
ROUTES_1S = "routes:\n  - tool: issue_refund\n    channel: C0APPROVALS\n    expiry: 1s\n"
SIGKILLED = -signal.SIGKILL


@dataclass(frozen=True)
class Case:
    point: str
    in_worker: bool = False  # the crash point armed in a `worker` next to `serve --workers 0`

    @property
    def id(self) -> str:
        where = "worker" if self.in_worker else "serve"
        return f"{where}/{self.point}"

    @property
    def cli(self) -> Sequence[str]:
        return CLI

    @property
    def approved(self) -> bool:
        return self.point != "sweeper_after_due"

    @property
    def seconds(self) -> int:  # rough duration, to start the slowest first
        return 40 if self.point == "after_tool_ran" else 12


CASES = {
    case.id: case
    for case in (
        Case("after_pause_saved"),
        Case("after_post"),
        Case("after_tool_ran"),
        Case("after_tool_ran", in_worker=True),
        Case("sweeper_after_due"),
    )
}


async def passed_alive(w: World, victim: Proc, point: str, run_id: str) -> bool:
    """Evidence that `victim` went past `point` without dying there."""
    if point == "after_pause_saved":
        return bool(w.top_level_posts())  # the post comes after the point
    requests = await w.store.run_requests(run_id)
    if point == "after_post":
        return any(r.message_ts for r in requests)  # the ts is saved after the point
    if point == "sweeper_after_due":
        return any(r.status == "expired" for r in requests)
    info = await w.run_info(run_id)
    return info.status in ("succeeded", "failed")  # after_tool_ran: the run moved on


async def died_at(w: World, victim: Proc, point: str, run_id: str) -> int:
    """Wait (bounded) for `victim` to exit; fail fast if it is seen past `point` alive."""

    async def outcome() -> str | None:
        if not victim.alive():
            return "exited"
        if await passed_alive(w, victim, point, run_id):
            await asyncio.sleep(0.5)  # a kill right at the point would be done by now
            return "exited" if not victim.alive() else "passed"
        return None

    seen = await until(f"{victim.name} to die at {point}", outcome, within=20.0)
    assert seen == "exited", (
        f"{victim.name} went past crash point {point} and kept running: "
        f"COUNTERSIGN_CRASH_AT={point} had no effect\n{victim.tail()}"
    )
    code = victim.returncode
    assert code is not None
    return code


async def crash_and_recover(tmp: Path, case: Case) -> dict[str, Any]:
    point = case.point
    env: dict[str, str] = {}
    if point == "sweeper_after_due":
        env["COUNTERSIGN_ROUTES_FILE"] = str(write_file(tmp / "routes.yml", ROUTES_1S))
    async with world(tmp, env=env) as w:
        # -- 1. a process armed with the crash point, driven to it -------------------------
        if case.in_worker:
            front = w.serve(workers=0, cli=case.cli)
            victim = w.worker(point, cli=case.cli)
        else:
            front = victim = w.serve(point, cli=case.cli)
        await w.ready(front, victim)
        run_id = await w.start_run(front)
        if point == "after_tool_ran":
            request = await w.only_request(run_id, posted=True, watch=[front, victim])
            reply, _ = await w.click(REVIEWER, request, via=front)
            assert reply.status == 200, reply
        code = await died_at(w, victim, point, run_id)
        assert code == SIGKILLED, f"{victim.name} exited with {code}, not SIGKILL\n{victim.tail()}"

        # -- 2. what the crash left behind ------------------------------------------------
        request = await w.only_request(run_id)
        posts_at_crash = len(w.top_level_posts())
        if point == "after_tool_ran":
            assert request.status == "approved"
            assert len(w.refunds()) == 1, "the tool ran before the crash point"
            assert (await w.run_info(run_id)).status == "resuming"
        else:
            assert request.status == "pending", "the pending request survives the crash"
            assert await w.indexed(request.request_id) == (True, True)
            assert w.refunds() == []
        if point == "after_pause_saved":
            assert posts_at_crash == 0 and not request.message_ts
        if point == "after_post":
            assert posts_at_crash == 1 and not request.message_ts  # posted, ts not saved

        # -- 3. a fresh process without the crash point finishes the flow ----------------
        if case.in_worker:
            again = w.worker(cli=case.cli)
            watch = [front, again]
        else:
            front = again = w.serve(cli=case.cli)
            watch = [again]
        await w.ready(again)
        if point in ("after_pause_saved", "after_post"):
            # the dead outbox consumer's entry is reclaimed after 5 s idle
            request = await w.only_request(run_id, posted=True, within=25.0, watch=watch)
            reply, _ = await w.click(REVIEWER, request, via=front)
            assert reply.status == 200, reply
        # after_tool_ran: the dead worker's resume entry is reclaimed after 30 s idle
        within = 50.0 if point == "after_tool_ran" else 25.0
        info = await w.run_reaches(run_id, "succeeded", "failed", within=within, watch=watch)

        # -- 4. the guarantees -------------------------------------------------------------
        assert info.status == "succeeded", info
        final = await w.request(request.request_id)
        decided = await w.terminal_events(request.request_id)
        assert len(decided) == 1, f"not exactly one terminal decision: {decided}"
        refunds = w.refunds()
        if case.approved:
            assert final.status == "approved" and final.decided_by == REVIEWER
            assert info.output.startswith("Done. Refund issued: $42.50 to order 123"), info
            assert len(refunds) == 1, f"the refund must run exactly once: {refunds}"
            assert refunds[0]["key"].startswith(run_id)
        else:
            assert final.status == "expired" and final.decided_by == EXPIRED_BY
            assert "not approved" in info.output, info
            assert refunds == [], "an expired request must not run its tool"
        assert await w.indexed(final.request_id) == (False, False)
        # one resume per decided turn (the sweeper trims acknowledged entries, hence <=)
        assert len(await w.resume_entries(run_id)) <= 1

        posts = w.top_level_posts()
        if point == "after_post":
            assert 1 <= len(posts) <= 2, f"at least once, at most twice: {len(posts)} posts"
        else:
            assert len(posts) == 1, f"posted {len(posts)} times"
        assert final.message_ts in {m.ts for m in posts}

        async def updated_and_answered() -> bool:
            message = w.message(APPROVALS, final.message_ts)
            buttons = any(b.get("type") == "actions" for b in message.blocks)
            return not buttons and bool(w.thread_replies(APPROVALS, final.message_ts))

        # the decided message lost its buttons, and the outcome is in its thread
        await until("message update and outcome reply", updated_and_answered, within=25.0)
        return {"posts": len(posts), "refunds": len(refunds), "status": final.status}


# -- the tests: one per case, all cases running concurrently ------------------------------


def _scenario(case: Case) -> Any:
    async def scenario(tmp: Path) -> dict[str, Any]:
        return await crash_and_recover(tmp, case)

    return scenario


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    jobs = {key: (_scenario(case), case.seconds) for key, case in CASES.items()}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=4) as futures:
        yield futures


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(key, id=key) for key in CASES],
)
def test_crash_point_loses_nothing_and_runs_nothing_twice(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    report = scenarios[scenario].result(timeout=110)
    assert report["refunds"] == (1 if CASES[scenario].approved else 0)
