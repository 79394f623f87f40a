"""Sealed fields: one value each, AES-GCM bound to its run, record and field; recognisable,
never garbage when it cannot be opened; which fields of a record are sealed."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_host.approvals import ApprovalRequest, Route
from agent_host.durable.crypto import KeyRing, generate_key, kid_of
from agent_host.durable.sealed_fields import PREFIX, FieldSealer, is_sealed
from agent_host.durable.sealed_records import REQUEST_CLEAR, RUN_CLEAR, SealedRecords
from agent_host.errors import CheckpointDecryptError, SealedFieldError
from agent_host.runtime.decisions import Reject, decision_adapter

OLD = generate_key("old")
NEW = generate_key("new")
AT = {"run_id": "run_0a", "record_id": "req_0a_0001", "field": "arguments"}


def sealer(keys: str = OLD) -> FieldSealer:
    return FieldSealer(KeyRing.parse(keys))


def envelope(value: str) -> bytes:
    return base64.b64decode(value[len(PREFIX) :])


@given(st.text(min_size=1))
def test_any_text_round_trips(text: str) -> None:
    box = sealer()
    sealed = box.seal(text, **AT)
    assert is_sealed(sealed) and box.open(sealed, **AT) == text


def test_sealed_values_are_prefixed_fresh_each_time_and_empty_stays_empty() -> None:
    box = sealer()
    first, second = box.seal("refund order 123", **AT), box.seal("refund order 123", **AT)
    assert first.startswith("sealed:v1:") and first != second  # a fresh nonce each time
    assert "refund" not in first
    assert kid_of(envelope(first)) == "old"
    assert box.seal("", **AT) == ""
    assert box.open("", **AT) == ""


@pytest.mark.parametrize(
    "moved",
    [
        {"run_id": "run_0b"},
        {"record_id": "req_0a_0002"},
        {"field": "reason"},
    ],
    ids=["another run", "another request", "another field"],
)
def test_a_value_copied_to_another_run_request_or_field_does_not_open(moved: dict) -> None:
    box = sealer()
    sealed = box.seal("issue_refund 42.50 to ACME", **AT)
    with pytest.raises(SealedFieldError, match=r"failed authentication.*copied from another"):
        box.open(sealed, **(AT | moved))
    assert box.open_or_mark(sealed, **(AT | moved)).startswith("[unreadable: failed auth")


def test_checkpoint_and_field_envelopes_cannot_stand_in_for_each_other() -> None:
    ring = KeyRing.parse(OLD)
    checkpoint = ring.encrypt(b"state", run_id="run_0a", request_id="req_0a_0001")
    with pytest.raises(SealedFieldError):
        ring.decrypt_field(checkpoint, run_id="run_0a", record_id="req_0a_0001", field="")
    field = ring.encrypt_field(b"state", run_id="run_0a", record_id="req_0a_0001", field="")
    with pytest.raises(CheckpointDecryptError):
        ring.decrypt(field, run_id="run_0a", request_id="req_0a_0001")


def test_a_value_without_the_prefix_is_read_as_written_before_sealing() -> None:
    box = sealer()
    assert box.open('{"order_id": "123"}', **AT) == '{"order_id": "123"}'
    assert box.needs_resealing('{"order_id": "123"}')


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (PREFIX + "not base64!", "not valid base64"),
        (PREFIX + base64.b64encode(b"\x01").decode(), "truncated"),
        (PREFIX + base64.b64encode(b"\x07\x00" + b"x" * 40).decode(), "envelope version 7"),
    ],
)
def test_a_damaged_value_says_what_is_wrong(value: str, says: str) -> None:
    box = sealer()
    with pytest.raises(SealedFieldError, match=says):
        box.open(value, **AT)
    assert box.open_or_mark(value, **AT) == f"[unreadable: {_reason(box, value)}]"
    assert box.needs_resealing(value)  # so rotation looks at it, and reports it


def _reason(box: FieldSealer, value: str) -> str:
    try:
        box.open(value, **AT)
    except SealedFieldError as exc:
        return str(exc)
    raise AssertionError("opened")


def test_a_key_missing_from_the_ring_is_named() -> None:
    sealed = sealer(OLD).seal("secret", **AT)
    assert sealer(NEW).open_or_mark(sealed, **AT) == (
        "[unreadable: sealed under key 'old', which is not in COUNTERSIGN_ENCRYPTION_KEYS]"
    )


def test_resealing_moves_a_value_to_the_active_key() -> None:
    rotated = sealer(f"{NEW},{OLD}")
    legacy = sealer(OLD).seal("secret", **AT)
    assert rotated.needs_resealing(legacy)
    fresh = rotated.reseal(legacy, **AT)
    assert kid_of(envelope(fresh)) == "new" and not rotated.needs_resealing(fresh)
    assert sealer(NEW).open(fresh, **AT) == "secret"
    assert rotated.reseal("plain, from before sealing", **AT).startswith(PREFIX)
    with pytest.raises(SealedFieldError):
        sealer(NEW).reseal(legacy, **AT)


def a_request(**changes: object) -> ApprovalRequest:
    request = ApprovalRequest(
        request_id="req_0a_0001",
        run_id="run_0a",
        call_id="call_1_1",
        agent="refund-agent",
        tool="issue_refund",
        arguments={"order_id": "123", "amount": 42.5},
        call_hash="ab" * 32,
        kind="approval",
        reason="moves money back to the customer",
        severity="high",
        requested_by="U0REQUESTER",
        created_at=1.0,
        expires_at=2.0,
        route=Route(destination="C0APPROVALS"),
        question="",
        decision=Reject(decided_by="U0REVIEWER", message="amount looks wrong"),
        status="rejected",  # type: ignore[arg-type]
        decided_by="U0REVIEWER",
    )
    for name, value in changes.items():
        setattr(request, name, value)
    return request


def test_exactly_the_content_of_a_request_is_sealed_and_anything_new_is_sealed_too() -> None:
    records = SealedRecords(sealer())
    fields = a_request().to_hash() | {"quorum": "1"}
    sealed = records.seal_request(fields)
    assert {n for n, v in sealed.items() if is_sealed(v)} == {
        "arguments",
        "reason",
        "decision",
    }  # `question` is empty here, and empty stays empty
    assert set(fields) - REQUEST_CLEAR == {"arguments", "reason", "question", "decision"}
    assert is_sealed(records.seal_request(fields | {"summary": "earlier calls"})["summary"])
    assert "moves money" not in json.dumps(sealed) and "looks wrong" not in json.dumps(sealed)

    opened, unreadable, _ = records.open_request(sealed)
    assert unreadable == {}
    assert ApprovalRequest.from_hash(opened) == a_request()


def test_exactly_the_content_of_a_run_is_sealed() -> None:
    records = SealedRecords(sealer())
    fields = {
        "run_id": "run_0a",
        "agent": "refund-agent",
        "input": "refund order 123",
        "requested_by": "U0REQUESTER",
        "status": "running",
        "pause_id": "",
        "created_at": "1.0",
        "updated_at": "1.0",
    }
    sealed = records.seal_run(fields)
    assert [n for n, v in sealed.items() if v != fields[n]] == ["input"]
    assert set(fields) - RUN_CLEAR == {"input"}
    assert records.open_run(sealed) == (fields, {}, frozenset())


def test_an_unreadable_field_of_a_request_stands_in_as_a_mark_the_request_still_parses() -> None:
    records = SealedRecords(sealer())
    sealed = records.seal_request(a_request().to_hash() | {"quorum": "1"})
    other = records.seal_request(a_request(request_id="req_0a_0002").to_hash())
    moved = sealed | {"arguments": other["arguments"], "decision": other["decision"]}

    opened, unreadable, _ = records.open_request(moved)
    request = ApprovalRequest.from_hash(opened)

    assert set(unreadable) == {"arguments", "decision"}
    assert request.arguments == f"[unreadable: {unreadable['arguments']}]"
    assert request.reason == "moves money back to the customer"
    assert isinstance(request.decision, Reject)
    assert request.decision.message == f"[unreadable: {unreadable['decision']}]"
    assert request.decision.decided_by == "U0REVIEWER"


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        ("approved", "approve", "note"),
        ("changes_requested", "request_changes", "feedback"),
        ("answered", "answer", "text"),
        ("expired", "expired", "note"),
    ],
)
def test_an_unreadable_decision_keeps_the_recorded_kind(status: str, kind: str, words: str) -> None:
    records = SealedRecords(sealer())
    raw = a_request().to_hash() | {"status": status}
    raw = records.seal_request(raw) | {"decision": PREFIX + "garbage"}
    opened, unreadable, _ = records.open_request(raw)
    decision = decision_adapter.validate_json(opened["decision"])
    assert decision.kind == kind
    assert getattr(decision, words) == "[unreadable: the sealed value is not valid base64]"
    assert "decision" in unreadable


def test_audit_details_open_as_the_value_they_repeat() -> None:
    records = SealedRecords(sealer())
    decision = records.seal_decision("run_0a", "req_0a_0001", '{"kind": "reject"}')
    output = records.seal_run_value("run_0a", "output", "Done. Refund issued.")
    error = records.seal_run_value("run_0a", "error", "the tool failed")
    entry = {"event": "rejected", "request_id": "req_0a_0001", "detail": decision}
    assert records.open_audit_entry("run_0a", entry)["detail"] == '{"kind": "reject"}'
    for sealed, plain in ((output, "Done. Refund issued."), (error, "the tool failed")):
        finished = {"event": "succeeded", "detail": sealed}
        assert records.open_audit_entry("run_0a", finished)["detail"] == plain
    clear = {"event": "approval", "request_id": "req_0a_0001", "detail": "1 of 2"}
    assert records.open_audit_entry("run_0a", clear) == clear
    elsewhere = records.open_audit_entry("run_0b", {"event": "succeeded", "detail": output})
    assert elsewhere["detail"].startswith("[unreadable: failed authentication")
