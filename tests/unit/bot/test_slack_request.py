"""A Slack request body parsed here gives Bolt exactly what Bolt's own parsing gives."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from hypothesis import given
from hypothesis import strategies as st
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import parse_body

from bot.slack_request import parse_slack_body, slack_request

FORM = "application/x-www-form-urlencoded"
text = st.text(max_size=40)  # any characters: '&', '=', '+', '%', quotes, emoji, NUL
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(text, json_values, max_size=6))
def test_an_interactivity_payload_parses_as_bolt_parses_it(payload: dict[str, Any]) -> None:
    raw = urlencode({"payload": json.dumps(payload)})
    assert parse_slack_body(raw, FORM) == parse_body(raw, FORM) == payload


@given(st.lists(st.tuples(text, text), max_size=8))
def test_a_form_parses_as_bolt_parses_it(fields: list[tuple[str, str]]) -> None:
    """Slash commands and the like; a repeated field: the last one, as Bolt has it (a field
    named 'payload' that is not JSON: refused, as Bolt refuses it)."""
    raw = urlencode(fields)
    assert _parsed(parse_slack_body, raw) == _parsed(parse_body, raw)


@given(text)
def test_any_body_parses_as_bolt_parses_it_or_fails_as_it_does(raw: str) -> None:
    """Malformed escapes, stray separators, a 'payload' that is not JSON: the same dict, or
    the same kind of refusal (which the endpoint answers with 400)."""
    assert _parsed(parse_slack_body, raw) == _parsed(parse_body, raw)


def test_a_form_whose_payload_field_is_not_json_is_refused_as_bolt_refuses_it() -> None:
    raw = urlencode([("payload", "00")])  # (found by the property above)
    assert _parsed(parse_slack_body, raw) == _parsed(parse_body, raw) == json.JSONDecodeError


def _parsed(parse: Any, raw: str) -> Any:
    """What `parse` makes of a form body: the dict, or the kind of its refusal."""
    try:
        return parse(raw, FORM)
    except ValueError as exc:
        return type(exc)


def test_json_bodies_are_read_as_json() -> None:
    event = {"type": "event_callback", "event": {"type": "app_home_opened", "user": "U1"}}
    raw = json.dumps(event)
    assert parse_slack_body(raw, "application/json") == parse_body(raw, "application/json")
    assert parse_slack_body(raw, None) == event  # starts with '{', as Bolt decides too


def test_the_request_is_the_one_bolt_would_build() -> None:
    payload = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": "U1", "team_id": "T1"},
        "channel": {"id": "C1"},
        "actions": [{"action_id": "approve", "value": "req_1"}],
    }
    raw = urlencode({"payload": json.dumps(payload)})
    headers = {"Content-Type": FORM, "X-Slack-Request-Timestamp": "1"}
    ours = slack_request(raw, parse_slack_body(raw, FORM), "a=1", headers)
    bolts = AsyncBoltRequest(body=raw, query="a=1", headers=headers)

    assert (ours.raw_body, ours.body, ours.mode) == (bolts.raw_body, bolts.body, bolts.mode)
    assert (ours.query, ours.headers, ours.content_type) == (
        bolts.query,
        bolts.headers,
        bolts.content_type,
    )
    assert dict(ours.context) == dict(bolts.context)
    assert ours.context["user_id"] == "U1" and ours.context["channel_id"] == "C1"
