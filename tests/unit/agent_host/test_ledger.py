"""The execution ledger: at most one run per call id, and honest reports when in doubt."""

from __future__ import annotations

from typing import Any

import pytest

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.decisions import Approve
from agent_host.runtime.ledger import Claim, InMemoryLedger, with_recorded
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.runner import UNKNOWN_OUTCOME, Paused, Runner, Succeeded
from agent_host.runtime.tools import tool
from tests.support.agents import Recorder, SpyModel, counting_tool, registry_of, scripted, tc


async def test_in_memory_ledger_claims_once_then_reports() -> None:
    ledger = InMemoryLedger()
    assert await ledger.claim("r", "c") == Claim("claimed")
    assert await ledger.claim("r", "c") == Claim("in_doubt")
    assert await ledger.claim("r", "other") == Claim("claimed")  # keyed by call id
    assert await ledger.claim("r2", "c") == Claim("claimed")  # and by run id
    await ledger.finish("r", "c", "the result")
    assert await ledger.claim("r", "c") == Claim("finished", "the result")
    await ledger.finish("r", "empty", "")
    assert await ledger.claim("r", "empty") == Claim("finished", "")  # "" is a result too


def one_call_registry(rec: Recorder, **options: Any) -> tuple[AgentRegistry, SpyModel]:
    spy = SpyModel(scripted([tc("call_0_1", "charge", target="card")], reply("done")))
    return registry_of("payer", [counting_tool(rec, "charge", **options)], spy), spy


async def test_claimed_but_unfinished_call_is_reported_not_rerun() -> None:
    rec = Recorder()
    registry, spy = one_call_registry(rec)
    ledger = InMemoryLedger()
    ledger.entries[("run_crash", "call_0_1")] = None  # a worker claimed it, then died mid-call

    outcome = await Runner(registry, ledger).run("payer", "go", run_id="run_crash")

    assert isinstance(outcome, Succeeded)
    record = outcome.state.calls[0]
    assert (record.outcome, record.result) == ("unknown_outcome", UNKNOWN_OUTCOME)
    assert "It was not run again; check its effect before retrying." in UNKNOWN_OUTCOME
    assert rec.count() == 0
    assert spy.last_tool_messages() == {"call_0_1": UNKNOWN_OUTCOME}
    assert ledger.entries[("run_crash", "call_0_1")] is None  # still in doubt: nothing recorded


async def test_idempotent_tool_is_rerun_when_its_outcome_is_unknown() -> None:
    rec = Recorder()
    registry, _ = one_call_registry(rec, idempotent=True)
    ledger = InMemoryLedger()
    ledger.entries[("run_crash", "call_0_1")] = None

    outcome = await Runner(registry, ledger).run("payer", "go", run_id="run_crash")

    assert isinstance(outcome, Succeeded)
    assert outcome.state.calls[0].outcome == "executed"
    assert rec.invocations == [("charge", "call_0_1", "card")]
    assert ledger.entries[("run_crash", "call_0_1")] == "charge done: card"


@pytest.mark.parametrize("idempotent", [False, True])
async def test_finished_claim_returns_the_recorded_result_without_running(
    idempotent: bool,
) -> None:
    rec = Recorder()
    registry, spy = one_call_registry(rec, idempotent=idempotent)
    ledger = InMemoryLedger()
    ledger.entries[("run_done", "call_0_1")] = "charged 12.00 earlier"

    outcome = await Runner(registry, ledger).run("payer", "go", run_id="run_done")

    assert isinstance(outcome, Succeeded)
    record = outcome.state.calls[0]
    assert (record.outcome, record.result) == ("executed", "charged 12.00 earlier")
    assert rec.count() == 0
    assert spy.last_tool_messages() == {"call_0_1": "charged 12.00 earlier"}


async def test_ledger_is_keyed_by_run_so_other_runs_still_execute() -> None:
    rec = Recorder()
    registry, _ = one_call_registry(rec)
    ledger = InMemoryLedger()
    ledger.entries[("run_other", "call_0_1")] = None

    outcome = await Runner(registry, ledger).run("payer", "go", run_id="run_mine")

    assert isinstance(outcome, Succeeded) and outcome.state.calls[0].outcome == "executed"
    assert rec.count() == 1


async def test_a_decision_delivered_twice_executes_once() -> None:
    """A retried resume (a double-clicked Slack button) replays the ledger, not the tool."""
    effects = ExampleEffects()
    runner = Runner(build_registry(effects))  # one deployment, one ledger
    paused = await runner.run("refund-agent", "refund order 123", run_id="run_dup")
    assert isinstance(paused, Paused)
    decisions = {paused.pending[0].call_id: Approve()}

    first = await runner.resume(paused.state, decisions)
    second = await runner.resume(paused.state, decisions)

    assert isinstance(first, Succeeded) and isinstance(second, Succeeded)
    assert effects.count("refund") == 1
    assert second.output == first.output
    assert "run_dup:call_1_1" in first.output


async def test_tool_failures_are_recorded_as_finished() -> None:
    async def flaky(target: str) -> str:
        raise ConnectionError("gateway timeout")

    ledger = InMemoryLedger()
    model = scripted([tc("call_0_1", "flaky", target="x")], reply("done"))
    outcome = await Runner(registry_of("a", [tool(flaky)], model), ledger).run(
        "a", "go", run_id="run_err"
    )

    assert isinstance(outcome, Succeeded)
    assert outcome.state.calls[0].outcome == "error"
    failure = "Tool flaky failed: gateway timeout"
    assert ledger.entries[("run_err", "call_0_1")] == failure
    assert await ledger.claim("run_err", "call_0_1") == Claim("finished", failure, "error")


async def test_a_failed_call_replayed_from_the_ledger_stays_a_failure() -> None:
    """A worker taking over after a crash replays the ledger: a tool that raised is told
    to the model, and recorded, as the failure it was, not as a call that executed."""
    calls = 0

    async def flaky(target: str) -> str:
        nonlocal calls
        calls += 1
        raise ConnectionError("gateway timeout")

    ledger = InMemoryLedger()
    model = scripted([tc("call_0_1", "flaky", target="x")], reply("done"))
    first = await Runner(registry_of("a", [tool(flaky)], model), ledger).run(
        "a", "go", run_id="run_err"
    )
    spy = SpyModel(scripted([tc("call_0_1", "flaky", target="x")], reply("done")))
    again = await Runner(registry_of("a", [tool(flaky)], spy), ledger).run(
        "a", "go", run_id="run_err"
    )

    assert calls == 1
    assert isinstance(first, Succeeded) and isinstance(again, Succeeded)
    record = again.state.calls[0]
    assert (record.outcome, record.result) == ("error", first.state.calls[0].result)
    assert spy.last_tool_messages() == {"call_0_1": "Tool flaky failed: gateway timeout"}


async def test_a_run_stopped_early_records_a_failed_call_as_failed() -> None:
    """What a run given up records of its calls comes from the ledger, failures included."""

    async def flaky(target: str) -> str:
        raise ConnectionError("gateway timeout")

    ledger = InMemoryLedger()
    model = scripted([tc("c1", "flaky", target="x"), tc("c2", "charge", target="y")], reply("ok"))
    registry = registry_of("a", [tool(flaky), counting_tool(Recorder(), "charge")], model)
    ran = await Runner(registry, ledger).run("a", "go", run_id="run_x")
    assert isinstance(ran, Succeeded)
    before = ran.state.model_copy(deep=True)  # the calls as the checkpoint had them
    for record in before.calls:
        record.outcome, record.result = None, None
    recorded = {r.call_id: await ledger.claim("run_x", r.call_id) for r in before.calls}

    final = with_recorded(before, recorded)

    assert [(r.outcome, r.result) for r in final.calls] == [
        ("error", "Tool flaky failed: gateway timeout"),
        ("executed", "charge done: y"),
    ]
