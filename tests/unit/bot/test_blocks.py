"""Block Kit rendering: ids, buttons, masking, escaping and Block Kit's limits."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_host.approvals import ApprovalRequest, RequestStatus, Route
from agent_host.approvals.notifier import RunSummary
from agent_host.runtime.decisions import Reject, decision_adapter
from bot import blocks as B
from bot import mrkdwn
from bot.blocks.arguments import shown_json
from slack_sandbox.blockkit import check_blocks, check_view

NOW = 1_700_000_000.0


def make_request(**changes: Any) -> ApprovalRequest:
    base = ApprovalRequest(
        request_id="req_abc123_1",
        run_id="run_abc123",
        call_id="call_1",
        agent="refund-agent",
        tool="issue_refund",
        arguments={"order_id": "123", "amount": 42.5},
        call_hash="0123456789abcdef" * 4,
        kind="approval",
        reason="moves money back to the customer",
        severity="medium",
        requested_by="U0REQUESTER",
        created_at=NOW,
        expires_at=NOW + 3600,
        route=Route(),
    )
    return replace(base, **changes)


def question(**changes: Any) -> ApprovalRequest:
    fields: dict[str, Any] = {
        "kind": "question",
        "tool": "ask_operator",
        "agent": "support-agent",
        "arguments": {"question": "Refund or replace?"},
        "question": "Refund or replace?",
        "reason": "",
        "allow_always": False,
    }
    fields.update(changes)
    return make_request(**fields)


# -- helpers --------------------------------------------------------------------------------
def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def by_type(body: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [b for b in body if b["type"] == kind]


def buttons(body: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["action_id"]: e for b in by_type(body, "actions") for e in b["elements"]}


def section_texts(body: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in by_type(body, "section") if "text" in b]


def written_after(body: list[dict[str, Any]], label: str) -> str:
    """The words shown under `label`: a plain text section, no emoji made of :codes:."""
    sections = by_type(body, "section")
    at = [i for i, b in enumerate(sections) if b.get("text", {}).get("text") == label]
    assert len(at) == 1, f"{label} is shown once"
    shown = sections[at[0] + 1]["text"]
    assert shown["type"] == "plain_text" and shown["emoji"] is False
    return str(shown["text"])


def field_texts(body: list[dict[str, Any]]) -> list[str]:
    return [f["text"] for b in by_type(body, "section") for f in b.get("fields", [])]


def arguments_text(body: list[dict[str, Any]]) -> str:
    (text,) = [t for t in section_texts(body) if t.startswith("*Arguments*")]
    return text


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def balanced(text: str) -> bool:
    return text.count("```") % 2 == 0


def check_text(obj: dict[str, Any], limit: int) -> None:
    assert obj["type"] in ("plain_text", "mrkdwn")
    assert isinstance(obj["text"], str)
    assert units(obj["text"]) <= limit, (limit, units(obj["text"]))
    if obj["type"] == "mrkdwn":
        assert balanced(obj["text"]), obj["text"]


def check_element(element: dict[str, Any]) -> None:
    assert len(element.get("action_id", "")) <= 255
    if element["type"] == "button":
        check_text(element["text"], 75)
        assert element["text"]["type"] == "plain_text"
        assert len(element["value"]) <= 2000
        assert element.get("style") in (None, "primary", "danger")
        if "confirm" in element:
            confirm = element["confirm"]
            check_text(confirm["title"], 100)
            check_text(confirm["text"], 300)
            check_text(confirm["confirm"], 30)
            check_text(confirm["deny"], 30)
    elif element["type"] == "plain_text_input":
        assert 1 <= element["max_length"] <= 3000
        assert 0 <= element.get("min_length", 0) <= 3000
        if "placeholder" in element:
            check_text(element["placeholder"], 150)


def check_limits(body: list[dict[str, Any]], *, max_blocks: int = 50) -> None:
    """Every Block Kit limit these messages could trip, walked block by block."""
    assert 1 <= len(body) <= max_blocks
    assert check_blocks(body, limit=max_blocks) is None
    for block in body:
        assert len(block.get("block_id", "")) <= 255
        kind = block["type"]
        if kind == "header":
            assert block["text"]["type"] == "plain_text"
            check_text(block["text"], 150)
        elif kind == "section":
            assert "text" in block or "fields" in block
            if "text" in block:
                check_text(block["text"], 3000)
            fields = block.get("fields", [])
            assert len(fields) <= 10
            for field in fields:
                check_text(field, 2000)
        elif kind == "context":
            assert 1 <= len(block["elements"]) <= 10
            for element in block["elements"]:
                check_text(element, 3000)
        elif kind == "actions":
            assert 1 <= len(block["elements"]) <= 25
            for element in block["elements"]:
                check_element(element)
        elif kind == "input":
            check_text(block["label"], 2000)
            check_element(block["element"])
        else:
            assert kind == "divider", kind


def check_message(message: tuple[str, list[dict[str, Any]]]) -> None:
    text, body = message
    assert text and units(text) <= 300
    check_limits(body)


def check_modal(view: dict[str, Any]) -> None:
    assert check_view(view) is None
    assert view["type"] == "modal"
    for key in ("title", "submit", "close"):
        check_text(view[key], 24)
    assert len(view["private_metadata"]) <= 3000
    check_limits(view["blocks"], max_blocks=100)


# -- the approval message -------------------------------------------------------------------
def test_approval_message_fields_and_buttons() -> None:
    request = make_request(requested_by="U0REQUESTER")
    text, body = B.approval_message(request)
    check_message((text, body))
    assert "issue_refund" in text and "refund-agent" in text

    (header,) = by_type(body, "header")
    assert header["text"]["text"] == "Approval needed: issue_refund"
    fields = field_texts(body)
    labels = [f.split("\n", 1)[0] for f in fields]
    assert labels == [
        "*Agent*",
        "*Tool*",
        "*Severity*",
        "*Requested by*",
        "*Expires*",
        "*Request id*",
    ]
    assert "refund-agent" in fields[0]
    assert "issue_refund" in fields[1]
    assert ":large_yellow_circle: medium" in fields[2]
    assert "<@U0REQUESTER>" in fields[3]
    assert fields[4].endswith(
        f"<!date^{int(NOW + 3600)}^{{date_short_pretty}} at {{time}}|2023-11-14 23:13 UTC>"
    )
    assert "req_abc123_1" in fields[5]
    assert any("moves money back to the customer" in t for t in section_texts(body))
    contexts = [e["text"] for b in by_type(body, "context") for e in b["elements"]]
    assert any("approve what you see: hash `0123456789ab`" in c for c in contexts)

    (actions,) = by_type(body, "actions")
    assert actions["block_id"] == "actions:req_abc123_1"
    found = buttons(body)
    assert list(found) == [B.APPROVE, B.APPROVE_COMMENT, B.APPROVE_ALWAYS, B.REJECT]
    assert [b["text"]["text"] for b in found.values()] == [
        "Approve",
        "Approve with comment",
        "Approve for this run",
        "Reject",
    ]
    assert all(b["value"] == "req_abc123_1" for b in found.values())
    assert found[B.APPROVE]["style"] == "primary"
    assert "style" not in found[B.APPROVE_ALWAYS]
    assert "style" not in found[B.APPROVE_COMMENT] and "confirm" not in found[B.APPROVE_COMMENT]
    assert found[B.REJECT]["style"] == "danger"


def test_action_ids_are_the_documented_constants() -> None:
    assert (B.APPROVE, B.APPROVE_ALWAYS, B.REJECT, B.ANSWER, B.APPROVE_COMMENT, B.EDIT) == (
        "countersign_approve",
        "countersign_approve_always",
        "countersign_reject",
        "countersign_answer",
        "countersign_approve_comment",
        "countersign_edit",
    )
    assert (B.REJECT_MODAL, B.ANSWER_MODAL, B.COMMENT_MODAL, B.EDIT_MODAL) == (
        "countersign_reject_modal",
        "countersign_answer_modal",
        "countersign_comment_modal",
        "countersign_edit_modal",
    )
    assert (B.REASON_BLOCK, B.REASON_INPUT, B.ANSWER_BLOCK, B.ANSWER_INPUT) == (
        "reason",
        "reason_input",
        "answer",
        "answer_input",
    )


def test_requested_by_missing_shows_a_dash() -> None:
    _, body = B.approval_message(make_request(requested_by=""))
    assert "*Requested by*\n—" in field_texts(body)


@pytest.mark.parametrize(
    ("severity", "confirmed"),
    [("low", False), ("medium", False), ("high", True), ("critical", True)],
)
def test_confirm_dialog_only_for_high_and_critical(severity: str, confirmed: bool) -> None:
    request = make_request(severity=severity, arguments={"path": "/etc/hosts"})
    _, body = B.approval_message(request)
    approve = buttons(body)[B.APPROVE]
    assert ("confirm" in approve) is confirmed
    others = {k: b for k, b in buttons(body).items() if k not in (B.APPROVE, B.APPROVE_ALWAYS)}
    assert all("confirm" not in b for b in others.values())
    # "Approve for this run" always says how far it reaches
    always = buttons(body)[B.APPROVE_ALWAYS]["confirm"]["text"]["text"]
    assert "later calls of issue_refund in this run" in always
    if confirmed:
        confirm = approve["confirm"]
        assert confirm["confirm"]["text"] == "Approve"
        assert confirm["deny"]["text"] == "Cancel"
        assert "issue_refund" in confirm["title"]["text"]
        assert "issue_refund" in confirm["text"]["text"]
        assert "/etc/hosts" in confirm["text"]["text"]


def test_no_approve_always_when_not_allowed() -> None:
    _, body = B.approval_message(make_request(allow_always=False))
    assert list(buttons(body)) == [B.APPROVE, B.APPROVE_COMMENT, B.REJECT]


def test_question_has_answer_and_reject() -> None:
    request = question()
    text, body = B.approval_message(request)
    check_message((text, body))
    (header,) = by_type(body, "header")
    assert header["text"]["text"] == "Question from support-agent"
    assert written_after(body, "*Question*") == "Refund or replace?"
    found = buttons(body)
    assert list(found) == [B.ANSWER, B.REJECT]
    assert found[B.ANSWER]["style"] == "primary"
    assert found[B.REJECT]["style"] == "danger"
    assert all(b["value"] == request.request_id for b in found.values())
    assert "Refund or replace?" in text


def test_quorum_progress() -> None:
    request = make_request(route=Route(quorum=2), approvals=["U0ALICE"])
    _, body = B.approval_message(request)
    contexts = [e["text"] for b in by_type(body, "context") for e in b["elements"]]
    assert any("1 of 2 approvals" in c and "<@U0ALICE>" in c for c in contexts)
    _, single = B.approval_message(make_request())
    assert not any("approvals" in s for s in strings(single))


def test_secrets_are_masked_at_any_depth() -> None:
    arguments = {
        "db": {"Password": "hunter2", "hosts": [{"AUTHORIZATION": "Bearer zzz-top"}]},
        "api_key": "x",
        "X-Api-Key": "dashed-key",
        "service": {"client_secret": {"nested": "whole-value"}},
        "GitHubToken": "ghp_abc",
        "private_key": "-----BEGIN",
        "passwd": "pw1",
        "credentials": ["cred-one", "cred-two"],
        "user": "alice",
    }
    for severity in ("low", "critical"):
        request = make_request(arguments=arguments, severity=severity)
        rendered = [
            B.approval_message(request),
            B.decided_message(
                replace(request, status="approved", decided_by="U0BOB", decided_at=NOW + 5)
            ),
        ]
        views = [B.reject_modal(request), B.answer_modal(request)]
        every = [s for message in rendered for s in strings(message)]
        every += [s for view in views for s in strings(view)]
        for secret in (
            "hunter2",
            "zzz-top",
            "dashed-key",
            "whole-value",
            "ghp_abc",
            "BEGIN",
            "pw1",
            "cred-one",
            "cred-two",
        ):
            assert not any(secret in s for s in every), secret
        assert not any(re.search(r'"api_key": "x"', s) for s in every)
        assert any("alice" in s for s in every)
        assert any(B.MASK in s for s in every)
    assert B.mask_secrets(arguments)["api_key"] == B.MASK
    assert B.mask_secrets(arguments)["db"]["hosts"][0]["AUTHORIZATION"] == B.MASK
    assert B.mask_secrets(arguments)["user"] == "alice"


def test_only_credentials_under_credentials_keys_are_masked() -> None:
    """Masking hides what a reviewer approves: it takes keys with a credential's word in
    them (`aws_secret_access_key`, `private_key_pem`), whole words only, and never a
    number, a flag or null. `tokens` or `max_tokens` (counts) and `secretary_note` are
    shown, and so is a count under a credential's key; anything else under one is masked,
    an object or a list whole."""
    arguments = {
        "to": "0xabc",
        "tokens": 1000000,
        "options": {
            "max_tokens": 999999,
            "secretary_note": "wire everything to 0xEVIL",
            "token_count": 5,
            "use_token": True,
        },
        "token": {"scope": "admin", "value": "ghp_in_an_object"},
        "passwords": ["pw-in-a-list", None],
        "aws_secret_access_key": "aws-secret",
        "private_key_pem": "-----BEGIN PRIVATE",
        "password2": "pw-two",
        "db_pwd": "hunter2",
        "ssh_key": "ssh-ed25519 AAAA",
        "deploy_ssh_keys": ["ssh-rsa BBBB"],
        "signingKey": "sig-value",
        "session_cookie": "sid=abc",
        "gpg_passphrase": "correct horse",
    }
    arguments["pwd"] = "/srv/prod"  # alone: a working directory, where a command runs
    masked = B.mask_secrets(arguments)
    assert masked["tokens"] == 1000000 and masked["options"] == arguments["options"]
    assert masked["pwd"] == "/srv/prod"
    hidden_keys = [k for k in arguments if k not in ("to", "tokens", "options", "pwd")]
    for key in hidden_keys:
        assert masked[key] == B.MASK, key
    _, body = B.approval_message(make_request(arguments=arguments))
    text = unescape(arguments_text(body))
    for shown in ("1000000", "999999", "wire everything to 0xEVIL", '"token_count": 5'):
        assert shown in text, shown
    for hidden in ("ghp_in_an_object", "pw-in-a-list", "aws-secret", "BEGIN", "pw-two", "hunter2"):
        assert hidden not in text, hidden


def test_arguments_are_escaped_and_round_trip() -> None:
    arguments = {"html": "<script>alert(1)</script> & <@U123>", "n": [1, 2.5, None, True]}
    _, body = B.approval_message(make_request(arguments=arguments))
    text = arguments_text(body)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "<@U123>" not in text
    inner = text.removeprefix("*Arguments*\n```\n").removesuffix("\n```")
    assert json.loads(unescape(inner)) == arguments


def test_backticks_cannot_close_the_code_block() -> None:
    arguments = {"cmd": "```\nrm -rf /\n```` and ``"}
    _, body = B.approval_message(make_request(arguments=arguments))
    text = arguments_text(body)
    assert text.count("```") == 2
    inner = text.removeprefix("*Arguments*\n```\n").removesuffix("\n```")
    assert json.loads(unescape(inner).replace("\u200b", "")) == arguments


def test_huge_arguments_are_cut_with_a_note() -> None:
    arguments = {"blob": "A&<" * 5000, "tail": "end"}
    request = make_request(arguments=arguments, severity="critical")
    message = B.approval_message(request)
    check_message(message)
    text = arguments_text(message[1])
    assert units(text) <= 3000
    full = json.dumps(arguments, indent=2, ensure_ascii=False)
    match = re.search(r"\n… \(truncated, (\d+) more characters\)$", text)
    assert match is not None
    inner = text[: match.start()].removeprefix("*Arguments*\n```\n").removesuffix("\n```")
    kept = unescape(inner)
    assert full.startswith(kept)
    assert len(full) - len(kept) == int(match.group(1))
    assert balanced(text)


def test_long_names_and_reason_fit() -> None:
    request = make_request(
        agent="a" * 5000,
        tool="t&" * 3000,
        reason="```python\n" + "x<" * 4000,
        requested_by="someone " * 500,
        severity="s" * 500,
        request_id="req_" + "9" * 180,
    )
    check_message(B.approval_message(request))
    check_modal(B.reject_modal(request))
    decided = replace(
        request,
        status="rejected",
        decided_by="U0BOB",
        decided_at=NOW,
        decision=Reject(message="no " * 3000),
    )
    check_message(B.decided_message(decided))


# -- decided --------------------------------------------------------------------------------
def decided(
    request: ApprovalRequest, status: RequestStatus, by: str, decision: dict[str, Any]
) -> ApprovalRequest:
    return replace(
        request,
        status=status,
        decided_by=by,
        decided_at=NOW + 60,
        decision=decision_adapter.validate_python(decision),
    )


def outcome_section(body: list[dict[str, Any]]) -> str:
    return section_texts(body)[-1]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            decided(make_request(), "approved", "U0BOB", {"kind": "approve"}),
            ":white_check_mark: Approved by <@U0BOB>",
        ),
        (
            decided(make_request(), "rejected", "U0BOB", {"kind": "reject", "message": "no <b>"}),
            ":x: Rejected by <@U0BOB>: no &lt;b&gt;",
        ),
        (
            decided(
                make_request(),
                "changes_requested",
                "webhook",
                {"kind": "request_changes", "feedback": "smaller amount"},
            ),
            ":memo: Changes requested via webhook: smaller amount",
        ),
        (
            decided(question(), "answered", "U0BOB", {"kind": "answer", "text": "replace it"}),
            ":speech_balloon: Answered by <@U0BOB>: replace it",
        ),
        (
            decided(make_request(), "expired", "countersign (expired)", {"kind": "expired"}),
            ":hourglass: Expired — nobody decided before "
            f"<!date^{int(NOW + 3600)}^{{date_short_pretty}} at {{time}}|2023-11-14 23:13 UTC>; "
            "the call was not run",
        ),
    ],
)
def test_decided_message_states_outcome(request_: ApprovalRequest, expected: str) -> None:
    text, body = B.decided_message(request_)
    check_message((text, body))
    assert not by_type(body, "actions")
    assert not buttons(body)
    outcome = outcome_section(body)
    assert outcome.startswith(expected), outcome
    assert f"<!date^{int(NOW + 60)}^" in outcome
    assert request_.decided_by in text
    # the same information as the pending message
    assert len(field_texts(body)) == 6
    assert arguments_text(body) == arguments_text(B.approval_message(request_)[1])


def test_decided_headers() -> None:
    approved = decided(make_request(), "approved", "U0BOB", {"kind": "approve"})
    (header,) = by_type(B.decided_message(approved)[1], "header")
    assert header["text"]["text"] == "Approved: issue_refund"
    answered = decided(question(), "answered", "U0BOB", {"kind": "answer", "text": "ok"})
    (header,) = by_type(B.decided_message(answered)[1], "header")
    assert header["text"]["text"] == "Answered: question from support-agent"


def test_decided_rejection_without_reason_and_always() -> None:
    request = decided(make_request(), "rejected", "U0BOB", {"kind": "reject", "message": ""})
    assert outcome_section(B.decided_message(request)[1]).startswith(
        ":x: Rejected by <@U0BOB>\n_Decided"
    )
    always = decided(make_request(), "approved", "U0BOB", {"kind": "approve", "always": True})
    assert "later calls of `issue_refund`" in outcome_section(B.decided_message(always)[1])


def test_decided_quorum_names_every_approver() -> None:
    request = decided(
        make_request(route=Route(quorum=2), approvals=["U0ALICE", "U0BOB"]),
        "approved",
        "U0BOB",
        {"kind": "approve"},
    )
    outcome = outcome_section(B.decided_message(request)[1])
    assert "Approved by <@U0ALICE>, <@U0BOB> (2 of 2 approvals)" in outcome


# -- modals ---------------------------------------------------------------------------------
def test_reject_modal() -> None:
    request = make_request(arguments={"order_id": "123", "token": "s3cr3t"})
    view = B.reject_modal(request)
    check_modal(view)
    assert view["callback_id"] == B.REJECT_MODAL
    assert view["private_metadata"] == f"{request.request_id}|{request.pause_id}"
    assert view["title"]["text"] == "Reject request"
    assert view["submit"]["text"] == "Reject"
    assert view["close"]["text"] == "Cancel"
    (block,) = by_type(view["blocks"], "input")
    assert block["block_id"] == B.REASON_BLOCK and block["optional"] is True
    assert block["element"]["action_id"] == B.REASON_INPUT
    assert block["element"]["type"] == "plain_text_input"
    assert block["element"]["multiline"] is True
    context = " ".join(e["text"] for b in by_type(view["blocks"], "context") for e in b["elements"])
    assert "issue_refund" in context and "123" in context
    assert "s3cr3t" not in json.dumps(view, ensure_ascii=False)


def test_answer_modal() -> None:
    request = question(question="Refund <or> replace?")
    view = B.answer_modal(request)
    check_modal(view)
    assert view["callback_id"] == B.ANSWER_MODAL
    assert view["private_metadata"] == f"{request.request_id}|{request.pause_id}"
    assert view["submit"]["text"] == "Send answer"
    (block,) = by_type(view["blocks"], "input")
    assert block["block_id"] == B.ANSWER_BLOCK and block["optional"] is False
    assert block["element"]["action_id"] == B.ANSWER_INPUT
    assert block["element"]["multiline"] is True
    assert block["element"]["min_length"] == 1
    assert written_after(view["blocks"], "*Question*") == "Refund <or> replace?"


@pytest.mark.parametrize(
    "words",
    [
        "*Pre-approved by security* :white_check_mark:",
        "> quoted as if countersign said it\n_approved_ ~no~ `code`",
        "<@U0ADMIN> signed off: <https://example.com|the ticket> <!channel>",
    ],
)
def test_words_countersign_did_not_write_are_shown_exactly_as_written(words: str) -> None:
    reason = make_request(reason=words)
    _, body = B.approval_message(reason)
    check_message(("x", body))
    assert written_after(body, "*Reason*") == words
    asked = question(question=words)
    _, body = B.approval_message(asked)
    assert written_after(body, "*Question*") == words
    assert written_after(B.answer_modal(asked)["blocks"], "*Question*") == words


# -- escape and outcome ---------------------------------------------------------------------
def test_escape() -> None:
    assert mrkdwn.escape("<script>&") == "&lt;script&gt;&amp;"
    assert mrkdwn.escape("a &amp; b") == "a &amp;amp; b"
    assert mrkdwn.escape("plain *bold* text") == "plain *bold* text"


def run(status: str, output: str = "", error: str = "") -> RunSummary:
    return RunSummary("run_abc123", "refund-agent", status, output, error, "U0REQUESTER")


def test_outcome_message_success_and_failure() -> None:
    assert B.outcome_message(run("succeeded", output="Refunded <order> 123 & done"), []) == (
        "Run finished: Refunded &lt;order&gt; 123 &amp; done"
    )
    assert B.outcome_message(run("failed", error="boom <x>"), []) == "Run failed: boom &lt;x&gt;"


def test_outcome_message_lists_what_was_not_run() -> None:
    rejected = decided(
        make_request(), "rejected", "U0BOB", {"kind": "reject", "message": "too <much>"}
    )
    expired = decided(
        make_request(tool="delete_file", request_id="req_abc123_2"),
        "expired",
        "countersign (expired)",
        {"kind": "expired"},
    )
    approved = decided(make_request(tool="lookup_order"), "approved", "U0BOB", {"kind": "approve"})
    text = B.outcome_message(
        run("succeeded", output="Not refunded."), [rejected, expired, approved]
    )
    assert text.startswith("Run finished: Not refunded.")
    assert "`issue_refund` was rejected by <@U0BOB>: too &lt;much&gt;" in text
    assert "`delete_file` expired" in text
    assert "lookup_order" not in text


def test_outcome_message_is_cut() -> None:
    many = [
        decided(
            make_request(request_id=f"req_x_{i}"),
            "rejected",
            "U0BOB",
            {"kind": "reject", "message": "nope " * 100},
        )
        for i in range(50)
    ]
    text = B.outcome_message(run("failed", error="<" * 10_000), many)
    assert units(text) <= 3000
    assert text.startswith("Run failed: &lt;")
    assert "truncated" in text and "more" in text
    assert balanced(text)


# -- properties -----------------------------------------------------------------------------
_TRICKY = ["```", "`", "&", "<", ">", "<@U123>", "<!channel>", "*", "_", "~", "😀", "\n", "é"]
_chars = st.characters(exclude_characters="\u200b")  # surrogates are excluded by default
short_text = st.text(_chars, max_size=30) | st.sampled_from(_TRICKY)
huge_text = st.builds(
    lambda part, times: (part * times)[:20_000],
    st.text(_chars, min_size=1, max_size=8) | st.sampled_from(_TRICKY),
    st.integers(0, 20_000),
)
keys = short_text | st.sampled_from(["password", "Api_Key", "db_token", "Authorization", "x"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text
    | huge_text
)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: hypothesis reads a lambda's source to check that it recurses.
    return st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4)


json_values = st.recursive(scalars, containers, max_leaves=12)
arguments = st.dictionaries(keys, json_values, max_size=6) | json_values


PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(
    args=arguments,
    severity=st.sampled_from(["low", "medium", "high", "critical", "weird"]),
    kind=st.sampled_from(["approval", "question"]),
    allow_always=st.booleans(),
)
def test_any_arguments_respect_limits(
    args: Any, severity: str, kind: str, allow_always: bool
) -> None:
    request = make_request(arguments=args, severity=severity, kind=kind, allow_always=allow_always)
    pending = B.approval_message(request)
    check_message(pending)
    finished = replace(
        request,
        status="rejected",
        decided_by="U0BOB",
        decided_at=NOW,
        decision=Reject(message="no"),
    )
    check_message(B.decided_message(finished))
    check_modal(B.reject_modal(request))
    check_modal(B.answer_modal(request))

    text = arguments_text(pending[1])
    assert text.startswith("*Arguments*\n```\n")
    # As shown: characters that hide themselves are escapes, so the JSON reads back whole.
    full = shown_json(args)
    assert full is not None
    match = re.search(r"\n```\n… \(truncated, (\d+) more characters\)$", text)
    if match is None:
        inner = text.removeprefix("*Arguments*\n```\n").removesuffix("\n```")
        parsed = json.loads(unescape(inner).replace("\u200b", ""))
        assert parsed == json.loads(json.dumps(B.mask_secrets(args)))
    else:
        inner = text[: match.start()].removeprefix("*Arguments*\n```\n")
        kept = unescape(inner).replace("\u200b", "")
        assert full.startswith(kept)
        assert len(full) - len(kept) == int(match.group(1)) > 0


@PROPERTY
@given(
    agent=short_text | huge_text,
    tool=short_text | huge_text,
    reason=short_text | huge_text,
    by=short_text | st.sampled_from(["U0BOB", "countersign (expired)", ""]),
    detail=short_text | huge_text,
    status=st.sampled_from(
        ["approved", "rejected", "changes_requested", "answered", "expired", "pending"]
    ),
    quorum=st.integers(1, 3),
)
def test_any_text_respects_limits(
    agent: str, tool: str, reason: str, by: str, detail: str, status: RequestStatus, quorum: int
) -> None:
    request = make_request(
        agent=agent,
        tool=tool,
        reason=reason,
        question=reason,
        requested_by=by,
        route=Route(quorum=quorum),
        approvals=[by] if by else [],
    )
    for kind in ("approval", "question"):
        current = replace(request, kind=kind)
        check_message(B.approval_message(current))
        check_modal(B.reject_modal(current))
        check_modal(B.answer_modal(current))
        finished = replace(
            current,
            status=status,
            decided_by=by,
            decided_at=NOW,
            decision=Reject(message=detail),
        )
        check_message(B.decided_message(finished))
        for run_status in ("succeeded", "failed", "waiting"):
            text = B.outcome_message(run(run_status, detail, reason), [finished] * 3)
            assert units(text) <= 3000 and balanced(text)
            assert "<" not in re.sub(r"<(@[UW]|!subteam\^S)[A-Z0-9]+>", "", text)


# -- context, list lines and the App Home tab -----------------------------------------------
@PROPERTY
@given(
    args=arguments,
    what=short_text | huge_text,
    said=short_text | huge_text,
    result=short_text | huge_text,
    earlier=st.integers(0, 12),
    url=st.sampled_from(["", "https://t.slack.com/archives/C1/p1", "javascript:<x|y>"]),
)
def test_context_list_lines_and_the_home_tab_respect_limits(
    args: Any, what: str, said: str, result: str, earlier: int, url: str
) -> None:
    from agent_host.approvals.context import CallContext, EarlierCall, bounded
    from bot.blocks.home import home_view
    from bot.blocks.listing import LINE_MAX, request_line

    calls = tuple(EarlierCall(what, bounded(args), "executed", result) for _ in range(earlier))
    context = CallContext(calls[-5:], max(0, earlier - 5), said)
    request = make_request(
        arguments=args, tool=what, agent=what, question=what, context=context, message_ts="1.2"
    )
    for kind in ("approval", "question"):
        current = replace(request, kind=kind)
        check_message(B.approval_message(current))
        line = request_line(current, NOW + 90, url)
        assert units(line) <= LINE_MAX and line.count("\n") == 1
        assert "<" not in re.sub(r"<(@[UW][A-Z0-9]+|!date\^[^>]+|https://t\.slack[^>]+)>", "", line)
    many = [replace(request, request_id=f"req_abc123_{n}") for n in range(25)]
    view = home_view("U0ME", many, many[:12], {r.request_id: url for r in many}, NOW)
    assert check_view(view) is None and len(view["blocks"]) <= 100
    check_limits(view["blocks"], max_blocks=100)


def test_a_list_line_with_every_field_at_its_bound_stays_within_line_max() -> None:
    from bot.blocks.listing import LINE_MAX, request_line

    worst = make_request(
        request_id="req_" + "f" * 20 + "_9999",
        tool="&" * 200,
        agent="&" * 200,
        severity="&" * 50,
        requested_by="W" + "Z" * 20,
        arguments={"&" * 40: "&" * 400, "<": ["&>" * 100]},
        route=Route(quorum=10),
        approvals=[f"U{n}" for n in range(9)],
        message_ts="1.2",
    )
    line = request_line(worst, NOW + 86400 * 400, "https://x.slack.com/" + "a" * 880)
    assert 1500 < units(line) <= LINE_MAX


def test_ages_read_as_people_say_them() -> None:
    from bot.blocks.listing import age

    assert [age(s) for s in (0, 59, 60, 12 * 60, 3 * 3600 + 5, 47 * 3600, 2 * 86400 + 1)] == [
        "<1m",
        "<1m",
        "1m",
        "12m",
        "3h",
        "1d",
        "2d",
    ]


def test_arguments_nested_too_deeply_to_show_are_never_offered_for_approval() -> None:
    """Stored before such arguments were refused where they come in: shown as what they
    are, and only Reject is offered, on the message and in the App Home tab."""
    deep: Any = {}
    for _ in range(3000):
        deep = {"in": deep}
    request = make_request(arguments=deep)
    text, body = B.approval_message(request)
    check_message((text, body))
    assert "nested too deeply to show" in json.dumps(body)
    [actions] = [b for b in body if b["type"] == "actions"]
    assert [e["action_id"] for e in actions["elements"]] == [B.REJECT]
    assert not B.shown_in_full(request) and not B.shown_in_full(request, in_home=True)
    assert isinstance(B.whole_call_modal(request), str)


def test_characters_that_hide_or_reorder_text_are_shown_as_escapes() -> None:
    """A right-to-left override can make `/srv/prod-data` read as something else, and a
    zero-width space hides between letters: the reviewer sees each as its JSON escape,
    in the message, its one-line summary and the form showing a call whole."""
    path = "/tmp/\u202eatad-dorp/vrs\u202c/x\u200by\u2028z"
    request = make_request(arguments={"path": path, "note": "héllo 日本", "dir": "/srv/prod\x7f"})
    _, body = B.approval_message(request)
    shown = json.dumps(body, ensure_ascii=False)
    for invisible in ("\u202e", "\u202c", "\u200b", "\u2028", "\x7f"):
        assert invisible not in shown
        assert json.dumps(invisible)[1:-1] in shown  # as the six characters of its escape
    assert "héllo 日本" in shown  # other text as it is
    view = B.whole_call_modal(request)
    assert isinstance(view, dict) and "\u202e" not in json.dumps(view, ensure_ascii=False)


def test_earlier_calls_are_shown_as_code_never_as_formatting() -> None:
    """An earlier call's arguments and result (what a customer typed into an order, say)
    cannot make a bold, check-marked "pre-approved" line in the message: they are code."""
    from agent_host.approvals.context import CallContext, EarlierCall

    said = "ok ~42.50~ *:white_check_mark: PRE-APPROVED BY SECURITY* `x`"
    earlier = EarlierCall("lookup_order", {"note": "*verified* by <finance>"}, "executed", said)
    _, body = B.approval_message(make_request(context=CallContext((earlier,), 0, "")))
    texts = [b["text"]["text"] for b in body if b["type"] == "section" and "text" in b]
    [line] = [ln for text in texts for ln in text.splitlines() if "lookup_order" in ln]
    assert '`{"note": "*verified* by &lt;finance&gt;"}`' in line
    assert line.endswith(
        ": `ok ~42.50~ *:white_check_mark: PRE-APPROVED BY SECURITY* \u02cbx\u02cb`"
    )


def test_earlier_calls_past_the_limit_leave_out_the_oldest_and_say_so() -> None:
    """Results full of `<`, `&` and `>` (five characters each once escaped) fill the
    section: the oldest calls are counted as left out, the latest are always shown, and a
    character that hides or reorders text is shown as its escape there too."""
    from agent_host.approvals.context import CallContext, EarlierCall

    pages = [
        EarlierCall(f"fetch_page_{n}", {"url": "<&>" * 40}, "executed", "<b>&amp;</b>" * 30)
        for n in range(5)
    ]
    hiding = EarlierCall("lookup\u202eredro", {}, "executed", "note: \u202edevorppa\u202c")
    calls = (*pages, hiding)
    _, body = B.approval_message(make_request(context=CallContext(calls, 2, "")))
    [text] = [t for t in section_texts(body) if "Before this call" in t]
    assert units(text) <= 3000
    shown = [n for n in range(5) if f"fetch_page_{n}" in text]
    assert shown == list(range(5 - len(shown), 5)) and len(shown) < 5  # the latest ones
    assert f"… {2 + 5 - len(shown)} earlier calls" in text
    assert "\u202e" not in text and "lookup\\u202eredro" in text and "\\u202edevorppa" in text


def test_a_list_line_shows_arguments_as_code_and_only_then_counts_as_whole() -> None:
    from bot.blocks.listing import request_line

    request = make_request(arguments={"cmd": "rm -rf *tmp* :x:"})
    assert '`{"cmd": "rm -rf *tmp* :x:"}`' in request_line(request, NOW)
    assert B.shown_in_full(request, in_home=True)
    ticked = make_request(arguments={"cmd": "echo `id`"})
    assert not B.shown_in_full(ticked, in_home=True)


def test_a_list_line_shows_a_question_as_code_never_as_formatting() -> None:
    from bot.blocks.listing import request_line

    asked = question(question="ok? *Pre-approved by security* :white_check_mark:")
    line = request_line(asked, NOW)
    assert "`ok? *Pre-approved by security* :white_check_mark:`" in line
    assert "*ok?" not in line  # not bold, as the tool's name is
    ticked = request_line(question(question="`` *Pre-approved* `x`"), NOW)
    assert "`\u02cb\u02cb *Pre-approved* \u02cbx\u02cb`" in ticked  # a backtick ends no code

    from bot.blocks.home import home_view

    recent = home_view("U0ME", [], [asked], {}, NOW)  # the tab's recent decisions too
    assert "`ok? *Pre-approved by security* :white_check_mark:`" in json.dumps(recent)
    assert "*ok?" not in json.dumps(recent)


def test_a_requester_or_decider_named_by_a_user_group_id_does_not_notify_the_group() -> None:
    """`requested_by` (given through the API) is a person's id as given: one shaped like a
    user group's (S…) is shown as written, not as a mention that pings the group; whoever
    decided is shown the same way."""
    posted = json.dumps(B.approval_message(make_request(requested_by="S0EVERYONE")))
    decided = make_request(status="approved", decided_by="S0EVERYONE", decided_at=NOW + 5)
    shown = posted + json.dumps(B.decided_message(decided))
    assert "subteam" not in shown and "S0EVERYONE" in shown
