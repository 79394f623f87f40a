"""The RunState checkpoint: versioning, frozen files per version, a lossless JSON round trip."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_host.errors import CheckpointError, UnsupportedCheckpointVersion
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.checkpoint import (
    CHECKPOINT_VERSIONS,
    SCHEMA_VERSION,
    CallRecord,
    Gate,
    Outcome,
    RunState,
    RunStatus,
    call_hash,
)
from agent_host.runtime.decisions import Answer, Approve, Expired, Reject, RequestChanges
from agent_host.runtime.messages import Message, ToolCall
from agent_host.runtime.policy import Severity
from agent_host.runtime.runner import Paused, Runner, Succeeded
from tests.support.paths import FIXTURES

CHECKPOINTS = FIXTURES / "checkpoints"
FIXTURE = CHECKPOINTS / "v1.json"
FIXTURE_V2 = CHECKPOINTS / "v2.json"
FIXTURE_V3 = CHECKPOINTS / "v3.json"
FIXTURE_V4 = CHECKPOINTS / "v4.json"
FIXTURE_V5 = CHECKPOINTS / "v5.json"


_DROP = object()  # marks a key to leave out of a checkpoint document


def minimal(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema_version": 1,
        "run_id": "run_min",
        "agent": "refund-agent",
        "agent_fingerprint": "f" * 64,
        "fingerprint_parts": {},
        "input": "hi",
    }
    document.update(overrides)
    return {k: v for k, v in document.items() if v is not _DROP}


def test_current_schema_version_is_written_and_known() -> None:
    assert SCHEMA_VERSION == 5
    assert sorted(CHECKPOINT_VERSIONS) == [1, 2, 3, 4, 5]
    state = RunState.model_validate(minimal(schema_version=5))
    assert json.loads(state.to_json())["schema_version"] == 5
    # an older document is migrated as it is read, and written back as the current version
    assert RunState.from_json(json.dumps(minimal())).schema_version == 5
    assert RunState.from_json(json.dumps(minimal(schema_version=2))).hosted_state is None
    assert RunState.from_json(json.dumps(minimal(schema_version=3))).schema_version == 5
    assert RunState.from_json(json.dumps(minimal(schema_version=4))).schema_version == 5


@pytest.mark.parametrize("version", [6, 99, 0, -1, None, "1", "v1", 1.5, _DROP])
def test_unknown_or_newer_versions_are_refused(version: Any) -> None:
    text = json.dumps(minimal(schema_version=version))
    with pytest.raises(UnsupportedCheckpointVersion) as info:
        RunState.from_json(text)
    message = str(info.value)
    assert "is not one this countersign reads (known: 1, 2, 3, 4, 5)" in message
    assert "upgrade countersign" in message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", r"checkpoint is not valid JSON"),
        (b"\xff\xfe\x00", r"checkpoint is not valid JSON"),
        ("[1, 2]", r"checkpoint must be a JSON object"),
        (json.dumps(minimal(run_id=_DROP)), r"(?s)does not match schema v1.*run_id"),
        (json.dumps(minimal(status="sleeping")), r"(?s)does not match schema v1.*status"),
        (
            json.dumps(minimal(calls=[{"call_id": "c", "tool": "t"}])),
            r"does not match schema v1",
        ),
    ],
)
def test_damaged_checkpoints_raise_checkpoint_error(data: str | bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message) as info:
        RunState.from_json(data)
    assert not isinstance(info.value, UnsupportedCheckpointVersion)


# -- the frozen v1 file: an old checkpoint must stay resumable ----------------------------------


def test_frozen_v1_checkpoint_loads() -> None:
    state = RunState.from_json(FIXTURE.read_bytes())

    # read as the current version: v1 had only the model's id, kept as both ids
    assert (state.schema_version, state.run_id, state.agent, state.status) == (
        5,
        "run_fixture_v1",
        "refund-agent",
        "paused",
    )
    assert state.requested_by == "U_CUSTOMER_SUCCESS"
    assert state.context == {"channel": "C_REFUNDS"}
    [pending] = state.pending
    assert (pending.call_id, pending.tool, pending.arguments) == (
        "call_1_1",
        "issue_refund",
        {"order_id": "124", "amount": 1200.0},
    )
    assert [(c.call_id, c.model_call_id) for c in state.calls] == [
        ("call_0_1", "call_0_1"),
        ("call_1_1", "call_1_1"),
    ]
    # what a reviewer approved before an upgrade must still match the call after it
    assert pending.call_hash == call_hash(
        state.agent_fingerprint, "issue_refund", {"amount": 1200.0, "order_id": "124"}
    )
    assert build_registry().build("refund-agent").fingerprint() == state.agent_fingerprint


async def test_frozen_v1_checkpoint_resumes_to_success() -> None:
    effects = ExampleEffects()
    state = RunState.from_json(FIXTURE.read_text(encoding="utf-8"))
    [pending] = state.pending

    outcome = await Runner(build_registry(effects)).resume(
        state, {pending.call_id: Approve(call_hash=pending.call_hash, decided_by="U_LEAD")}
    )

    assert isinstance(outcome, Succeeded)
    assert outcome.output == (
        "Done. Refund issued: $1200.00 to order 124 (idempotency key run_fixture_v1:call_1_1)."
    )
    assert effects.events == [
        {"kind": "refund", "order_id": "124", "amount": 1200.0, "key": "run_fixture_v1:call_1_1"}
    ]


async def test_frozen_v1_checkpoint_can_be_rejected() -> None:
    effects = ExampleEffects()
    state = RunState.from_json(FIXTURE.read_text(encoding="utf-8"))
    outcome = await Runner(build_registry(effects)).resume(
        state, {"call_1_1": Reject(message="chargeback already filed")}
    )
    assert isinstance(outcome, Succeeded)
    assert outcome.output == ("The refund for order 124 was not approved: chargeback already filed")
    assert effects.events == []


def shape(document: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's field names, per level (not its values)."""
    return {
        "top": sorted(document),
        "calls": sorted({k for c in document["calls"] for k in c}),
        "decision": sorted({k for c in document["calls"] if c["decision"] for k in c["decision"]}),
        "messages": sorted({k for m in document["transcript"] for k in m}),
        "tool_calls": sorted(
            {k for m in document["transcript"] for t in m["tool_calls"] for k in t}
        ),
    }


def test_frozen_v2_checkpoint_keeps_the_models_ids_apart_from_the_runners() -> None:
    state = RunState.from_json(FIXTURE_V2.read_bytes())

    assert (state.schema_version, state.run_id, state.status) == (5, "run_fixture_v2", "paused")
    # read as v5: nothing of a v2 checkpoint is editable
    assert [c.editable for c in state.calls] == [[], []]
    assert [(c.call_id, c.model_call_id) for c in state.calls] == [
        ("call_0_1", "toolu_01LookupOrder"),
        ("call_1_1", "toolu_01IssueRefund"),
    ]
    assert [p.call_id for p in state.pending] == ["call_1_1"]
    assert RunState.from_json(state.to_json()) == state


async def test_frozen_v2_checkpoint_resumes_and_answers_the_model_by_its_own_ids() -> None:
    effects = ExampleEffects()
    state = RunState.from_json(FIXTURE_V2.read_text(encoding="utf-8"))
    [pending] = state.pending

    outcome = await Runner(build_registry(effects)).resume(
        state, {"call_1_1": Approve(call_hash=pending.call_hash, decided_by="U_LEAD")}
    )

    assert isinstance(outcome, Succeeded)
    assert effects.events == [
        {"kind": "refund", "order_id": "124", "amount": 1200.0, "key": "run_fixture_v2:call_1_1"}
    ]
    replies = [(m.tool_call_id, m.name) for m in outcome.state.transcript if m.role == "tool"]
    assert replies == [
        ("toolu_01LookupOrder", "lookup_order"),
        ("toolu_01IssueRefund", "issue_refund"),
    ]


async def test_a_fresh_paused_run_has_the_same_shape_as_the_frozen_file() -> None:
    """If this fails, the checkpoint format moved: bump SCHEMA_VERSION and keep v1 readable."""
    effects = ExampleEffects()
    outcome = await Runner(build_registry(effects)).run(
        "refund-agent",
        "Please refund order 124, I was billed twice.",
        run_id="run_fixture_v5",
        requested_by="U_CUSTOMER_SUCCESS",
        context={"channel": "C_REFUNDS"},
    )
    assert isinstance(outcome, Paused)
    fresh = json.loads(outcome.state.to_json())
    frozen = json.loads(FIXTURE_V5.read_text(encoding="utf-8"))
    done = await Runner(build_registry(effects)).resume(
        outcome.state, {"call_1_1": Approve(decided_by="U_LEAD")}
    )
    decided = json.loads(done.state.to_json())

    assert fresh["schema_version"] == frozen["schema_version"] == SCHEMA_VERSION
    assert shape(fresh) == shape(frozen)
    assert shape(decided)["decision"] == [
        "always",
        "call_hash",
        "comment",
        "decided_by",
        "earlier_comments",
        "edited_arguments",
        "edited_by",
        "edited_hash",
        "kind",
        "note",
        "original_arguments",
        "route_id",
        "severity",
        "standing_of",
        "via",
    ]
    assert [c["call_hash"] for c in fresh["calls"]] == [c["call_hash"] for c in frozen["calls"]]


def test_frozen_v4_checkpoint_lists_what_a_reviewer_may_edit() -> None:
    state = RunState.from_json(FIXTURE_V4.read_bytes())
    assert state.schema_version == 5  # read as v5: nothing else changed
    assert [(c.tool, c.editable) for c in state.calls] == [
        ("lookup_order", []),
        ("issue_refund", ["amount"]),
    ]
    assert RunState.from_json(state.to_json()) == state
    assert RunState.from_json(FIXTURE_V5.read_bytes()).calls == state.calls
    # a v3 checkpoint is read with nothing editable
    v3 = RunState.from_json(FIXTURE_V3.read_bytes())
    assert v3.schema_version == 5 and [c.editable for c in v3.calls] == [[], []]


async def test_resume_leaves_the_callers_state_untouched() -> None:
    state = RunState.from_json(FIXTURE.read_text(encoding="utf-8"))
    before = state.to_json()
    await Runner(build_registry()).resume(state, {"call_1_1": Approve()})
    assert state.to_json() == before
    assert state.status == "paused" and state.pending[0].decision is None


# -- property: any RunState round-trips losslessly ---------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


def json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A named function: hypothesis inspects a lambda's source to see that it recurses,
    # which fails intermittently for a lambda spread over several lines.
    return st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)


json_values = st.recursive(json_scalars, json_containers, max_leaves=8)
arguments = st.dictionaries(st.text(), json_values, max_size=4) | st.text()
hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
maybe_text = st.none() | st.text()

tool_calls = st.builds(ToolCall, id=st.text(), name=st.text(), arguments=arguments)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.text(),
    tool_calls=st.lists(tool_calls, max_size=3),
    tool_call_id=maybe_text,
    name=maybe_text,
)
common = {"decided_by": st.text(), "call_hash": st.none() | hashes}
decisions = st.one_of(
    st.builds(Approve, always=st.booleans(), **common),
    st.builds(Reject, message=st.text(), always=st.booleans(), **common),
    st.builds(RequestChanges, feedback=st.text(), **common),
    st.builds(Answer, text=st.text(), **common),
    st.builds(Expired, **common),
)
call_records = st.builds(
    CallRecord,
    call_id=st.text(),
    model_call_id=st.text(),
    tool=st.text(),
    arguments=arguments,
    call_hash=hashes,
    turn=st.integers(min_value=0, max_value=1000),
    gate=st.sampled_from(get_args(Gate)),
    reason=st.text(),
    severity=st.sampled_from([s.value for s in Severity]),
    allow_always=st.booleans(),
    question=maybe_text,
    decision=st.none() | decisions,
    outcome=st.none() | st.sampled_from(get_args(Outcome)),
    result=maybe_text,
)
run_states = st.builds(
    RunState,
    run_id=st.text(min_size=1),
    agent=st.text(min_size=1),
    agent_fingerprint=hashes,
    fingerprint_parts=st.dictionaries(st.text(), json_values, max_size=3),
    input=st.text(),
    requested_by=maybe_text,
    context=st.dictionaries(st.text(), json_values, max_size=3),
    transcript=st.lists(messages, max_size=4),
    calls=st.lists(call_records, max_size=4),
    sticky=st.dictionaries(st.text(), st.sampled_from(["approve", "reject"]), max_size=3),
    turns=st.integers(min_value=0, max_value=1000),
    status=st.sampled_from(get_args(RunStatus)),
    output=maybe_text,
    error=maybe_text,
)


@settings(max_examples=200, deadline=None)
@given(run_states)
def test_any_run_state_round_trips_losslessly(state: RunState) -> None:
    text = state.to_json()
    restored = RunState.from_json(text)

    assert restored == state
    assert restored.model_dump() == state.model_dump()
    assert RunState.from_json(text.encode()) == state
    assert restored.to_json() == text  # stable: a second trip changes nothing
    for before, after in zip(state.calls, restored.calls, strict=True):
        assert type(after.decision) is type(before.decision)
        assert after.waiting == before.waiting
    assert [c.call_id for c in restored.pending] == [c.call_id for c in state.pending]
