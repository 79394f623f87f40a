"""The "Edit & approve" and "Approve with comment" surfaces in Block Kit: one input per
editable argument from the tool's schema, read back from what Slack submits; the buttons;
the comment and the diff on the decided message; Block Kit's limits for any input."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_host.approvals import EditableField, EditForm, RequestStatus, Route
from agent_host.runtime.decisions import Approve
from bot import blocks as B
from tests.unit.bot.test_blocks import (
    buttons,
    check_message,
    check_modal,
    check_text,
    make_request,
    section_texts,
)

FIELDS = (
    EditableField("vendor", "text", required=True),
    EditableField("amount", "number", required=True, minimum=0.0),
    EditableField("currency", "choice", choices=("EUR", "USD")),
    EditableField("installments", "integer"),
    EditableField("notify", "boolean"),
    EditableField("memo", "json", nullable=True),
    EditableField("api_token", "text"),
)
ARGUMENTS = {
    "vendor": "acme",
    "amount": 250.5,
    "currency": "USD",
    "installments": 3,
    "notify": True,
    "memo": {"invoice": "INV-7"},
    "api_token": "s3cret-value",
}


def form(**arguments: Any) -> EditForm:
    return EditForm("pay_vendor", FIELDS, {**ARGUMENTS, **arguments})


def editable(**changes: Any) -> Any:
    return make_request(**{"editable": tuple(ARGUMENTS), "arguments": dict(ARGUMENTS), **changes})


def inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}


def check_edit_element(element: dict[str, Any]) -> None:
    """Limits of the elements the edit form adds to those `check_modal` walks."""
    kind = element["type"]
    if kind == "number_input":
        assert isinstance(element["is_decimal_allowed"], bool)
        for key in ("initial_value", "min_value", "max_value"):
            if key in element:
                float(element[key])  # a plain decimal string
                assert "e" not in element[key].lower()
    elif kind == "static_select":
        assert 1 <= len(element["options"]) <= 100
        for option in element["options"]:
            check_text(option["text"], 75)
            assert len(option["value"]) <= 150
        if "initial_option" in element:
            assert element["initial_option"] in element["options"]
    elif kind == "checkboxes":
        assert 1 <= len(element["options"]) <= 10
        for option in element.get("initial_options", []):
            assert option in element["options"]
    elif kind == "plain_text_input":
        assert len(element.get("initial_value", "")) <= element["max_length"] <= 3000


def check_edit_modal(view: dict[str, Any]) -> None:
    check_modal(view)
    for block in inputs(view).values():
        check_edit_element(block["element"])
        if "hint" in block:
            check_text(block["hint"], 2000)


# -- schema to inputs -------------------------------------------------------------------------


def test_each_argument_gets_the_input_its_schema_calls_for() -> None:
    request = editable()
    view = B.edit_modal(request, form())
    check_edit_modal(view)
    assert view["callback_id"] == B.EDIT_MODAL
    assert view["private_metadata"] == f"{request.request_id}|{request.pause_id}"
    found = inputs(view)
    assert list(found) == [B.edit_block_id(n) for n in ARGUMENTS] + [B.COMMENT_BLOCK]
    element = {name: found[B.edit_block_id(name)]["element"] for name in ARGUMENTS}

    assert element["vendor"]["type"] == "plain_text_input"
    assert element["vendor"]["initial_value"] == "acme"
    assert element["amount"] == {
        "type": "number_input",
        "action_id": B.EDIT_INPUT,
        "is_decimal_allowed": True,
        "initial_value": "250.5",
        "min_value": "0.0",
    }
    assert element["installments"]["type"] == "number_input"
    assert element["installments"]["is_decimal_allowed"] is False
    assert element["installments"]["initial_value"] == "3"
    assert element["currency"]["type"] == "static_select"
    assert [o["value"] for o in element["currency"]["options"]] == ['"EUR"', '"USD"']
    assert element["currency"]["initial_option"]["value"] == '"USD"'
    assert element["notify"]["type"] == "checkboxes"
    assert element["notify"]["initial_options"] == element["notify"]["options"]
    assert element["memo"]["type"] == "plain_text_input" and element["memo"]["multiline"]
    assert json.loads(element["memo"]["initial_value"]) == {"invoice": "INV-7"}
    # required arguments must be filled; a boolean, a nullable or a secret need not be
    optional = {name: found[B.edit_block_id(name)]["optional"] for name in ARGUMENTS}
    assert optional == {
        "vendor": False,
        "amount": False,
        "currency": True,
        "installments": True,
        "notify": True,
        "memo": True,
        "api_token": True,
    }
    assert found[B.COMMENT_BLOCK]["optional"] is True


def test_a_secret_argument_is_never_shown_in_the_form() -> None:
    view = B.edit_modal(editable(), form())
    assert "s3cret-value" not in json.dumps(view)
    token = inputs(view)[B.edit_block_id("api_token")]["element"]
    assert "initial_value" not in token
    assert "Leave empty to keep it" in token["placeholder"]["text"]


def test_a_count_under_a_credentials_name_is_edited_as_the_message_shows_it() -> None:
    """`token_count: 5` is no credential: the message shows it, so the form does too."""
    count = EditableField("token_count", "integer")
    view = B.edit_modal(editable(), EditForm("t", (count,), {"token_count": 5}))
    element = inputs(view)[B.edit_block_id("token_count")]["element"]
    assert element["initial_value"] == "5"


def test_a_value_too_long_for_an_input_is_listed_not_editable() -> None:
    view = B.edit_modal(editable(), form(vendor="v" * 3001, memo={"x": "y" * 4000}))
    check_edit_modal(view)
    assert B.edit_block_id("vendor") not in inputs(view)
    assert B.edit_block_id("memo") not in inputs(view)
    notes = [e["text"] for b in view["blocks"] if b["type"] == "context" for e in b["elements"]]
    assert any(
        "Not editable here (cannot be shown as it is in a form): vendor, memo" in n for n in notes
    )
    edited, problems = B.read_edit(form(vendor="v" * 3001), {})
    assert edited == {} and problems == {}


def test_a_value_with_characters_that_hide_is_listed_not_editable() -> None:
    """An input would show `/srv/\u202eatad` reversed, as it looks; the message shows its
    escape. Such a value is not offered for editing: it keeps the value the message showed."""
    hidden = "acme\u202e lat\u200bvia"
    view = B.edit_modal(editable(), form(vendor=hidden, memo={"to": "x\u2066y"}))
    check_edit_modal(view)
    assert B.edit_block_id("vendor") not in inputs(view)
    assert B.edit_block_id("memo") not in inputs(view)
    assert "\u202e" not in json.dumps(view, ensure_ascii=False)
    assert B.edit_block_id("amount") in inputs(view)  # the others are editable as ever


def test_a_long_enum_is_typed_as_json() -> None:
    many = EditableField("code", "choice", choices=tuple(range(150)))
    view = B.edit_modal(editable(), EditForm("t", (many,), {"code": 7}))
    check_edit_modal(view)
    element = inputs(view)[B.edit_block_id("code")]["element"]
    assert element["type"] == "plain_text_input" and element["initial_value"] == "7"
    edited, _ = B.read_edit(EditForm("t", (many,), {"code": 7}), submitted(code=text("8")))
    assert edited == {"code": 8}


# -- reading the form back --------------------------------------------------------------------


def text(value: str | None) -> dict[str, Any]:
    return {"type": "plain_text_input", "value": value}


def submitted(**entries: dict[str, Any]) -> dict[str, Any]:
    return {B.edit_block_id(name): {B.EDIT_INPUT: entry} for name, entry in entries.items()}


def test_each_input_is_read_back_as_its_argument() -> None:
    values = submitted(
        vendor=text("acme ltd"),
        amount={"type": "number_input", "value": "199.99"},
        currency={"type": "static_select", "selected_option": {"value": '"EUR"'}},
        installments={"type": "number_input", "value": "2"},
        notify={"type": "checkboxes", "selected_options": []},
        memo=text('{"invoice": "INV-8"}'),
        api_token=text(""),  # left empty: keeps its value
    )
    edited, problems = B.read_edit(form(), values)
    assert problems == {}
    assert edited == {
        "vendor": "acme ltd",
        "amount": 199.99,
        "currency": "EUR",
        "installments": 2,
        "notify": False,
        "memo": {"invoice": "INV-8"},
    }
    replaced, _ = B.read_edit(form(), submitted(api_token=text("new-token")))
    assert replaced == {"api_token": "new-token"}


def test_problems_are_shown_under_their_input() -> None:
    values = submitted(
        vendor=text("acme"),
        amount={"type": "number_input", "value": "12abc"},
        installments={"type": "number_input", "value": "2.5"},
        currency={"type": "static_select", "selected_option": None},
        memo=text("{not json"),
    )
    edited, problems = B.read_edit(form(), values)
    assert problems == {
        B.edit_block_id("amount"): "Enter a number.",
        B.edit_block_id("installments"): "Enter a whole number.",
        B.edit_block_id("currency"): "Choose one.",
        B.edit_block_id("memo"): problems[B.edit_block_id("memo")],
    }
    assert problems[B.edit_block_id("memo")].startswith("Not valid JSON")
    assert "amount" not in edited and edited["vendor"] == "acme"


def test_emptied_inputs_become_null_an_empty_text_or_a_problem() -> None:
    values = submitted(
        vendor=text(""), memo=text("  "), amount={"type": "number_input", "value": None}
    )
    edited, problems = B.read_edit(form(), values)
    assert edited == {"vendor": "", "memo": None}
    assert problems == {B.edit_block_id("amount"): "Enter a value."}
    nan, nan_problems = B.read_edit(form(), submitted(memo=text("NaN")))
    assert nan == {} and B.edit_block_id("memo") in nan_problems


def test_inputs_missing_from_the_submission_change_nothing() -> None:
    edited, problems = B.read_edit(form(), {"unrelated": {"x": {"value": "1"}}})
    assert edited == {} and problems == {}


def test_a_problem_of_an_argument_not_in_the_form_goes_under_the_comment() -> None:
    assert B.block_of(form(), "amount") == B.edit_block_id("amount")
    assert B.block_of(form(), "") == B.COMMENT_BLOCK
    assert B.block_of(form(), "order_id") == B.COMMENT_BLOCK


# -- the buttons and the comment form ---------------------------------------------------------


def test_edit_and_approve_only_where_a_tool_allows_it_and_one_approval_decides() -> None:
    _, body = B.approval_message(editable())
    assert list(buttons(body)) == [
        B.APPROVE,
        B.APPROVE_COMMENT,
        B.EDIT,
        B.APPROVE_ALWAYS,
        B.REJECT,
    ]
    assert buttons(body)[B.EDIT]["text"]["text"] == "Edit & approve"
    for request in (
        make_request(),  # the tool does not allow it
        editable(route=Route(quorum=2)),
        editable(origin="external"),
    ):
        _, body = B.approval_message(request)
        assert B.EDIT not in buttons(body)
        assert B.APPROVE_COMMENT in buttons(body)


def test_comment_modal() -> None:
    request = make_request(pause_id="req_abc123_1")
    view = B.comment_modal(request)
    check_modal(view)
    assert view["callback_id"] == B.COMMENT_MODAL
    assert view["private_metadata"] == "req_abc123_1|req_abc123_1"
    assert view["title"]["text"] == "Approve with comment"
    [comment] = [b for b in view["blocks"] if b["type"] == "input"]
    assert comment["block_id"] == B.COMMENT_BLOCK and comment["optional"] is False
    assert comment["element"]["action_id"] == B.COMMENT_INPUT
    assert "issue_refund" in json.dumps(view)


# -- the decided message ----------------------------------------------------------------------


def approved(decision: Approve, **changes: Any) -> Any:
    return editable(
        status=RequestStatus.APPROVED,
        decision=decision,
        decided_by=decision.decided_by,
        decided_at=1_700_000_100.0,
        approvals=[decision.decided_by],
        **changes,
    )


def test_the_decided_message_shows_the_comment() -> None:
    message = B.decided_message(approved(Approve(decided_by="U0REVIEWER", comment="<!here> ok")))
    check_message(message)
    _, body = message
    [outcome] = [t for t in section_texts(body) if t.startswith(":white_check_mark:")]
    assert outcome.startswith(":white_check_mark: Approved by <@U0REVIEWER>: &lt;!here&gt; ok")


def test_the_decided_message_shows_what_was_edited_masked() -> None:
    edited = {**ARGUMENTS, "amount": 200.0, "api_token": "other-secret", "memo": None}
    decision = Approve(
        decided_by="U0REVIEWER",
        edited_arguments=edited,
        original_arguments=dict(ARGUMENTS),
        edited_hash="ab" * 32,
        edited_by="U0REVIEWER",
    )
    message = B.decided_message(approved(decision))
    check_message(message)
    shown = "\n".join(section_texts(message[1]))
    assert "*Edited by <@U0REVIEWER> before approval*" in shown
    assert "hash `abababababab`" in shown
    assert "• `amount`: 250.5 → 200.0" in shown
    assert '• `memo`: {"invoice": "INV-7"} → null' in shown
    assert "• `api_token`: changed (hidden)" in shown
    assert "secret" not in shown and "vendor" not in shown.split("Edited by")[1].split("\n*")[0]


def mrkdwn_texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["text"]] if value.get("type") == "mrkdwn" else []
        return own + [t for v in value.values() for t in mrkdwn_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in mrkdwn_texts(v)]
    return []


INJECTION = st.sampled_from(["<!channel>", "<@U0ADMIN>", "<#C0OPS>", "*bold* `x` ```"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(
        st.text(min_size=1, max_size=300) | INJECTION, min_size=1, max_size=200, unique=True
    ),
    value=st.text(max_size=10_000) | INJECTION,
)
def test_any_edit_form_and_diff_respect_limits(names: list[str], value: str) -> None:
    """200 arguments, 10 KB values, mentions and markup in names: still a valid view and
    a valid message."""
    fields = tuple(EditableField(n, "text") for n in names)
    arguments = {n: value for n in names}
    request = editable(arguments=arguments, editable=tuple(names))
    view = B.edit_modal(request, EditForm("t", fields, arguments))
    check_edit_modal(view)
    assert not any(bad in t for t in mrkdwn_texts(view) for bad in ("<!", "<@U0A", "<#"))
    decision = Approve(
        decided_by="U0REVIEWER",
        comment=value,
        edited_arguments={n: value + "!" for n in names},
        original_arguments=arguments,
        edited_hash="0" * 64,
        edited_by="U0REVIEWER",
    )
    message = B.decided_message(approved(decision, arguments=arguments))
    check_message(message)
    texts = mrkdwn_texts(message[1])
    assert not any(bad in t for t in texts for bad in ("<!channel", "<@U0A", "<#C0OPS"))
