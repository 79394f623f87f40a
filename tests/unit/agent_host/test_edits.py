"""Edit, then approve, in the approval domain: which tools opt in, the fields a tool's JSON
schema gives, and the checks an edit must pass before it may be recorded (the tool's
validation, then the policy again: never a higher severity, another route or a denial)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent_host.approvals import ApprovalRequest, ArgumentEditor, Route
from agent_host.approvals.edits import EditableField, editable_fields, field_of
from agent_host.errors import InvalidArguments, ToolDefinitionError
from agent_host.examples import ExampleEffects
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.tools import tool
from tests.support.edit_agents import PAYOUT_AGENT, SANCTIONED, with_payouts

ORIGINAL = {
    "vendor": "acme",
    "amount": 250.0,
    "currency": "EUR",
    "installments": 1,
    "speed": "standard",
    "notify": False,
    "memo": {"invoice": "INV-7"},
}


class SeverityRoutes:
    """Critical calls go to their own route; everything else to `ops`."""

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        if severity == "critical":
            return Route(route_id="critical", destination="C-CRIT")
        return Route(route_id="ops", destination="C-OPS")


class OneRoute:
    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return Route(route_id="ops", destination="C-OPS")


def editor(router: Any = None) -> tuple[ArgumentEditor, str]:
    registry = with_payouts(ExampleEffects())
    agents: dict[str, Any] = {}

    def lookup(name: str) -> Any:
        if name not in agents:
            agent = registry.build(name)
            agents[name] = (agent, agent.fingerprint())
        return agents[name]

    _, fingerprint = lookup(PAYOUT_AGENT)
    return ArgumentEditor(lookup, router or OneRoute()), fingerprint


def payout_request(fingerprint: str, **changes: Any) -> ApprovalRequest:
    request = ApprovalRequest(
        request_id="req_abc123_1",
        run_id="run_abc123",
        call_id="call_0_1",
        agent=PAYOUT_AGENT,
        tool="pay_vendor",
        arguments=dict(ORIGINAL),
        call_hash=call_hash(fingerprint, "pay_vendor", ORIGINAL),
        kind="approval",
        reason="pays a vendor",
        severity="high",
        requested_by="U0REQUESTER",
        created_at=0.0,
        expires_at=3600.0,
        route=Route(route_id="ops", destination="C-OPS"),
        editable=tuple(ORIGINAL),
    )
    return replace(request, **changes)


# -- which tools opt in -----------------------------------------------------------------------


def test_a_tool_opts_in_for_every_argument_or_for_some() -> None:
    def pay(vendor: str, amount: float) -> str:
        return vendor

    assert tool(pay).editable == ()
    assert tool(editable=True)(pay).editable == ("vendor", "amount")
    assert tool(editable=["amount"])(pay).editable == ("amount",)
    assert tool(editable="amount")(pay).editable == ("amount",)  # one name, not its letters
    with pytest.raises(ToolDefinitionError, match=r"'amont', which are not its arguments"):
        tool(editable=["amont"])(pay)


def test_invalid_arguments_name_the_argument_at_fault() -> None:
    editor_, _ = editor()
    agent, _ = editor_.agents(PAYOUT_AGENT)
    [pay] = agent.tools
    with pytest.raises(InvalidArguments) as info:
        pay.validate({**ORIGINAL, "amount": "a lot", "memo": {"invoice": 7}})
    assert set(info.value.problems) == {"amount", "memo"}
    assert "invoice" in info.value.problems["memo"]


# -- schema to fields -------------------------------------------------------------------------


def test_each_argument_gets_the_field_its_schema_calls_for() -> None:
    editor_, _ = editor()
    agent, _ = editor_.agents(PAYOUT_AGENT)
    [pay] = agent.tools
    fields = {f.name: f for f in editable_fields(pay, list(pay.editable))}
    assert [f.name for f in fields.values()] == list(ORIGINAL)  # the tool's own order
    assert fields["vendor"] == EditableField("vendor", "text", required=True)
    assert fields["amount"].kind == "number" and fields["amount"].required
    assert fields["currency"].kind == "choice" and fields["currency"].choices == ("EUR", "USD")
    assert fields["installments"].kind == "integer" and not fields["installments"].required
    # an enum class is a $ref to $defs
    assert fields["speed"].kind == "choice" and fields["speed"].choices == ("standard", "same_day")
    assert fields["notify"].kind == "boolean"
    assert fields["memo"].kind == "json" and fields["memo"].nullable


@pytest.mark.parametrize(
    ("schema", "kind", "nullable"),
    [
        ({"type": "string"}, "text", False),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "text", True),
        ({"type": ["integer", "null"]}, "integer", True),
        ({"type": "number", "minimum": 0, "maximum": 10}, "number", False),
        ({"const": "only"}, "choice", False),
        ({"type": "array", "items": {"type": "string"}}, "json", False),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "json", False),
        ({"$ref": "#/$defs/Nope"}, "json", False),  # a broken reference: edited as JSON
        ({}, "json", False),
    ],
)
def test_schema_shapes_become_fields(schema: dict[str, Any], kind: str, nullable: bool) -> None:
    field = field_of("x", schema, {}, required=False)
    assert (field.kind, field.nullable) == (kind, nullable)


def test_number_bounds_are_kept() -> None:
    field = field_of("n", {"type": "number", "minimum": 0, "maximum": 10}, {}, required=True)
    assert (field.minimum, field.maximum) == (0.0, 10.0)


def test_only_the_requests_editable_arguments_are_offered() -> None:
    editor_, fingerprint = editor()
    form = editor_.form(payout_request(fingerprint, editable=("amount", "memo")))
    assert not isinstance(form, str)
    assert [f.name for f in form.fields] == ["amount", "memo"]
    assert form.arguments == ORIGINAL


# -- the checks -------------------------------------------------------------------------------


async def test_a_valid_edit_is_recorded_with_the_edited_calls_hash() -> None:
    editor_, fingerprint = editor()
    request = payout_request(fingerprint)
    check = await editor_.check(request, {"amount": 200, "notify": True})
    assert check.ok and check.changed
    edited = {**ORIGINAL, "amount": 200.0, "notify": True}
    assert check.arguments == edited
    assert check.edited_hash == call_hash(fingerprint, "pay_vendor", edited)
    assert check.edited_hash != request.call_hash


async def test_an_edit_that_changes_nothing_is_a_plain_approval() -> None:
    editor_, fingerprint = editor()
    check = await editor_.check(payout_request(fingerprint), {"amount": 250})
    assert check.ok and not check.changed


async def test_an_edit_that_does_not_fit_the_tool_is_refused_per_argument() -> None:
    editor_, fingerprint = editor()
    check = await editor_.check(
        payout_request(fingerprint), {"currency": "GBP", "memo": {"invoice": 7}}
    )
    assert not check.ok and set(check.errors) == {"currency", "memo"}
    nan = await editor_.check(payout_request(fingerprint), {"amount": float("nan")})
    assert set(nan.errors) == {"amount"}


async def test_only_editable_arguments_may_change() -> None:
    editor_, fingerprint = editor()
    request = payout_request(fingerprint, editable=("amount",))
    check = await editor_.check(request, {"vendor": "other", "amount": 10})
    assert check.errors == {"vendor": "pay_vendor does not let a reviewer edit vendor"}
    unknown = await editor_.check(request, {"extra": 1})
    assert set(unknown.errors) == {"extra"}
    same = await editor_.check(request, {"vendor": "acme", "amount": 10})  # unchanged: fine
    assert same.ok and same.changed
    # One JSON number however it is written (250 from JavaScript for 250.0): no change.
    # A flag where a number was is another value, though Python calls True equal to 1.
    fixed = payout_request(fingerprint, editable=("vendor",))
    assert (await editor_.check(fixed, {"amount": 250, "vendor": "acme"})).ok
    one = {**ORIGINAL, "amount": 1}
    counted = payout_request(
        fingerprint,
        editable=("vendor",),
        arguments=one,
        call_hash=call_hash(fingerprint, "pay_vendor", one),
    )
    as_flag = await editor_.check(counted, {"amount": True})
    assert as_flag.errors == {"amount": "pay_vendor does not let a reviewer edit amount"}


async def test_an_edit_never_raises_the_severity() -> None:
    editor_, fingerprint = editor()
    check = await editor_.check(payout_request(fingerprint), {"amount": 5000})
    assert not check.ok and not check.errors
    assert "needs critical severity, above this request's high" in check.refusal


async def test_an_edit_never_reaches_another_route() -> None:
    editor_, fingerprint = editor(SeverityRoutes())
    lower = payout_request(fingerprint, severity="critical", route=Route(route_id="critical"))
    check = await editor_.check(lower, {"amount": 10})  # high: routed to ops, not here
    assert "would go to route ops, not this request's critical" in check.refusal


async def test_an_edit_the_policy_denies_is_refused() -> None:
    editor_, fingerprint = editor()
    check = await editor_.check(payout_request(fingerprint), {"vendor": SANCTIONED})
    assert "the policy denies the edited call (this vendor is sanctioned)" in check.refusal


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"kind": "question"}, "not a question"),
        ({"origin": "external"}, "runs elsewhere"),
        ({"editable": ()}, "does not let a reviewer edit"),
        ({"route": Route(route_id="ops", quorum=2)}, "needs 2 approvals"),
        ({"agent": "no-such-agent"}, "not known here"),
        ({"call_hash": "0" * 64}, "the agent changed"),
    ],
)
async def test_requests_that_cannot_be_edited_say_why(changes: dict[str, Any], words: str) -> None:
    editor_, fingerprint = editor()
    request = payout_request(fingerprint, **changes)
    check = await editor_.check(request, {"amount": 10})
    assert words in check.refusal
    form = editor_.form(request)
    assert isinstance(form, str) and words in form


async def test_edited_arguments_must_be_an_object_and_bounded() -> None:
    editor_, fingerprint = editor()
    request = payout_request(fingerprint)
    assert "JSON object" in (await editor_.check(request, ["amount", 1])).refusal
    huge = await editor_.check(request, {"vendor": "x" * 70_000})
    assert "larger than" in huge.refusal
