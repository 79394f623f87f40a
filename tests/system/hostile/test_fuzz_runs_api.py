"""Hostile traffic on the runs and approvals API, over real HTTP on loopback.

Without the bearer token (missing, wrong, another scheme, repeated, malformed) every call
is a 401 and changes nothing. With it, bad bodies and odd ids, limits, cursors and channels
are a 4xx JSON error, never a 5xx, and change nothing; the only change the fuzzing allows
is the one a valid `POST /api/v1/runs` makes, tested on its own.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from .harness import (
    API_TOKEN,
    Header,
    Hostile,
    Snapshot,
    bearer,
    fuzz_settings,
    http,
    total,
    webhook_signature,
)
from .strategies import content_types, deep_json, json_values, oversized, raw_header_values, text

MAX_BODY = 256 * 1024
AGENTS = ("refund-agent", "cleanup-agent", "repo-admin", "support-agent")


def first_authorization_is_not_utf8(headers: list[Header]) -> bool:
    """BUG replica (agent_host/http/api.py:58): `given.encode()` of a header value aiohttp
    decoded with surrogateescape raises UnicodeEncodeError -> 500."""
    for name, value in headers:
        if isinstance(name, str) and name.lower() == "authorization":
            raw = value if isinstance(value, bytes) else value.encode()
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return True
            return False
    return False


def cursor_crashes(cursor: str | None) -> bool:
    """BUG replica (agent_host/http/api.py:158-160): `_valid_cursor` accepts any str.isdigit()
    score (superscripts, or more digits than int() converts), then int() raises -> 500."""
    if not cursor:
        return False
    score, sep, _ = cursor.partition(":")
    if not (sep and score.isdigit()):
        return False
    try:
        int(score)
    except ValueError:
        return True
    return False


def names_a_run_by_another_id(hostile: Hostile, run_id: str) -> bool:
    """BUG replica (agent_host/http/api.py run_detail): any id whose token is a run's token
    (`req_<token>_0001`, `run_<token>_7`) is served as that run (see the BUG test below)."""
    match = re.fullmatch(r"(?:run|req)_([0-9a-f]{8,64})(?:_\d+)?", run_id)
    return bool(match) and match.group(1) in {r.run_id[4:] for r in hostile.cast.all}


def is_json_error(reply: Any) -> bool:
    if reply.content_type != "application/json":
        return False
    body = reply.json()
    return isinstance(body, dict) and isinstance(body.get("error"), str) and bool(body["error"])


# -- without the token ---------------------------------------------------------------------

wrong_authorizations = st.one_of(
    st.sampled_from(
        [
            "",
            "Bearer",
            "Bearer ",
            "Bearer wrong",
            f"Bearer {API_TOKEN}x",
            f"Bearer {API_TOKEN[:-1]}",
            f"Bearer  {API_TOKEN}",  # two blanks: the token would start with one
            f"Basic {API_TOKEN}",
            f"Token {API_TOKEN}",
            API_TOKEN,
            f"Bearer {API_TOKEN.upper()}",
            f"Bearer\t{API_TOKEN}",
        ]
    ),
    text.filter(lambda t: "\r" not in t and "\n" not in t),
    raw_header_values,
)


@st.composite
def unauthorized_calls(draw: st.DrawFn, hostile: Hostile) -> tuple[str, str, list[Header], bytes]:
    cast = hostile.cast
    method, target = draw(
        st.sampled_from(
            [
                ("POST", "/api/v1/runs"),
                ("GET", f"/api/v1/runs/{cast.open.run_id}"),
                ("GET", "/api/v1/runs/run_nope"),
                ("GET", "/api/v1/approvals"),
                ("GET", "/api/v1/approvals?status=pending&limit=500"),
            ]
        )
    )
    values = draw(st.lists(wrong_authorizations, max_size=3))
    if values and draw(st.booleans()):
        values.append(f"Bearer {API_TOKEN}")  # repeated header: only the first counts
    headers: list[Header] = [("Authorization", v) for v in values]
    body = b""
    if method == "POST":
        agent = draw(st.sampled_from(AGENTS))
        body = json.dumps({"agent": agent, "input": "refund order 123"}).encode()
        headers.append(("Content-Type", "application/json"))
    return method, target, headers, body


@fuzz_settings(max_examples=100)
@given(data=st.data())
def test_calls_without_the_token_are_401_and_change_nothing(
    hostile: Hostile, before: Snapshot, data: st.DataObject
) -> None:
    method, target, headers, body = data.draw(unauthorized_calls(hostile))
    reply = http(hostile.url, method, target, headers, body)
    event(f"HTTP {reply.status}")
    if reply.status >= 500:
        assert first_authorization_is_not_utf8(headers), reply
    elif reply.status != 400 or reply.content_type == "application/json":
        # (a bare 400 is aiohttp refusing a header it cannot parse)
        assert reply.status == 401 and is_json_error(reply), reply
        assert "Bearer" in reply.json()["error"]
    hostile.assert_unchanged(before, f"{method} {target} {headers!r}")


# -- POST /api/v1/runs with bad bodies ----------------------------------------------------


def _valid_start(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and body.get("agent") in AGENTS
        and isinstance(body.get("input"), str)
        and (body.get("requested_by") is None or isinstance(body.get("requested_by"), str))
    )


@st.composite
def bad_run_bodies(draw: st.DrawFn) -> bytes:
    fields = st.fixed_dictionaries(
        {},
        optional={
            "agent": st.one_of(st.sampled_from(AGENTS), json_values),
            "input": json_values,
            "requested_by": json_values,
        },
    )
    extra = st.dictionaries(text, json_values, max_size=3)
    body = draw(
        st.one_of(
            st.tuples(fields, extra).map(lambda p: {**p[1], **p[0]}),
            json_values,
            st.binary(max_size=300),
            deep_json,
            oversized(b'{"agent": "refund-agent", "input": "', MAX_BODY, b'"}'),
        )
    )
    if isinstance(body, bytes):
        return body
    if _valid_start(body):
        body["agent"] = "no-such-" + body["agent"]  # the valid ones are tested on their own
    return json.dumps(body).encode()


@fuzz_settings(max_examples=120)
@given(body=bad_run_bodies(), content_type=content_types)
def test_bad_run_bodies_are_a_4xx_and_change_nothing(
    hostile: Hostile, before: Snapshot, body: bytes, content_type: str | None
) -> None:
    headers: list[Header] = [bearer()]
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    reply = http(hostile.url, "POST", "/api/v1/runs", headers, body)
    event(f"HTTP {reply.status}")
    expected = 413 if len(body) > MAX_BODY else 400
    assert reply.status == expected and is_json_error(reply), reply
    hostile.assert_unchanged(before, body[:300])


def test_a_valid_run_request_creates_exactly_one_run(hostile: Hostile) -> None:
    before = hostile.settle()
    body = json.dumps({"agent": "repo-admin", "input": "delete repos scratch"}).encode()
    reply = http(hostile.url, "POST", "/api/v1/runs", [bearer()], body)
    assert reply.status == 202, reply
    run_id = reply.json()["run_id"]
    assert reply.json() == {"run_id": run_id, "status": "running"}
    after = hostile.settle()
    assert total(after, "zset", ":runs") == total(before, "zset", ":runs") + 1
    detail = http(hostile.url, "GET", f"/api/v1/runs/{run_id}", [bearer()])
    assert detail.status == 200 and detail.json()["status"] == "succeeded", detail


# -- GET /api/v1/runs/{run_id} with odd ids ------------------------------------------------


@st.composite
def run_ids(draw: st.DrawFn, hostile: Hostile) -> str:
    real = [r.run_id for r in hostile.cast.all]
    one = draw(st.sampled_from(real))
    return draw(
        st.one_of(
            st.sampled_from(real),
            st.sampled_from(
                [
                    one.upper(),
                    one + "0",
                    one[:-1],
                    one.replace("run_", "req_") + "_0001",
                    one + "_0001",
                    "run_",
                    "run_" + "0" * 64,
                    "run_" + "0" * 65,
                    ".",
                    "..",
                    "run_abc/../../healthz",
                    "\x00",
                ]
            ),
            text,
        )
    )


@fuzz_settings(max_examples=100)
@given(data=st.data())
def test_odd_run_ids_are_404_and_change_nothing(
    hostile: Hostile, before: Snapshot, data: st.DataObject
) -> None:
    run_id = data.draw(run_ids(hostile))
    target = "/api/v1/runs/" + urllib.parse.quote(run_id, safe="")
    reply = http(hostile.url, "GET", target, [bearer()])
    event(f"HTTP {reply.status}")
    if run_id in {r.run_id for r in hostile.cast.all}:
        assert reply.status == 200 and reply.json()["run_id"] == run_id, reply
    elif reply.status == 200:
        assert names_a_run_by_another_id(hostile, run_id), reply
    else:
        assert reply.status == 404 and is_json_error(reply), reply
    hostile.assert_unchanged(before, target)


# -- GET /api/v1/approvals with odd queries ------------------------------------------------

query_values = st.one_of(
    text,
    st.sampled_from(["", "0", "1", "500", "501", "-1", "1e2", "٣", "²", "9" * 5000, "null"]),
)


@st.composite
def approval_queries(draw: st.DrawFn, hostile: Hostile) -> list[tuple[str, str]]:
    cast = hostile.cast
    names = st.sampled_from(["status", "limit", "cursor", "channel", "STATUS", "x"])
    values = st.one_of(
        query_values,
        st.sampled_from(["pending", "approved", "all", "PENDING"]),
        st.sampled_from([cast.open.message_channel, cast.guarded.message_channel, "C0NONE"]),
        st.integers(0, 2**64).map(lambda n: f"{n}:{cast.open.request_id}"),
        st.tuples(st.sampled_from(["1", "٣", "²", "9" * 5000, ""]), text).map(":".join),
    )
    return draw(st.lists(st.tuples(names, values), max_size=5))


@fuzz_settings(max_examples=120)
@given(data=st.data())
def test_odd_approval_queries_are_200_or_400_and_change_nothing(
    hostile: Hostile, before: Snapshot, data: st.DataObject
) -> None:
    params = data.draw(approval_queries(hostile))
    target = "/api/v1/approvals?" + urllib.parse.urlencode(params)
    reply = http(hostile.url, "GET", target, [bearer()])
    event(f"HTTP {reply.status}")
    cursor = next((v for k, v in params if k == "cursor"), None)
    if reply.status >= 500:
        assert cursor_crashes(cursor), reply
    elif reply.status == 200:
        page = reply.json()
        assert set(page) == {"approvals", "next_cursor"}, page
        assert isinstance(page["approvals"], list)
        assert page["next_cursor"] is None or isinstance(page["next_cursor"], str)
        pending = {r.request_id for r in hostile.cast.pending}
        assert {a["request_id"] for a in page["approvals"]} <= pending, page
    elif len(target) > 8000:
        assert reply.status == 400, reply  # aiohttp: request line too long
    else:
        assert reply.status == 400 and is_json_error(reply), reply
    hostile.assert_unchanged(before, target)


def test_health_endpoints_ignore_odd_requests(hostile: Hostile, before: Snapshot) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        for headers in ([], [("Authorization", "Bearer wrong")], [("Authorization", b"\xff")]):
            reply = http(hostile.url, "GET", path + "?x=%ff&x=2", headers)
            assert reply.status == 200, (path, reply)
    assert http(hostile.url, "POST", "/healthz", [], b"{}").status == 405
    hostile.assert_unchanged(before)


# -- known bugs, pinned ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [b"Bearer \xff", b"Bearer " + API_TOKEN.encode() + b"\x80"])
def test_bug_non_utf8_authorization_is_a_401_not_a_5xx(hostile: Hostile, value: bytes) -> None:
    before = hostile.settle()
    reply = http(hostile.url, "GET", "/api/v1/approvals", [("Authorization", value)])
    hostile.assert_unchanged(before)
    assert reply.status == 401, reply


@pytest.mark.parametrize("cursor", ["\u00b2:x", "\u00b9\u00b2:req_x", "9" * 5000 + ":x"])
def test_bug_cursor_with_odd_digits_is_a_400_not_a_5xx(hostile: Hostile, cursor: str) -> None:
    before = hostile.settle()
    target = "/api/v1/approvals?" + urllib.parse.urlencode({"cursor": cursor})
    reply = http(hostile.url, "GET", target, [bearer()])
    hostile.assert_unchanged(before)
    assert reply.status == 400, reply


@pytest.mark.parametrize("suffix", ["req_{token}_0001", "run_{token}_1"])
def test_bug_run_detail_answers_only_to_run_ids(hostile: Hostile, suffix: str) -> None:
    token = hostile.cast.open.run_id.removeprefix("run_")
    reply = http(hostile.url, "GET", "/api/v1/runs/" + suffix.format(token=token), [bearer()])
    assert reply.status == 404 and is_json_error(reply), reply


# -- NaN and ±Infinity are not JSON ------------------------------------------------------

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]
WEBHOOK = "/api/v1/webhooks/approval-response"


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize("target", ["/api/v1/runs", WEBHOOK])
def test_bug_nan_and_infinity_in_api_bodies_are_a_400_and_change_nothing(
    hostile: Hostile, target: str, number: str
) -> None:
    headers: list[Header] = [("Content-Type", "application/json")]
    if target == WEBHOOK:
        request_id = hostile.new_pending().request_id
        body = f'{{"requestId": "{request_id}", "decision": "approved", "score": {number}}}'
        headers.append(("X-Webhook-Signature", webhook_signature(body.encode())))
    else:
        body = f'{{"agent": "refund-agent", "input": "refund order 123", "limit": {number}}}'
        headers.append(bearer())
    before = hostile.settle()
    reply = http(hostile.url, "POST", target, headers, body.encode())
    assert reply.status == 400 and is_json_error(reply), reply
    assert "finite number" in reply.json()["error"], reply
    hostile.assert_unchanged(before, body)
