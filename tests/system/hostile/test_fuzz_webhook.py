"""Hostile traffic on `POST /api/v1/webhooks/approval-response`, over real HTTP on loopback.

Missing, wrong, repeated or malformed `X-Webhook-Signature` headers get 401 and change
nothing; correctly signed bodies that are not a valid decision on a pending request (not
JSON, not an object, nested too deeply, a request that does not exist, a decided request,
a decision outside the three allowed) get a 4xx, or 200 `already_processed`, and change
nothing; a valid signed decision is applied once however often it is replayed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from .harness import Header, Hostile, Snapshot, fuzz_settings, http, webhook_signature
from .strategies import (
    content_types,
    deep_json,
    hexes,
    json_values,
    oversized,
    raw_header_values,
    text,
)

PATH = "/api/v1/webhooks/approval-response"
SIG = "X-Webhook-Signature"
MAX_BODY = 256 * 1024
DECISIONS = ("approved", "rejected", "request_changes")


def post(hostile: Hostile, body: bytes, headers: list[Header]) -> Any:
    return http(hostile.url, "POST", PATH, headers, body)


def signed(body: bytes) -> list[Header]:
    return [("Content-Type", "application/json"), (SIG, webhook_signature(body))]


def decision_body(request_id: Any, decision: Any = "approved", **extra: Any) -> bytes:
    return json.dumps({"requestId": request_id, "decision": decision, **extra}).encode()


def first_signature_is_not_utf8(headers: list[Header]) -> bool:
    """BUG replica (agent_host/http/api.py:171): `given.encode()` of a header value that
    aiohttp decoded with surrogateescape raises UnicodeEncodeError -> 500."""
    for name, value in headers:
        if isinstance(name, str) and name.lower() == SIG.lower():
            raw = value if isinstance(value, bytes) else value.encode()
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return True
            return False
    return False


@st.composite
def unsigned_calls(draw: st.DrawFn, hostile: Hostile) -> tuple[bytes, list[Header]]:
    cast = hostile.cast
    body = draw(
        st.one_of(
            st.builds(
                decision_body,
                st.sampled_from([r.request_id for r in cast.pending]),
                st.sampled_from(DECISIONS),
                feedback=text,
            ),
            st.binary(max_size=300),
            json_values.map(lambda v: json.dumps(v).encode()),
            deep_json,
            oversized(b'{"x": "', MAX_BODY, b'"}'),
        ),
        "body",
    )
    good = webhook_signature(body)
    wrong = st.one_of(
        hexes.map(lambda h: f"sha256={h}"),
        hexes.map(lambda h: f"sha1={h}"),
        st.just(good.upper()),  # the right digest, but not in the documented form
        st.just(good.removeprefix("sha256=")),  # no scheme
        # (not " " + good: HTTP strips the blanks around a header value, so that one is valid)
        st.just(good + "x"),
        st.just(good[:-1]),
        st.just(webhook_signature(body, secret="not-the-webhook-secret")),
        st.just(webhook_signature(body + b" ")),  # another body's signature
        st.just(""),
        raw_header_values,
    )
    signatures: list[Any] = draw(st.lists(wrong, max_size=3), "signatures")
    if signatures and draw(st.booleans(), "then the right one"):
        signatures.append(good)  # repeated header: only the first counts
    headers: list[Header] = []
    content_type = draw(content_types, "content type")
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    headers += [(SIG, s) for s in signatures]
    return body, headers


@fuzz_settings(max_examples=120)
@given(data=st.data())
def test_unsigned_or_wrongly_signed_calls_change_nothing(
    hostile: Hostile, before: Snapshot, data: st.DataObject
) -> None:
    body, headers = data.draw(unsigned_calls(hostile))
    reply = post(hostile, body, headers)
    event(f"HTTP {reply.status}")
    if reply.status >= 500:
        assert first_signature_is_not_utf8(headers), reply
    else:
        # 400: a header aiohttp refuses to parse; 413: the body is read to check its HMAC
        assert reply.status in (400, 401, 413), reply
    hostile.assert_unchanged(before, f"{headers!r} {body[:200]!r}")


@st.composite
def signed_refusable_bodies(draw: st.DrawFn, hostile: Hostile) -> bytes:
    cast = hostile.cast
    pending = st.sampled_from([r.request_id for r in cast.pending])
    unknown = st.one_of(
        st.sampled_from(
            [f"req_{r.request_id.split('_')[1]}_0099" for r in cast.all]
            + ["req_" + "ef" * 10 + "_0001", "run_" + "ef" * 10, cast.open.run_id, ""]
        ),
        text,
    )
    not_a_string = json_values.filter(lambda v: not isinstance(v, str))
    bad_decision = json_values.filter(lambda v: v not in DECISIONS)
    truthy_not_a_string = json_values.filter(lambda v: bool(v) and not isinstance(v, str))
    return draw(
        st.one_of(
            st.binary(max_size=300).filter(lambda b: not _is_json(b)),
            json_values.filter(lambda v: not isinstance(v, dict)).map(
                lambda v: json.dumps(v).encode()
            ),
            deep_json,
            st.builds(decision_body, unknown, st.sampled_from(DECISIONS)),
            st.builds(decision_body, not_a_string, st.sampled_from(DECISIONS)),
            st.builds(decision_body, pending, bad_decision),
            st.builds(
                decision_body, pending, st.sampled_from(DECISIONS), feedback=truthy_not_a_string
            ),
            st.builds(
                decision_body,
                st.just(cast.decided.request_id),
                st.sampled_from(DECISIONS),
                feedback=text,
                decidedBy=text,
            ),
            st.dictionaries(text, json_values, max_size=5).map(lambda d: json.dumps(d).encode()),
        )
    )


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return True


@fuzz_settings(max_examples=120)
@given(data=st.data())
def test_signed_calls_that_may_not_decide_change_nothing(
    hostile: Hostile, before: Snapshot, data: st.DataObject
) -> None:
    body = data.draw(signed_refusable_bodies(hostile), "body")
    reply = post(hostile, body, signed(body))
    event(f"HTTP {reply.status}")
    assert reply.status in (200, 400, 404, 413), reply
    assert reply.content_type == "application/json", reply
    answer = reply.json()
    if reply.status == 200:
        assert answer["status"] == "already_processed", answer
        assert answer["request_id"] == hostile.cast.decided.request_id
    else:
        assert isinstance(answer.get("error"), str) and answer["error"], answer
    hostile.assert_unchanged(before, body[:300])


def test_oversized_signed_body_gets_413_and_changes_nothing(hostile: Hostile) -> None:
    before = hostile.settle()
    body = decision_body(hostile.cast.open.request_id, feedback="a" * (MAX_BODY + 1))
    for chunked in (False, True):
        reply = http(hostile.url, "POST", PATH, signed(body), body, chunked=chunked)
        assert reply.status == 413, reply
        assert "error" in reply.json()
    hostile.assert_unchanged(before)


def test_replayed_signed_decision_is_applied_once(hostile: Hostile) -> None:
    request = hostile.new_pending()
    refunds = hostile.stack.effects.count("refund")
    body = decision_body(request.request_id, "approved", feedback="verified")
    headers = signed(body)

    first = post(hostile, body, headers)
    assert first.status == 200 and first.json()["status"] == "processed", first
    after_first = hostile.settle()
    assert hostile.stack.effects.count("refund") == refunds + 1

    replies = [post(hostile, body, headers) for _ in range(3)]
    replies += hostile.parallel([lambda: post(hostile, body, headers)] * 8)
    for reply in replies:
        assert reply.status == 200, reply
        assert reply.json() == {
            "status": "already_processed",
            "request_id": request.request_id,
            "decision": "approved",
            "decided_by": "webhook",
        }
    # A different verdict on the same request, correctly signed, is refused the same way.
    reject = decision_body(request.request_id, "rejected", feedback="too late")
    assert post(hostile, reject, signed(reject)).json()["status"] == "already_processed"
    hostile.assert_unchanged(after_first, "replays of a processed webhook call")
    assert hostile.stack.effects.count("refund") == refunds + 1


def test_concurrent_copies_of_one_decision_are_processed_once(hostile: Hostile) -> None:
    request = hostile.new_pending()
    refunds = hostile.stack.effects.count("refund")
    body = decision_body(request.request_id, "approved")
    replies = hostile.parallel([lambda: post(hostile, body, signed(body))] * 12)
    statuses = sorted(r.json()["status"] for r in replies)
    assert statuses == ["already_processed"] * 11 + ["processed"], statuses
    hostile.settle()
    audit = hostile.run(hostile.stack.host.store.audit(request.run_id))
    assert [e["event"] for e in audit if e.get("request_id") == request.request_id] == ["approved"]
    assert hostile.stack.effects.count("refund") == refunds + 1


@pytest.mark.parametrize("value", [b"sha256=\xff", b"\xc3\x28", b"sha256=" + b"\x80" * 64])
def test_bug_non_utf8_signature_header_is_a_401_not_a_5xx(hostile: Hostile, value: bytes) -> None:
    before = hostile.settle()
    body = decision_body(hostile.cast.open.request_id)
    reply = post(hostile, body, [("Content-Type", "application/json"), (SIG, value)])
    hostile.assert_unchanged(before)
    assert reply.status == 401, reply
