"""The permission policy: ALLOW / DENY / ASK, per-call functions, operator rules, the gate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agent_host.errors import PolicyRuleError
from agent_host.examples import build_registry
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.policy import (
    Permission,
    Severity,
    Verdict,
    confidence_gate,
    describe_permission,
    load_rules,
)
from agent_host.runtime.runner import Paused, Runner, Succeeded
from tests.support.agents import Recorder, SpyModel, counting_tool, registry_of, scripted, tc

# -- constant permissions, inside a run ----------------------------------------------------


async def test_allow_runs_without_pausing() -> None:
    rec = Recorder()
    model = scripted([tc("call_0_1", "read", target="a")], reply("done"))
    outcome = await Runner(registry_of("a", [counting_tool(rec, "read")], model)).run("a", "go")

    assert isinstance(outcome, Succeeded)
    assert outcome.state.calls[0].gate == "allow"
    assert rec.invocations == [("read", "call_0_1", "a")]


async def test_deny_never_runs_and_tells_the_model_why() -> None:
    rec = Recorder()
    wipe = counting_tool(rec, "wipe", Permission.DENY, reason="wiping is off in this workspace")
    spy = SpyModel(
        scripted(
            [tc("call_0_1", "wipe", target="db"), tc("call_0_2", "read", target="a")],
            reply("gave up"),
        )
    )
    registry = registry_of("a", [wipe, counting_tool(rec, "read")], spy)
    outcome = await Runner(registry).run("a", "go")

    assert isinstance(outcome, Succeeded) and outcome.output == "gave up"
    denied = outcome.state.call("call_0_1")
    assert denied is not None
    assert (denied.gate, denied.outcome) == ("deny", "denied")
    assert denied.result == "Tool wipe is not permitted: wiping is off in this workspace."
    assert rec.invocations == [("read", "call_0_2", "a")]  # wipe never ran
    assert spy.last_tool_messages()["call_0_1"] == denied.result


async def test_a_lone_denied_call_still_reaches_the_model() -> None:
    rec = Recorder()
    wipe = counting_tool(rec, "wipe", Permission.DENY, reason="no")
    spy = SpyModel(scripted([tc("c1", "wipe", target="db")], reply("gave up")))
    outcome = await Runner(registry_of("a", [wipe], spy)).run("a", "go")

    assert isinstance(outcome, Succeeded) and rec.count() == 0
    assert spy.last_tool_messages() == {"c1": "Tool wipe is not permitted: no."}


async def test_ask_pauses_and_carries_reason_and_severity_onto_the_pending_call() -> None:
    rec = Recorder()
    refund = counting_tool(
        rec, "refund", Permission.ASK, reason="moves money back to the customer", severity="high"
    )
    model = scripted([tc("call_0_1", "refund", target="order 9")], reply("done"))
    outcome = await Runner(registry_of("a", [refund], model)).run("a", "go")

    assert isinstance(outcome, Paused)
    [pending] = outcome.pending
    assert (pending.call_id, pending.tool, pending.arguments) == (
        "call_0_1",
        "refund",
        {"target": "order 9"},
    )
    assert (pending.gate, pending.reason, pending.severity) == (
        "ask",
        "moves money back to the customer",
        "high",
    )
    assert pending.allow_always is True
    assert outcome.state.status == "paused"
    assert rec.count() == 0


def test_default_reasons_and_severity_of_a_constant_permission() -> None:
    rec = Recorder()
    ask = counting_tool(rec, "purge", Permission.ASK).judge({"target": "x"}, {})
    assert ask == Verdict(Permission.ASK, "purge requires approval", Severity.MEDIUM)
    allow = counting_tool(rec, "read").judge({"target": "x"}, {})
    assert allow.permission is Permission.ALLOW
    pinned = counting_tool(rec, "purge", Permission.ASK, allow_always=False)
    assert pinned.judge({"target": "x"}, {}).allow_always is False


# -- per-call permission functions ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "permission"),
    [
        ("scratch", Permission.ALLOW),
        ("prod-db", Permission.ASK),
        ("my-prod", Permission.ASK),
        ("production", Permission.ASK),  # contains "prod"
        ("staging", Permission.ALLOW),
    ],
)
def test_repo_admin_asks_only_for_names_containing_prod(name: str, permission: Permission) -> None:
    delete_repo = build_registry().build("repo-admin").tool("delete_repo")
    assert delete_repo is not None
    verdict = delete_repo.judge({"name": name}, {})
    assert verdict.permission is permission
    if permission is Permission.ASK:
        assert verdict.reason == "deletes a production repository"
        assert verdict.severity is Severity.CRITICAL
        assert verdict.allow_always is False


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (True, Verdict(Permission.ASK, "gated requires approval", Severity.HIGH)),
        (False, Verdict(Permission.ALLOW)),
        (Permission.ASK, Verdict(Permission.ASK, "gated requires approval", Severity.HIGH)),
        (Permission.DENY, Verdict(Permission.DENY, "gated requires approval", Severity.HIGH)),
        (Verdict.ask("own reason", "low"), Verdict(Permission.ASK, "own reason", Severity.LOW)),
        (
            Verdict(Permission.ASK, severity=Severity.CRITICAL),
            Verdict(Permission.ASK, "gated requires approval", Severity.CRITICAL),
        ),
    ],
)
def test_permission_function_results_are_normalised(returned: Any, expected: Verdict) -> None:
    gated = counting_tool(Recorder(), "gated", lambda a, c: returned, severity="high")
    assert gated.judge({"target": "x"}, {}) == expected


def broken_policy(arguments: Any, context: Any) -> Any:
    raise KeyError("dry_run")


@pytest.mark.parametrize(
    "permission",
    [broken_policy, lambda a, c: None, lambda a, c: "deny"],
    ids=["raises", "returns None", "returns text"],
)
async def test_a_permission_function_that_fails_sends_the_call_to_a_person(
    permission: Any,
) -> None:
    """A policy that raises, or returns no verdict, crashed the whole turn (retried, the
    model asked again each time): the call now goes to a person, at high severity, and
    nothing of the turn runs before they decide."""
    rec = Recorder()
    model = scripted([tc("call_0_1", "gated", target="a")], reply("done"))
    tools = [counting_tool(rec, "gated", permission)]

    outcome = await Runner(registry_of("a", tools, model)).run("a", "go")

    assert isinstance(outcome, Paused), outcome
    [pending] = outcome.pending
    assert pending.severity == "high" and not pending.allow_always
    assert "policy could not judge these arguments" in pending.reason
    assert rec.invocations == []


async def test_permission_function_sees_arguments_and_run_context() -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def who_asks(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
        seen.append((dict(arguments), dict(context)))
        return context.get("requested_by") != "U_ADMIN"

    rec = Recorder()
    registry = registry_of(
        "a",
        [counting_tool(rec, "deploy", who_asks)],
        scripted([tc("c1", "deploy", target="web")], reply("ok")),
    )
    admin = await Runner(registry).run(
        "a", "go", run_id="r1", requested_by="U_ADMIN", context={"team": "infra"}
    )
    other = await Runner(registry).run("a", "go", run_id="r2", requested_by="U_OTHER")

    assert isinstance(admin, Succeeded) and isinstance(other, Paused)
    assert seen[0] == (
        {"target": "web"},
        {"team": "infra", "run_id": "r1", "requested_by": "U_ADMIN"},
    )
    assert seen[1][1] == {"run_id": "r2", "requested_by": "U_OTHER"}
    assert rec.count() == 1


# -- operator rules -------------------------------------------------------------------------

RULES = """
rules:
  - tool: "issue_refund"
    when: {amount: {gt: 100}}
    permission: ask
    severity: high
    reason: "refunds over 100 need a second pair of eyes"
  - tool: "issue_refund"
    permission: allow
  - tool: "delete_*"
    agent: "janitor"
    when: {target: {matches: "^/tmp/"}}
    permission: allow
    reason: "scratch files"
  - tool: "delete_*"
    when: {target: {contains: "prod"}}
    permission: deny
    reason: "never delete prod"
"""


@pytest.mark.parametrize(
    ("agent", "tool", "arguments", "expected"),
    [
        ("any", "issue_refund", {"amount": 250}, (Permission.ASK, Severity.HIGH)),
        ("any", "issue_refund", {"amount": "250"}, (Permission.ASK, Severity.HIGH)),
        ("any", "issue_refund", {"amount": 100}, (Permission.ALLOW, Severity.MEDIUM)),
        ("any", "issue_refund", {}, (Permission.ALLOW, Severity.MEDIUM)),  # condition unmet
        ("any", "issue_refund", {"amount": "lots"}, (Permission.ALLOW, Severity.MEDIUM)),
        ("janitor", "delete_file", {"target": "/tmp/prod.log"}, (Permission.ALLOW, None)),
        ("other", "delete_file", {"target": "/tmp/prod.log"}, (Permission.DENY, None)),
        ("janitor", "delete_repo", {"target": "prod-db"}, (Permission.DENY, None)),
        ("janitor", "delete_repo", {"target": "dev-db"}, None),
        ("any", "lookup_order", {"amount": 1000}, None),
    ],
)
def test_rules_first_match_wins(
    agent: str, tool: str, arguments: dict[str, Any], expected: Any
) -> None:
    verdict = load_rules(RULES).first_match(agent, tool, arguments)
    if expected is None:
        assert verdict is None
        return
    assert verdict is not None
    permission, severity = expected
    assert verdict.permission is permission
    if severity is not None:
        assert verdict.severity is severity


def test_rule_reasons_default_to_naming_the_rule() -> None:
    rules = load_rules(RULES)
    over = rules.first_match("a", "issue_refund", {"amount": 101})
    under = rules.first_match("a", "issue_refund", {"amount": 99})
    assert over is not None and over.reason == "refunds over 100 need a second pair of eyes"
    assert under is not None and under.reason == "operator rule for issue_refund"


@pytest.mark.parametrize(
    ("when", "value", "matches"),
    [
        ("{equals: 5}", 5, True),
        ("5", 5, True),  # a bare value means equals
        ("5", 6, False),
        ("{not_equals: eu}", "us", True),
        ("{not_equals: eu}", "eu", False),
        ("{in: [eu, uk]}", "uk", True),
        ("{in: [eu, uk]}", "us", False),
        ("{gte: 10}", 10, True),
        ("{lt: 10}", 10, False),
        ("{lte: 10}", 10.0, True),
        ("{contains: ab}", "xaby", True),
        ("{matches: '^a.c$'}", "abc", True),
        ("{matches: '^a.c$'}", "abcd", False),
        ("{gt: 1, lt: 3}", 2, True),  # several operators on one argument: all must hold
        ("{gt: 1, lt: 3}", 3, False),
    ],
)
def test_rule_operators(when: str, value: Any, matches: bool) -> None:
    rules = load_rules(f"rules:\n  - tool: t\n    permission: deny\n    when: {{x: {when}}}\n")
    assert (rules.first_match("a", "t", {"x": value}) is not None) is matches


async def test_rules_tighten_an_allow_tool_to_ask_when_the_argument_condition_holds() -> None:
    rules = load_rules(
        "rules:\n"
        "  - tool: transfer\n"
        "    when: {target: {matches: '^big'}}\n"
        "    permission: ask\n"
        "    severity: critical\n"
        "    reason: big transfers need sign-off\n"
    )
    rec = Recorder()
    transfer = counting_tool(rec, "transfer")  # ALLOW by itself

    big = registry_of("a", [transfer], scripted([tc("c1", "transfer", target="big-1")]), rules)
    small = registry_of(
        "a", [transfer], scripted([tc("c1", "transfer", target="small")], reply("ok")), rules
    )
    paused = await Runner(big).run("a", "go")
    done = await Runner(small).run("a", "go")

    assert isinstance(paused, Paused)
    assert (paused.pending[0].reason, paused.pending[0].severity) == (
        "big transfers need sign-off",
        "critical",
    )
    assert isinstance(done, Succeeded)
    assert rec.targets("transfer") == ["small"]


async def test_rules_relax_an_ask_tool_to_allow() -> None:
    rules = load_rules(
        "rules:\n  - tool: restart\n    when: {target: staging}\n    permission: allow\n"
    )
    rec = Recorder()
    restart = counting_tool(rec, "restart", Permission.ASK)
    model = scripted(
        [tc("call_0_1", "restart", target="staging"), tc("call_0_2", "restart", target="prod")]
    )
    outcome = await Runner(registry_of("a", [restart], model, rules)).run("a", "go")

    assert isinstance(outcome, Paused)
    gates = {c.call_id: c.gate for c in outcome.state.calls}
    assert gates == {"call_0_1": "allow", "call_0_2": "ask"}
    assert [p.call_id for p in outcome.pending] == ["call_0_2"]
    assert rec.count() == 0  # the turn pauses as a whole: the relaxed call waits too


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rules: [", r"my-rules.yaml: not valid YAML"),
        ("just a string", r"my-rules.yaml: expected a top-level 'rules:' list"),
        ("rules: {tool: x}", r"expected a top-level 'rules:' list"),
        ("rules:\n  - permission: ask\n", r"my-rules.yaml: rule 1: each rule needs 'tool'"),
        ("rules:\n  - tool: x\n", r"rule 1: each rule needs 'tool' and 'permission'"),
        (
            "rules:\n  - {tool: x, permission: ask}\n  - {tool: y, permission: maybe}\n",
            r"rule 2: 'maybe' is not a valid Permission; permission is one of allow/deny/ask",
        ),
        (
            "rules:\n  - {tool: x, permission: ask, severity: urgent}\n",
            r"rule 1: 'urgent' is not a valid Severity; .*severity one of low/medium/high",
        ),
        (
            "rules:\n  - {tool: x, permission: ask, when: {amount: {bigger: 3}}}\n",
            r"rule 1: unknown operator 'bigger'; use one of contains, equals, gt, gte, in, ",
        ),
        (
            "rules:\n  - {tool: x, permission: ask, when: [amount]}\n",
            r"rule 1: 'when' maps argument names to conditions",
        ),
    ],
)
def test_malformed_rules_raise_policy_rule_error_saying_where(text: str, message: str) -> None:
    with pytest.raises(PolicyRuleError, match=message) as info:
        load_rules(text, source="my-rules.yaml")
    assert str(info.value).startswith("my-rules.yaml")


def test_shape_errors_show_an_example_rule() -> None:
    with pytest.raises(PolicyRuleError) as info:
        load_rules("rules: 3")
    assert 'tool: "issue_refund"' in str(info.value)
    assert "permission: ask" in str(info.value)


def test_empty_rules_file_is_refused_rather_than_silently_allowing() -> None:
    with pytest.raises(PolicyRuleError):
        load_rules("")


def test_empty_rules_list_is_an_empty_rule_set() -> None:
    assert load_rules("rules: []").rules == ()


def test_misspelt_rule_keys_are_refused() -> None:
    with pytest.raises(PolicyRuleError, match="wehn"):
        load_rules(
            "rules:\n  - tool: refund\n    wehn: {amount: {lt: 10}}\n    permission: allow\n"
        )


@pytest.mark.parametrize("condition", ["{gt: lots}", "{matches: '['}", "{in: 5}"])
def test_bad_operands_are_refused_when_loading(condition: str) -> None:
    with pytest.raises(PolicyRuleError, match="rule 1"):
        load_rules(f"rules:\n  - tool: t\n    permission: ask\n    when: {{x: {condition}}}\n")


async def test_operator_rule_keeps_a_tools_allow_always_false() -> None:
    rules = load_rules("rules:\n  - tool: wipe\n    permission: ask\n    severity: critical\n")
    rec = Recorder()
    wipe = counting_tool(rec, "wipe", Permission.ASK, allow_always=False)
    model = scripted([tc("c1", "wipe", target="a")], reply("ok"))
    outcome = await Runner(registry_of("a", [wipe], model, rules)).run("a", "go")

    assert isinstance(outcome, Paused)
    assert outcome.pending[0].severity == "critical"
    assert outcome.pending[0].allow_always is False


# -- the confidence gate (seed 003) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "context", "permission", "reason"),
    [
        ({"confidence": 0.95}, {}, Permission.ALLOW, "confidence 0.95 >= 0.90"),
        ({"confidence": 0.9}, {}, Permission.ALLOW, "confidence 0.90 >= 0.90"),
        ({"confidence": 1}, {}, Permission.ALLOW, "confidence 1.00 >= 0.90"),
        ({"confidence": 0.82}, {}, Permission.ASK, "confidence 0.82 is below 0.90"),
        ({"confidence": 0.0}, {}, Permission.ASK, "confidence 0.00 is below 0.90"),
        ({}, {}, Permission.ASK, "confidence unknown is below 0.90"),
        ({"confidence": "high"}, {}, Permission.ASK, "confidence unknown is below 0.90"),
        ({}, {"confidence": 0.99}, Permission.ALLOW, "confidence 0.99 >= 0.90"),
        ({"confidence": 0.5}, {"confidence": 0.99}, Permission.ASK, "confidence 0.50 is below"),
    ],
)
def test_confidence_gate(
    arguments: dict[str, Any], context: dict[str, Any], permission: Permission, reason: str
) -> None:
    verdict = confidence_gate(0.9, severity="high")(arguments, context)
    assert isinstance(verdict, Verdict)
    assert verdict.permission is permission
    assert verdict.reason.startswith(reason)
    if permission is Permission.ASK:
        assert verdict.severity is Severity.HIGH


def test_confidence_gate_reads_a_custom_field_and_names_its_threshold() -> None:
    gate = confidence_gate(0.75, field="certainty")
    allowed = gate({"certainty": 0.8, "confidence": 0.1}, {})
    assert isinstance(allowed, Verdict) and allowed.permission is Permission.ALLOW
    # the threshold is part of the policy description, so changing it changes the fingerprint
    assert describe_permission(gate).endswith("confidence_gate(0.75, 'certainty')")
    assert describe_permission(confidence_gate(0.9)) != describe_permission(gate)


def test_describe_permission_of_constants_and_functions() -> None:
    def my_policy(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
        return True

    assert describe_permission(Permission.ASK) == "ask"
    assert describe_permission(my_policy) == (
        f"{__name__}.test_describe_permission_of_constants_and_functions.<locals>.my_policy"
    )


def test_severity_rank_orders_levels() -> None:
    assert [s.rank for s in Severity] == [0, 1, 2, 3]
    assert Severity.CRITICAL.rank > Severity.HIGH.rank > Severity.MEDIUM.rank
