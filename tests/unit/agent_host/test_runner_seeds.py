"""One group of tests per seed scenario (000-003, see docs/ORIGINS.md)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_host.errors import (
    AgentChangedError,
    DecisionMismatchError,
    InvalidDecisionError,
    MissingDecisionError,
    UnknownAgentError,
)
from agent_host.examples import ExampleEffects, build_registry, repo_admin
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import (
    DEFAULT_REJECT_MESSAGE,
    Answer,
    Approve,
    Decision,
    Expired,
    Reject,
    RequestChanges,
    decision_adapter,
)
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.pause import ask_human
from agent_host.runtime.policy import Permission, Verdict, confidence_gate, load_rules
from agent_host.runtime.runner import Paused, Runner, Succeeded
from agent_host.runtime.tools import Tool, ToolContext, tool
from tests.support.agents import (
    Recorder,
    SpyModel,
    counting_tool,
    registry_of,
    roundtrip,
    scripted,
    tc,
    tool_messages,
)

HERE = Path(__file__).parent

# == seed 000: a paused destructive call survives a JSON round trip ===========================


async def pause_cleanup(effects: ExampleEffects) -> Paused:
    outcome = await Runner(build_registry(effects)).run(
        "cleanup-agent",
        "Clean up the old drafts.",
        run_id="run_42",
        context={"session_id": "acme-review"},
    )
    assert isinstance(outcome, Paused)
    return outcome


async def test_seed000_paused_destructive_call_round_trips_through_json() -> None:
    effects = ExampleEffects()
    paused = await pause_cleanup(effects)

    blob = paused.state.to_json()
    restored = RunState.from_json(blob)

    assert restored == paused.state
    assert (restored.run_id, restored.status, restored.input) == (
        "run_42",
        "paused",
        "Clean up the old drafts.",
    )
    assert restored.context == {"session_id": "acme-review"}
    [pending] = restored.pending
    assert pending.tool == "delete_file"
    assert isinstance(pending.arguments, dict)
    assert pending.arguments["path"].endswith("draft.docx")
    assert (pending.reason, pending.severity, pending.gate) == (
        "destructive: deletes a file",
        "high",
        "ask",
    )
    assert effects.count("delete_file") == 0


@pytest.mark.parametrize(
    ("decision", "deleted", "output"),
    [
        (Approve(), 1, "Cleanup finished: Deleted /matter/acme/draft.docx"),
        (Reject(), 0, f"Cleanup finished: {DEFAULT_REJECT_MESSAGE}"),
    ],
    ids=["approved", "rejected"],
)
async def test_seed000_restored_state_resumes_in_a_fresh_registry(
    decision: Decision, deleted: int, output: str
) -> None:
    blob = (await pause_cleanup(ExampleEffects())).state.to_json()

    later = ExampleEffects()  # "another process": a new registry, a new runner, a new ledger
    restored = RunState.from_json(blob)
    outcome = await Runner(build_registry(later)).resume(
        restored, {restored.pending[0].call_id: decision}
    )

    assert isinstance(outcome, Succeeded) and outcome.output == output
    assert later.count("delete_file") == deleted
    if deleted:
        assert later.events[0]["key"] == "run_42:call_0_1"


# == seed 001: per-call approval on the turn as a whole ======================================


def spied_repo_admin(effects: ExampleEffects) -> tuple[AgentRegistry, SpyModel]:
    spy = SpyModel(repo_admin(effects).model)

    def factory() -> Agent:
        agent = repo_admin(effects)
        agent.model = spy
        return agent

    return AgentRegistry({"repo-admin": factory}), spy


def deleted_repos(effects: ExampleEffects) -> list[str]:
    return [e["name"] for e in effects.all_events() if e["kind"] == "delete_repo"]


async def test_seed001_turn_pauses_before_any_of_its_calls_runs() -> None:
    effects = ExampleEffects()
    registry, _ = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos scratch, prod-db")

    assert isinstance(paused, Paused)
    assert {c.call_id: (c.gate, c.outcome) for c in paused.state.calls} == {
        "call_0_1": ("allow", None),
        "call_0_2": ("ask", None),
    }
    assert [p.call_id for p in paused.pending] == ["call_0_2"]
    assert paused.pending[0].arguments == {"name": "prod-db"}
    assert paused.pending[0].severity == "critical"
    assert deleted_repos(effects) == []  # not even the allowed call ran

    state = roundtrip(paused.state)
    registry, _ = spied_repo_admin(effects)  # rebuilt, as another process would
    done = await Runner(registry).resume(state, {"call_0_2": Approve(decided_by="U1")})

    assert isinstance(done, Succeeded)
    assert deleted_repos(effects) == ["scratch", "prod-db"]
    assert done.output == "Done: Deleted repository scratch; Deleted repository prod-db"
    assert [c.outcome for c in done.state.calls] == ["executed", "executed"]
    assert done.state.call("call_0_2").decision == Approve(decided_by="U1")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("decision", "text"),
    [
        (Reject(message="prod is frozen this week"), "prod is frozen this week"),
        (Reject(), DEFAULT_REJECT_MESSAGE),
        (Reject(message="   "), DEFAULT_REJECT_MESSAGE),
    ],
    ids=["with-message", "default", "blank-message"],
)
async def test_seed001_rejection_message_is_the_tool_result_the_model_sees(
    decision: Reject, text: str
) -> None:
    assert DEFAULT_REJECT_MESSAGE == "Tool execution was not approved."
    effects = ExampleEffects()
    registry, spy = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos scratch, prod-db")
    assert isinstance(paused, Paused)

    done = await Runner(registry).resume(roundtrip(paused.state), {"call_0_2": decision})

    assert isinstance(done, Succeeded)
    assert deleted_repos(effects) == ["scratch"]  # the rejected call never ran
    rejected = done.state.call("call_0_2")
    assert rejected is not None and (rejected.outcome, rejected.result) == ("rejected", text)
    assert spy.last_tool_messages() == {
        "call_0_1": "Deleted repository scratch",
        "call_0_2": text,
    }
    assert done.output == f"Done: Deleted repository scratch; {text}"


def multi_turn_registry(
    rec: Recorder, *turns: list[Any], extra_tools: tuple[Tool, ...] = ()
) -> AgentRegistry:
    tools = [counting_tool(rec, "delete_file", Permission.ASK), *extra_tools]
    return registry_of("janitor", tools, scripted(*turns, reply("all done")))


async def test_seed001_approve_always_is_kept_for_the_store_to_scope_not_applied_blindly() -> None:
    """The runner records "approve for this run" but does not apply it: whether a later call
    is covered depends on its route, which the store resolves (invariant 14,
    docs/ARCHITECTURE.md)."""
    rec = Recorder()
    registry = multi_turn_registry(
        rec,
        [tc("a", "delete_file", target="/a")],
        [tc("b", "delete_file", target="/b"), tc("c", "delete_file", target="/c")],
    )
    paused = await Runner(registry).run("janitor", "clean")
    assert isinstance(paused, Paused) and len(paused.pending) == 1
    first = paused.pending[0].call_id

    later = await Runner(registry).resume(
        roundtrip(paused.state), {first: Approve(decided_by="U1", always=True)}
    )

    assert isinstance(later, Paused) and len(later.pending) == 2
    assert rec.targets("delete_file") == ["/a"]
    standing = later.state.standing["delete_file"]
    assert standing.always and standing.decided_by == "U1"
    assert later.state.sticky == {}


async def test_seed001_reject_always_rejects_later_calls_without_pausing_or_running() -> None:
    rec = Recorder()
    registry = multi_turn_registry(
        rec,
        [tc("call_0_1", "delete_file", target="/a")],
        [tc("call_1_1", "delete_file", target="/b"), tc("call_1_2", "read", target="/r")],
        extra_tools=(counting_tool(rec, "read"),),
    )
    paused = await Runner(registry).run("janitor", "clean")
    assert isinstance(paused, Paused)

    done = await Runner(registry).resume(
        roundtrip(paused.state), {"call_0_1": Reject(message="not today", always=True)}
    )

    assert isinstance(done, Succeeded)
    assert done.state.sticky == {"delete_file": "reject"}
    assert rec.invocations == [("read", "call_1_2", "/r")]
    b = done.state.call("call_1_1")
    assert b is not None and (b.outcome, b.result) == ("rejected", DEFAULT_REJECT_MESSAGE)
    assert b.decision is not None and b.decision.decided_by == "reject-always"
    assert tool_messages(done.state)["call_0_1"] == "not today"


async def test_seed001_approve_always_is_refused_when_the_verdict_forbids_it() -> None:
    effects = ExampleEffects()
    registry, _ = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos prod-a")
    assert isinstance(paused, Paused) and paused.pending[0].allow_always is False

    with pytest.raises(InvalidDecisionError, match="may not be approved for the whole run"):
        await Runner(registry).resume(paused.state, {"call_0_1": Approve(always=True)})
    assert deleted_repos(effects) == []

    done = await Runner(registry).resume(paused.state, {"call_0_1": Reject(always=True)})
    assert done.state.sticky == {"delete_repo": "reject"}


async def test_seed001_missing_decision_raises_and_runs_nothing() -> None:
    effects = ExampleEffects()
    registry, _ = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos scratch, prod-a, prod-b")
    assert isinstance(paused, Paused)
    assert [p.call_id for p in paused.pending] == ["call_0_2", "call_0_3"]
    before = paused.state.to_json()

    with pytest.raises(MissingDecisionError, match=r"call\(s\) call_0_3;.*nothing was run"):
        await Runner(registry).resume(paused.state, {"call_0_2": Approve()})
    with pytest.raises(MissingDecisionError, match="call_0_2, call_0_3"):
        await Runner(registry).resume(paused.state, {})

    assert deleted_repos(effects) == []
    assert paused.state.to_json() == before  # the caller's state is untouched: retry is safe
    done = await Runner(registry).resume(
        paused.state, {"call_0_2": Approve(), "call_0_3": Reject()}
    )
    assert isinstance(done, Succeeded)
    assert deleted_repos(effects) == ["scratch", "prod-a"]


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ({"call_0_2": Approve(), "call_0_9": Approve()}, r"call_0_9 are not pending"),
        ({"call_0_1": Approve(), "call_0_2": Approve()}, r"call_0_1 are not pending"),
        ({"call_0_2": Answer(text="yes")}, r"needs approve or reject, not an answer"),
    ],
    ids=["unknown-call", "allowed-call", "answer-to-an-ask"],
)
async def test_seed001_decisions_that_do_not_fit_are_refused(
    decisions: dict[str, Decision], message: str
) -> None:
    effects = ExampleEffects()
    registry, _ = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos scratch, prod-db")
    assert isinstance(paused, Paused)

    with pytest.raises(InvalidDecisionError, match=message):
        await Runner(registry).resume(paused.state, decisions)
    assert deleted_repos(effects) == []


async def test_seed001_a_finished_run_cannot_be_resumed() -> None:
    registry, _ = spied_repo_admin(ExampleEffects())
    done = await Runner(registry).run("repo-admin", "delete repos scratch")
    assert isinstance(done, Succeeded)
    with pytest.raises(InvalidDecisionError, match="is succeeded, not paused"):
        await Runner(registry).resume(done.state, {})


async def test_seed001_decision_for_a_different_call_hash_runs_nothing() -> None:
    effects = ExampleEffects()
    registry, _ = spied_repo_admin(effects)
    paused = await Runner(registry).run("repo-admin", "delete repos prod-a, prod-b")
    assert isinstance(paused, Paused)
    a, b = paused.pending
    assert a.call_hash != b.call_hash

    # the reviewer was shown prod-b's call but the decision landed on prod-a's
    swapped = {a.call_id: Approve(call_hash=b.call_hash), b.call_id: Approve(call_hash=a.call_hash)}
    with pytest.raises(DecisionMismatchError, match=r"nothing was run"):
        await Runner(registry).resume(paused.state, swapped)
    with pytest.raises(DecisionMismatchError):
        await Runner(registry).resume(
            paused.state, {a.call_id: Approve(), b.call_id: Reject(call_hash="0" * 64)}
        )
    assert deleted_repos(effects) == []

    matching = {
        a.call_id: Approve(call_hash=a.call_hash),
        b.call_id: Approve(call_hash=b.call_hash),
    }
    done = await Runner(registry).resume(paused.state, matching)
    assert isinstance(done, Succeeded) and deleted_repos(effects) == ["prod-a", "prod-b"]


def delete_v1(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def delete_v2(path: str, force: bool = False) -> str:
    """Delete a file."""
    return f"deleted {path}"


def keep(path: str) -> str:
    """Keep a file."""
    return f"kept {path}"


def prod_only(arguments: Any, context: Any) -> bool:
    return "prod" in str(arguments.get("path"))


def janitor(
    fn: Callable[..., str] = delete_v1,
    permission: Any = Permission.ASK,
    severity: str = "high",
    extra: bool = False,
    rules: str | None = None,
) -> AgentRegistry:
    tools = [tool(name="delete_file", permission=permission, severity=severity)(fn)]
    if extra:
        tools.append(tool(keep))
    model = ScriptedModel.from_turns([call("delete_file", path="/x")], reply("done"))
    return registry_of("janitor", tools, model, load_rules(rules) if rules else None)


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        (janitor(), janitor(delete_v2), "schema of tool delete_file changed"),
        (janitor(), janitor(permission=prod_only), "policy of tool delete_file changed"),
        (janitor(), janitor(severity="critical"), "severity of tool delete_file changed"),
        (janitor(), janitor(extra=True), "tool keep added"),
        (janitor(extra=True), janitor(), "tool keep removed"),
        (
            janitor(),
            janitor(rules="rules:\n  - {tool: delete_file, permission: deny}\n"),
            "operator policy rules changed",
        ),
    ],
    ids=["schema", "policy", "severity", "added", "removed", "rules"],
)
async def test_seed001_changed_agent_is_refused_on_resume(
    before: AgentRegistry, after: AgentRegistry, change: str
) -> None:
    paused = await Runner(before).run("janitor", "clean", run_id="run_changed")
    assert isinstance(paused, Paused)
    state = roundtrip(paused.state)

    with pytest.raises(AgentChangedError) as info:
        await Runner(after).resume(state, {paused.pending[0].call_id: Approve()})
    message = str(info.value)
    assert "agent 'janitor' changed since run run_changed paused" in message
    assert change in message
    assert "asked again in a new run" in message

    same = await Runner(before).resume(state, {paused.pending[0].call_id: Approve()})
    assert isinstance(same, Succeeded)  # an unchanged definition, rebuilt, resumes fine


async def test_seed001_unknown_agent_on_resume_names_the_known_ones() -> None:
    paused = await Runner(janitor()).run("janitor", "clean")
    assert isinstance(paused, Paused)
    with pytest.raises(
        UnknownAgentError, match=r"'janitor' is registered \(known: cleanup-agent, refund-agent"
    ):
        await Runner(build_registry()).resume(paused.state, {})


async def test_seed001_sticky_approve_does_not_cover_a_call_that_forbids_it() -> None:
    def per_repo(arguments: Any, context: Any) -> Verdict:
        if "prod" in arguments["target"]:
            return Verdict.ask("deletes prod", "critical", allow_always=False)
        return Verdict.ask("deletes a repository")

    rec = Recorder()
    model = scripted(
        [tc("call_0_1", "delete_repo", target="dev")],
        [tc("call_1_1", "delete_repo", target="prod")],
        reply("done"),
    )
    registry = registry_of("admin", [counting_tool(rec, "delete_repo", per_repo)], model)
    paused = await Runner(registry).run("admin", "go")
    assert isinstance(paused, Paused)

    outcome = await Runner(registry).resume(paused.state, {"call_0_1": Approve(always=True)})

    assert isinstance(outcome, Paused), "the prod deletion must be asked about on its own"
    assert [p.call_id for p in outcome.pending] == ["call_1_1"]
    assert rec.targets("delete_repo") == ["dev"]


# == seed 002: a tool pauses with a question; the answer is its result =======================


async def test_seed002_support_agent_resumes_in_another_process(tmp_path: Path) -> None:
    effects = ExampleEffects(journal=tmp_path / "a.jsonl")
    paused = await Runner(build_registry(effects)).run(
        "support-agent", "Can I get a refund on my annual plan?", run_id="run_support"
    )
    assert isinstance(paused, Paused)
    [pending] = paused.pending
    assert pending.gate == "question"
    assert pending.question == (
        "Customer asks: 'Can I get a refund on my annual plan?'. How should I answer?"
    )
    assert (pending.severity, pending.allow_always) == ("high", False)
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text(paused.state.to_json(), encoding="utf-8")

    answer = "Yes: refund it pro rata, then close the ticket."
    decision = decision_adapter.dump_python(Answer(text=answer, decided_by="U_OPS"))
    journal = tmp_path / "b.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "resume_worker.py"),
        str(checkpoint),
        str(journal),
        json.dumps({pending.call_id: decision}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)

    assert proc.returncode == 0, stderr.decode()
    result = json.loads(stdout)
    assert result["kind"] == "succeeded"
    assert result["output"] == f"Replied to the customer: {answer}"
    [record] = result["state"]["calls"]
    assert (record["outcome"], record["result"]) == ("answered", answer)
    assert record["decision"]["decided_by"] == "U_OPS"
    # the side effect happened in the other process, with the human's answer
    assert ExampleEffects(journal=journal).all_events() == [
        {"kind": "support_reply", "answer": answer}
    ]
    assert effects.all_events() == []


def echo_answer(c: Conversation) -> ModelResponse:
    if c.turn == 0:
        return ModelResponse(
            tool_calls=[
                call("note", target="before"),
                call("ask_human", question="Which warehouse ships order 5?"),
                call("note", target="after"),
            ]
        )
    return reply(f"shipping from: {c.result('ask_human')}")


async def test_seed002_builtin_ask_human_pauses_mid_turn_and_nothing_runs_twice() -> None:
    rec = Recorder()
    registry = registry_of(
        "shipper", [counting_tool(rec, "note"), ask_human], ScriptedModel(echo_answer)
    )
    paused = await Runner(registry).run("shipper", "ship order 5")

    assert isinstance(paused, Paused)
    [pending] = paused.pending
    assert (pending.tool, pending.gate, pending.question) == (
        "ask_human",
        "question",
        "Which warehouse ships order 5?",
    )
    assert pending.severity == "medium"
    assert rec.targets("note") == ["before"]  # calls before the question ran, later ones wait

    done = await Runner(registry).resume(
        roundtrip(paused.state), {pending.call_id: Answer(text="Rotterdam")}
    )

    assert isinstance(done, Succeeded) and done.output == "shipping from: Rotterdam"
    assert rec.per_call_id() == {"call_0_1": 1, "call_0_3": 1}
    assert tool_messages(done.state) == {
        "call_0_1": "note done: before",
        "call_0_2": "Rotterdam",
        "call_0_3": "note done: after",
    }
    assert done.state.call("call_0_2").outcome == "answered"  # type: ignore[union-attr]


def test_seed002_ask_human_schema_shows_only_the_question() -> None:
    assert ask_human.name == "ask_human"
    assert list(ask_human.schema()["properties"]) == ["question"]
    assert ask_human.description == "Ask a human operator a question and wait for their answer."


@pytest.mark.parametrize(
    ("decision", "outcome", "text"),
    [
        (Reject(message="not answering that"), "rejected", "not answering that"),
        (Expired(), "expired", "Tool execution was not approved: the approval request expired."),
    ],
)
async def test_seed002_a_question_can_be_rejected_or_expire(
    decision: Decision, outcome: str, text: str
) -> None:
    registry = registry_of(
        "shipper", [counting_tool(Recorder(), "note"), ask_human], ScriptedModel(echo_answer)
    )
    paused = await Runner(registry).run("shipper", "ship order 5")
    assert isinstance(paused, Paused)

    done = await Runner(registry).resume(paused.state, {"call_0_2": decision})

    assert isinstance(done, Succeeded) and done.output == f"shipping from: {text}"
    record = done.state.call("call_0_2")
    assert record is not None and (record.outcome, record.result) == (outcome, text)


async def test_seed002_a_question_cannot_be_approved() -> None:
    registry = build_registry()
    paused = await Runner(registry).run("support-agent", "hello")
    assert isinstance(paused, Paused)
    with pytest.raises(InvalidDecisionError, match="asks a question: answer or reject it"):
        await Runner(registry).resume(paused.state, {paused.pending[0].call_id: Approve()})


HANG_PROBE = textwrap.dedent(
    """
    import asyncio, resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from agent_host.runtime.agents import Agent, AgentRegistry
    from agent_host.runtime.decisions import Approve
    from agent_host.runtime.models.scripted import ScriptedModel, call, reply
    from agent_host.runtime.pause import pause
    from agent_host.runtime.policy import Permission
    from agent_host.runtime.runner import Runner
    from agent_host.runtime.tools import tool

    def refund(order_id: str) -> str:
        pause(f"which account should order {order_id} be refunded to?")

    model = ScriptedModel.from_turns([call("refund", order_id="7")], reply("done"))
    factory = lambda: Agent(
        "a", "i", [tool(permission=Permission.ASK)(refund)], model
    )
    registry = AgentRegistry({"a": factory})

    async def main():
        first = await Runner(registry).run("a", "go")
        second = await Runner(registry).resume(
            first.state, {first.pending[0].call_id: Approve()}
        )
        print(second.kind, [(p.gate, p.question) for p in second.pending])

    asyncio.run(main())
    """
)


def test_seed002_an_approved_tool_that_asks_a_question_pauses() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", HANG_PROBE],
        capture_output=True,
        text=True,
        timeout=4,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "paused [('question', 'which account should order 7 be refunded to?')]"
    )


# == seed 003: a confidence gate on a refund =================================================


def refund_desk(rec: list[str], spy_holder: list[SpyModel]) -> AgentRegistry:
    @tool(permission=confidence_gate(0.9, severity="high"), reason="refund")
    def issue_refund(
        order_id: str, amount_usd: float, reason: str, confidence: float, ctx: ToolContext
    ) -> str:
        """Refund an order."""
        rec.append(ctx.idempotency_key)
        return f"Refunded ${amount_usd:.2f} on order {order_id}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            match = re.search(r"order (\d+) for (\d+) at ([\d.]+)", c.input)
            assert match is not None
            order, amount, confidence = match.groups()
            refund = call(
                "issue_refund",
                order_id=order,
                amount_usd=float(amount),
                reason="billed twice",
                confidence=float(confidence),
            )
            return ModelResponse(tool_calls=[refund])
        return reply(f"refund status: {c.result('issue_refund')}")

    spy = SpyModel(ScriptedModel(script))
    spy_holder.append(spy)
    return registry_of("refund-agent", [issue_refund], spy)


async def test_seed003_confident_refund_is_auto_approved() -> None:
    refunds: list[str] = []
    outcome = await Runner(refund_desk(refunds, [])).run(
        "refund-agent", "refund order 77 for 4000 at 0.95", run_id="run_hi"
    )
    assert isinstance(outcome, Succeeded)
    assert outcome.output == "refund status: Refunded $4000.00 on order 77"
    assert outcome.state.calls[0].gate == "allow"
    assert refunds == ["run_hi:call_0_1"]


@pytest.mark.parametrize(
    ("decision", "outcome", "ran", "text"),
    [
        (
            Approve(decided_by="U_REVIEWER"),
            "executed",
            1,
            "Refunded $4000.00 on order 77",
        ),
        (
            Reject(message="duplicate ticket"),
            "rejected",
            0,
            "duplicate ticket",
        ),
        (
            RequestChanges(feedback="refund $2000 only, it was a partial charge"),
            "rejected",
            0,
            "The reviewer requested changes instead of running this tool: "
            "refund $2000 only, it was a partial charge",
        ),
        (
            Expired(),
            "expired",
            0,
            "Tool execution was not approved: the approval request expired.",
        ),
    ],
    ids=["approved", "rejected", "request_changes", "expired"],
)
async def test_seed003_low_confidence_refund_waits_for_a_decision(
    decision: Decision, outcome: str, ran: int, text: str
) -> None:
    refunds: list[str] = []
    spies: list[SpyModel] = []
    paused = await Runner(refund_desk(refunds, spies)).run(
        "refund-agent", "refund order 77 for 4000 at 0.82", run_id="run_lo"
    )
    assert isinstance(paused, Paused)
    [pending] = paused.pending
    assert (pending.reason, pending.severity) == ("confidence 0.82 is below 0.90", "high")
    assert refunds == []

    # the decision arrives later as JSON (a webhook), the checkpoint from storage
    wire = json.dumps(decision_adapter.dump_python(decision, mode="json"))
    received = decision_adapter.validate_json(wire)
    done = await Runner(refund_desk(refunds, spies)).resume(
        roundtrip(paused.state), {pending.call_id: received}
    )

    assert isinstance(done, Succeeded)
    record = done.state.calls[0]
    assert (record.outcome, record.result) == (outcome, text)
    assert record.decision == decision
    assert len(refunds) == ran
    assert spies[-1].last_tool_messages() == {"call_0_1": text}  # the model saw it
    assert done.output == f"refund status: {text}"
    if "expired" in outcome:
        assert "expired" in text
