"""A worker killed mid-run, after an ALLOW tool ran and before the run's outcome was saved,
with a model that gives fresh call ids on every request.

A real `countersign serve` runs tests/system/faults/fresh_ids_agent.py and SIGKILLs itself on its
model's first request of a chosen turn; a fresh `serve` reclaims the entry (after the
30 s idle of the resume stream) and finishes the run. The saved response of the turn is
replayed: the ALLOW tool's side effect happened exactly once, and the model was asked once
for that turn. Two cases: the kill while handling the run's start entry, and while
handling the resume entry after an approval.
"""

from __future__ import annotations

import concurrent.futures
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .fresh_ids_agent import KILL_AT_TURN
from .harness import REVIEWER, World, run_concurrently, world

AGENT = "tests.system.faults.fresh_ids_agent:registry"
# kill at this model turn -> the ALLOW call that ran before it, and the turn that planned it
CASES = {"start-entry": 1, "resume-entry": 3}


async def approve(w: World, front: Any, run_id: str) -> None:
    request = await w.only_request(run_id, posted=True, within=60.0, watch=[front])
    reply, _ = await w.click(REVIEWER, request, via=front)
    assert reply.status == 200, reply


async def killed_and_replayed(tmp: Path, kill_at_turn: int) -> dict[str, Any]:
    async with world(tmp, COUNTERSIGN_AGENTS=AGENT) as w:
        victim = w.serve(**{KILL_AT_TURN: str(kill_at_turn)})
        await w.ready(victim)
        run_id = await w.start_run(victim, agent="fresh-ids-agent", text="refund order 123")
        if kill_at_turn == 3:
            await approve(w, victim, run_id)
        code = await victim.exited(within=30.0)
        assert code == -signal.SIGKILL, f"serve did not die at turn {kill_at_turn}\n{w.tails()}"
        notified_at_crash = len(w.effects("notify"))
        assert notified_at_crash == (1 if kill_at_turn == 1 else 2), w.effects("notify")

        again = w.serve()
        await w.ready(again)
        if kill_at_turn == 1:
            await approve(w, again, run_id)
        info = await w.run_reaches(run_id, "succeeded", "failed", within=70.0, watch=[again])
        return {
            "info": info,
            "notified": w.effects("notify"),
            "refunds": w.effects("refund"),
            "asked": Counter(e["turn"] for e in w.effects("model_request")),
        }


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    async def run(tmp: Path, turn: int) -> dict[str, Any]:
        return await killed_and_replayed(tmp, turn)

    def scenario(turn: int) -> Any:
        return lambda tmp: run(tmp, turn)

    jobs = {key: (scenario(turn), 45.0) for key, turn in CASES.items()}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=2) as futures:
        yield futures


@pytest.mark.parametrize("scenario", [pytest.param(key, id=key) for key in CASES])
def test_a_killed_worker_replays_the_saved_turn_and_runs_allow_tools_once(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    report = scenarios[scenario].result(timeout=150)
    kill_at_turn = CASES[scenario]

    assert report["info"].status == "succeeded", report["info"]
    assert report["info"].output == "Refunded order 123 and told the customer."
    assert len(report["notified"]) == 2, f"each ALLOW call ran once: {report['notified']}"
    assert len({n["key"] for n in report["notified"]}) == 2
    assert len(report["refunds"]) == 1, report["refunds"]
    # the turn whose ALLOW call ran before the kill was never asked again; the turn the
    # process died asking is asked again (it never answered)
    asked = report["asked"]
    assert asked[kill_at_turn - 1] == 1, f"model asked again for turn {kill_at_turn - 1}: {asked}"
    assert asked[kill_at_turn] == 2, asked
    assert all(asked[t] == 1 for t in range(4) if t not in (kill_at_turn,)), asked
