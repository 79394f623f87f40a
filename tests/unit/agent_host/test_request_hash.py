"""A request's stored form: written field by field (no deep copy), read back the same.

`to_hash` no longer goes through `dataclasses.asdict`; these tests hold it to what
`asdict` gives, so a field added to a request, a route, an escalated copy or a context is
stored without anyone having to remember to add it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields

from agent_host.approvals import ApprovalRequest, Route
from agent_host.approvals.context import CallContext, EarlierCall
from agent_host.approvals.requests import EscalatedCopy
from agent_host.runtime.decisions import Approve


def _request(**changes: object) -> ApprovalRequest:
    base: dict[str, object] = {
        "request_id": "req_1",
        "run_id": "run_1",
        "call_id": "call_1_1",
        "agent": "refunds",
        "tool": "issue_refund",
        "arguments": {"order": "A-1", "lines": [1, {"sku": "é"}]},
        "call_hash": "h1",
        "kind": "approval",
        "reason": "over the limit",
        "severity": "high",
        "requested_by": "U1",
        "created_at": 1.5,
        "expires_at": 2.5,
        "route": Route(destination="C1", reviewers=("U2", "S1"), quorum=2, escalate_to="C2"),
    }
    return ApprovalRequest(**{**base, **changes})  # type: ignore[arg-type]


def _as_asdict_would(request: ApprovalRequest) -> dict[str, str]:
    data = asdict(request)
    stored = {k: v for k, v in data.items() if k not in ("context", "unreadable")}
    expected = request.to_hash()
    for name in ("route", "escalations"):
        assert json.loads(expected[name]) == json.loads(json.dumps(stored[name]))
    return expected


def test_every_field_but_the_context_is_stored_as_asdict_would_store_it() -> None:
    copy = EscalatedCopy(to="S1", channel="D1", ts="1.2", link="https://x/1")
    request = _request(
        decision=Approve(decided_by="U2", call_hash="h1"),
        decided_at=3.25,
        approvals=["U2"],
        escalations=[copy],
        editable=("order",),
        allow_always=True,
        context=CallContext(said="checking"),
    )
    stored = _as_asdict_would(request)
    names = {f.name for f in fields(ApprovalRequest)} - {"context", "unreadable", "keys_missing"}
    assert set(stored) == names
    assert all(isinstance(v, str) for v in stored.values())


def test_a_stored_request_reads_back_equal() -> None:
    request = _request(escalations=[EscalatedCopy(to="U9", channel="D9", ts="9.9", link="")])
    again = ApprovalRequest.from_hash(request.to_hash())
    assert again == request
    assert again.route == request.route


def test_the_context_json_is_what_asdict_gives() -> None:
    context = CallContext(
        earlier=(EarlierCall("lookup", {"q": ["a", {"b": 1}]}, "executed", "ok"),),
        more=2,
        said="Refunding now",
    )
    assert json.loads(context.to_json()) == asdict(context) | {
        "earlier": [asdict(e) for e in context.earlier]
    }
    assert CallContext.from_json(context.to_json()) == context


def test_the_route_json_is_what_asdict_gives() -> None:
    route = Route(destination="C1", reviewers=("U2",), remind_after_seconds=60)
    assert json.loads(route.to_json()) == json.loads(json.dumps(asdict(route)))
