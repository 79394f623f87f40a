"""A worker killed between a person's approval and the saved outcome, for an agent of each
hosted framework (Pydantic AI and the OpenAI Agents SDK, tests/support/hosted_agents.py).

A real `countersign serve` armed with COUNTERSIGN_CRASH_AT=after_tool_ran takes the click's
resume entry, hands the decisions to the framework, which runs the approved refund and the
lookup of the same turn through the call guard and ends the run, and the process SIGKILLs
itself before the outcome is saved. A fresh `serve` reclaims the entry (after the 30 s idle
of the resume stream; the two frameworks' scenarios run side by side) and runs the
framework again from the checkpoint: the guard hands both calls their results recorded in
the Redis ledger, so each side effect happened exactly once, and the run finishes with the
framework's own output in the approval message's thread.
"""

from __future__ import annotations

import concurrent.futures
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hosted_agents import AGENTS, FINAL, REGISTRY

from .harness import APPROVALS, REVIEWER, run_concurrently, until, world

OUTPUT = f"{FINAL}order 124: paid twice; refunded 12.50 to order 124"


async def killed_after_the_refund(tmp: Path, agent: str) -> dict[str, Any]:
    async with world(tmp, COUNTERSIGN_AGENTS=REGISTRY) as w:
        victim = w.serve("after_tool_ran")
        await w.ready(victim)
        run_id = await w.start_run(victim, agent=agent, text="refund order 124")
        request = await w.only_request(run_id, posted=True, within=30.0, watch=[victim])
        paused = {"lookups": len(w.effects("lookup")), "refunds": len(w.effects("refund"))}

        reply, _ = await w.click(REVIEWER, request, via=victim)
        assert reply.status == 200, reply
        code = await victim.exited(within=30.0)
        assert code == -signal.SIGKILL, f"serve did not die after the tool ran\n{w.tails()}"
        crashed = {
            "lookups": len(w.effects("lookup")),
            "refunds": len(w.effects("refund")),
            "status": (await w.run_info(run_id)).status,
            "request": (await w.request(request.request_id)).status,
        }

        again = w.serve()
        await w.ready(again)
        info = await w.run_reaches(run_id, "succeeded", "failed", within=70.0, watch=[again])

        async def answered() -> list[Any] | None:
            return w.thread_replies(APPROVALS, request.message_ts) or None

        replies = await until("the outcome in the thread", answered, within=25.0, watch=[again])
        return {
            "paused": paused,
            "crashed": crashed,
            "info": info,
            "refunds": w.effects("refund"),
            "lookups": w.effects("lookup"),
            "asked": [len(e["results"]) for e in w.effects("model_request")],
            "replies": [m.text for m in replies],
            "posts": len(w.top_level_posts()),
            "decided": len(await w.terminal_events(request.request_id)),
        }


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    def scenario(agent: str) -> Any:
        return lambda tmp: killed_after_the_refund(tmp, agent)

    jobs = {framework: (scenario(agent), 45.0) for framework, agent in AGENTS.items()}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=2) as futures:
        yield futures


@pytest.mark.parametrize("scenario", list(AGENTS))
def test_a_worker_killed_after_the_approved_refund_ran_finishes_the_run_without_a_second_refund(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    report = scenarios[scenario].result(timeout=150)

    assert report["paused"] == {"lookups": 0, "refunds": 0}, "the whole turn waited"
    assert report["crashed"] == {
        "lookups": 1,
        "refunds": 1,
        "status": "resuming",
        "request": "approved",
    }, "the framework ran both calls before the kill, and nothing was saved after them"
    info = report["info"]
    assert info.status == "succeeded", info
    assert info.output == OUTPUT
    [refund] = report["refunds"]
    assert (refund["order_id"], refund["amount"]) == ("124", 12.5)
    assert len(report["lookups"]) == 1
    # the model was asked for the tool turn once; for the final answer by each worker
    assert report["asked"] == [0, 2, 2], report["asked"]
    assert report["replies"] == [f"Run finished: {OUTPUT}"]
    assert report["posts"] == 1 and report["decided"] == 1
