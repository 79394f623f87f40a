"""The message of many calls (bot/blocks/bulk.py) within Block Kit's limits for any input:
200 calls, 10 KB arguments, mention and markup injection in tool names and arguments; the
buttons and what they carry; and the bulk listener's answers and click checks."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_host.approvals import ApprovalRequest, RequestStatus, Route
from agent_host.approvals.bulk import Bulk, BulkTally, plan_bulks
from agent_host.runtime.decisions import Approve, Reject
from bot import blocks as B
from bot.listeners.bulk import tally_text
from bot.listeners.buttons import refusal
from bot.parsing import Click

from .test_blocks import (
    PROPERTY,
    arguments,
    buttons,
    by_type,
    check_message,
    check_modal,
    huge_text,
    make_request,
    short_text,
    units,
)

HOSTILE = "line\n<!channel> <@U0ADMIN> <!here> <https://evil.example|click> *b* ```f` &amp; \u202e"
HUGE = (HOSTILE * 200)[:10_240]  # 10 KB
# What may stay a link or a mention: the requester, a decider, Slack dates.
ALLOWED = re.compile(r"<(@U0[A-Z0-9]+|!date\^[^>]+)>")


def calls(count: int, **changes: Any) -> tuple[Bulk, list[ApprovalRequest]]:
    requests = [
        make_request(
            request_id=f"req_abc123_{n:04d}",
            call_id=f"call_{n}",
            call_hash=f"{n:064x}",
            pause_id="req_abc123_0001",
            **changes,
        )
        for n in range(1, count + 1)
    ]
    [bulk] = plan_bulks(requests, 5)
    return replace(bulk, channel="C1", ts="1.2"), requests


def mrkdwn_texts(body: Any) -> list[str]:
    found: list[str] = []
    if isinstance(body, dict):
        if body.get("type") == "mrkdwn":
            found.append(body["text"])
        for value in body.values():
            found += mrkdwn_texts(value)
    elif isinstance(body, list):
        for value in body:
            found += mrkdwn_texts(value)
    return found


def assert_no_injection(body: Any) -> None:
    for text in mrkdwn_texts(body):
        assert "<" not in ALLOWED.sub("", text), text


def test_200_calls_with_10kb_arguments_and_mentions_stay_within_limits() -> None:
    hostile = {"path": HUGE, "note": HOSTILE, "nested": {"deeper": [HUGE, HOSTILE]}}
    bulk, requests = calls(200, tool=f"wipe{HOSTILE}" * 30, agent=HOSTILE, arguments=hostile)
    bulk = replace(bulk, agent=HOSTILE * 10)
    decided = [
        replace(r, status=RequestStatus.APPROVED, decided_by="U0BOB", decision=Approve())
        if n % 3 == 0
        else r
        for n, r in enumerate(requests)
    ]
    for shown in (requests, decided, [replace(r, status=RequestStatus.EXPIRED) for r in requests]):
        for current in (bulk, replace(bulk, split_by="U0ME")):
            text, body = B.bulk_message(current, shown)
            check_message((text, body))
            assert_no_injection(body)
            assert "<!channel>" not in text and "<@U0ADMIN>" not in text
            more = [t for t in mrkdwn_texts(body) if "more calls not listed here" in t]
            assert len(more) == 1
    check_modal(B.bulk_reject_modal(bulk, requests))
    assert_no_injection(B.bulk_reject_modal(bulk, requests))
    # Calls it cuts, or does not list, are not approved from it at once.
    body = B.bulk_message(bulk, requests)[1]
    assert B.BULK_APPROVE not in buttons(body)
    assert {B.BULK_REJECT, B.BULK_SPLIT} <= set(buttons(body))
    assert any("200 of the calls waiting are longer" in t for t in mrkdwn_texts(body))
    assert not B.lists_every_call_whole(requests)

    # Listed whole, however hostile the tool's and the agent's names: Approve all, bounded.
    bulk, requests = calls(40, tool=f"wipe{HOSTILE}" * 30, agent=HOSTILE, arguments={"n": 1})
    bulk = replace(bulk, agent=HOSTILE * 10)
    text, body = B.bulk_message(bulk, requests)
    check_message((text, body))
    assert B.lists_every_call_whole(requests)
    approve = buttons(body)[B.BULK_APPROVE]
    assert approve["text"]["text"] == "Approve all 40"
    assert approve["confirm"]["title"]["text"] == "Approve all 40 calls?"
    assert approve["confirm"]["text"]["text"].startswith("40 calls: wipe")


def test_approve_all_only_while_every_waiting_call_is_listed_whole() -> None:
    bulk, requests = calls(6, tool="delete_file")
    long_path = "/tmp/drafts/" + "archive-2019-q3-" * 8 + "../../../../srv/prod-database"
    cut = replace(requests[5], arguments={"path": long_path})
    _, body = B.bulk_message(bulk, [*requests[:5], cut])
    assert "prod-database" not in json.dumps(body)  # the row cuts it
    assert B.BULK_APPROVE not in buttons(body)
    assert any("1 of the calls waiting are longer" in t for t in mrkdwn_texts(body))
    assert not B.lists_every_call_whole([*requests[:5], cut])

    # Decided meanwhile (one by one, where it is shown whole): the rest are whole.
    done = replace(cut, status=RequestStatus.APPROVED, decided_by="U0BOB", decision=Approve())
    _, body = B.bulk_message(bulk, [*requests[:5], done])
    assert buttons(body)[B.BULK_APPROVE]["text"]["text"] == "Approve all 5"
    assert B.lists_every_call_whole([*requests[:5], done])

    # Whitespace runs a one-line row would merge are not shown as they are either.
    spaced = replace(requests[0], arguments={"path": "/tmp/a  b"})
    assert not B.lists_every_call_whole([spaced, *requests[1:]])
    # Past the rows a message lists, the rest are not shown at all.
    bulk, many = calls(41, tool="delete_file")
    assert not B.lists_every_call_whole(many)
    assert B.lists_every_call_whole(many[:40])


def test_rows_show_each_call_and_the_tally_and_buttons_follow_the_decisions() -> None:
    bulk, requests = calls(7, tool="delete_file", severity="high")
    requests[0] = replace(requests[0], arguments={"path": "/tmp/keep.txt"})
    text, body = B.bulk_message(bulk, requests)
    shown = json.dumps(body)
    assert "Approval needed: 7 calls from refund-agent" in shown
    assert "/tmp/keep.txt" not in text  # the notification names the tools, not arguments
    assert "delete_file (7)" in text and "7 waiting" in text
    assert shown.count("hash `0000000") == 7 and "7 calls: 7 waiting" in shown
    actions = by_type(body, "actions")
    assert [a["block_id"] for a in actions] == [B.bulk_block_id(bulk.bulk_id)]
    values = {e["value"] for e in actions[0]["elements"]}
    assert values == {B.bulk_value(bulk.bulk_id, bulk.digest)}
    assert B.parse_bulk_value(values.pop()) == (bulk.bulk_id, bulk.digest)
    assert B.APPROVE_ALWAYS not in buttons(body)

    requests[1] = replace(
        requests[1], status=RequestStatus.REJECTED, decided_by="U0BOB", decision=Reject()
    )
    requests[2] = replace(requests[2], route=Route(quorum=2), approvals=["U0ANN"])
    _, body = B.bulk_message(bulk, requests)
    shown = json.dumps(body)
    assert "7 calls: 6 waiting, 1 rejected" in shown and "decided by <@U0BOB>" in shown
    assert "(1 of 2 approvals)" in shown
    assert buttons(body)[B.BULK_APPROVE]["text"]["text"] == "Approve all 6"

    done = [replace(r, status=RequestStatus.APPROVED, decided_by="U0BOB") for r in requests]
    _, body = B.bulk_message(bulk, done)
    assert "All 7 calls decided" in json.dumps(body) and not by_type(body, "actions")
    _, body = B.bulk_message(replace(bulk, split_by="U0ANN"), requests)
    assert not by_type(body, "actions") and "<@U0ANN> chose to review" in json.dumps(body)


@PROPERTY
@given(
    args=arguments,
    tool=short_text | huge_text,
    agent=short_text | huge_text,
    reason=short_text | huge_text,
    severity=st.sampled_from(["low", "high", "critical", "weird"]),
    count=st.integers(6, 200),
)
def test_any_bulk_respects_limits(
    args: Any, tool: str, agent: str, reason: str, severity: str, count: int
) -> None:
    bulk, requests = calls(
        count, arguments=args, tool=tool, agent=agent, reason=reason, severity=severity
    )
    check_message(B.bulk_message(bulk, requests))
    check_modal(B.bulk_reject_modal(bulk, requests))
    assert_no_injection(B.bulk_message(bulk, requests)[1])


def test_the_reply_to_approve_all_names_what_it_left_waiting_bounded() -> None:
    _, requests = calls(200, tool=HUGE)
    tally = BulkTally(
        decided=requests[:3],
        refused=[(r, "you are not a reviewer for this request") for r in requests[3:]],
    )
    text = tally_text("Approved", tally)
    assert text.startswith(":white_check_mark: Approved 3 call(s).")
    assert "197 call(s) left waiting" in text and "• and 187 more" in text
    assert units(text) <= 3000 and "<!channel>" not in text
    assert "decided already" in tally_text("Approved", BulkTally(already=requests[:2]))


def click(**changes: Any) -> Click:
    base = Click(
        user="U0REV",
        channel="C1",
        message_ts="1.2",
        block_id="actions:req_abc123_0002",
        action_id=B.APPROVE,
        message_block_ids=frozenset({"bulk:req_abc123_0001"}),
        request_id="req_abc123_0002",
        trigger_id="t",
    )
    return replace(base, **changes)


def test_a_call_shown_only_in_its_bulk_has_no_button_on_that_message() -> None:
    request = make_request(
        request_id="req_abc123_0002",
        bulk_id="req_abc123_0001",
        bulk_ts="1.2",
        message_channel="C1",
        message_ts="1.2",
    )
    assert request.only_in_bulk
    assert "does not belong" in refusal(request, click())  # a forged block on the bulk
    posted_alone = replace(request, message_ts="1.3")  # one by one: its own message
    assert refusal(posted_alone, click(message_ts="1.3")) == ""
    block = "actions:req_abc123_0002"
    assert refusal(request, click(message_block_ids=frozenset({block}))) == ""


def test_rows_show_arguments_as_code_so_nothing_in_them_is_formatting() -> None:
    """`*tmp*` would show as bold `tmp`, `:x:` as an emoji: as inline code, each is shown
    as written; a backtick, which would end the code, makes a row not whole."""
    bulk, requests = calls(6, tool="run_shell")
    formatted = {"cmd": "rm -rf *tmp* ~/old~ :x: _all_"}
    shown = [replace(r, arguments=formatted) for r in requests]
    _, body = B.bulk_message(bulk, shown)
    row = '`{"cmd": "rm -rf *tmp* ~/old~ :x: _all_"}`'
    assert all(row in t for t in mrkdwn_texts(body) if "run_shell" in t and "hash" in t)
    assert B.lists_every_call_whole(shown)
    ticked = [replace(r, arguments={"cmd": "echo `id`"}) for r in requests]
    assert not B.lists_every_call_whole(ticked)
    assert B.BULK_APPROVE not in buttons(B.bulk_message(bulk, ticked)[1])


def test_reasons_are_shown_as_written_never_as_formatting() -> None:
    bulk, requests = calls(6, reason="*Pre-approved by security* :white_check_mark: <!here>")
    _, body = B.bulk_message(bulk, requests)
    check_message(("x", body))
    sections = by_type(body, "section")
    [label] = [
        i
        for i, s in enumerate(sections)
        if s.get("text", {}).get("text", "").startswith("*Why they need approval*")
    ]
    shown = sections[label + 1]["text"]
    assert shown == {
        "type": "plain_text",
        "text": "• *Pre-approved by security* :white_check_mark: <!here>",
        "emoji": False,
    }
    assert all("Pre-approved" not in text for text in mrkdwn_texts(body))


def outside_code(text: str) -> str:
    """`text` without its code blocks and inline code: what Slack renders as formatting."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.DOTALL))


def test_agent_and_tool_names_are_code_wherever_they_are_shown() -> None:
    """An agent asking through the API names itself and its tool as it likes: a name is
    never a bold, check-marked line on the message, its forms, the reminder or the notes."""
    from bot.blocks import escalation

    agent = "billing\n:white_check_mark: *PRE-APPROVED by Finance*"
    tool = "issue_refund\n:white_check_mark: *PRE-APPROVED by Security* ~x~"
    ladder = Route(route_id="r1", remind_after_seconds=60)
    bulk, requests = calls(7, agent=agent, tool=tool, route=ladder)
    bulk = replace(bulk, agent=agent)
    one = requests[0]
    surfaces: list[str] = [
        *mrkdwn_texts(B.approval_message(one)[1]),
        *mrkdwn_texts(B.bulk_message(bulk, requests)[1]),
        *mrkdwn_texts(B.bulk_reject_modal(bulk, requests)),
        *mrkdwn_texts(B.comment_modal(one)),
        *mrkdwn_texts(B.reject_modal(one)),
        *mrkdwn_texts(B.whole_call_modal(one)),
        escalation.reminder_text(one),
        escalation.reminder_text(replace(one, bulk_id="")),
        escalation.copy_note(one, "https://example.slack.com/archives/C1/p1"),
        escalation.bulk_note(bulk, requests, "https://example.slack.com/archives/C1/p1"),
    ]
    for text in surfaces:
        assert "PRE-APPROVED" not in outside_code(text), text
    assert any("PRE-APPROVED by Finance" in text for text in surfaces)  # shown, as code


def test_forms_showing_both_names_fit_whatever_the_names_hold() -> None:
    """A tool's and an agent's name in one text, each all `&` (five characters escaped):
    every form still fits Block Kit's limits."""
    request = make_request(agent="&" * 300, tool="&<>" * 100)
    for view in (
        B.whole_call_modal(request),
        B.comment_modal(request),
        B.reject_modal(request),
        B.answer_modal(replace(request, kind="question", question="when?")),
    ):
        assert isinstance(view, dict)
        check_modal(view)


def test_a_bulk_escalation_note_says_whose_app_home_tab_lists_the_calls() -> None:
    """On a route naming reviewers, the tab lists a call for them alone (an escalation
    changes nobody's right to decide); on one naming none, for whoever the note reached."""
    from bot.blocks import escalation

    link = "https://example.slack.com/archives/C1/p1"
    named = Route(route_id="r1", reviewers=("U0REVIEWER",))
    bulk, requests = calls(6, route=named)
    note = escalation.bulk_note(bulk, requests, link)
    assert "6 of 6 calls" in note and "its reviewers also find each call" in note, note
    unnamed = Route(route_id="r2")
    bulk, requests = calls(6, route=unnamed)
    note = escalation.bulk_note(bulk, requests, link)
    assert f"<#{bulk.channel}>" in note and "or your countersign App Home tab" in note, note
