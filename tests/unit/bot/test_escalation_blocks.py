"""The escalation ladder's Slack texts: the reminder, the line on an escalated copy and on
the original, within Block Kit's limits whatever the request holds, and with no mention or
link that did not come from the route or from Slack."""

from __future__ import annotations

from dataclasses import replace

from agent_host.approvals import EscalatedCopy, RequestStatus, Route
from bot import blocks as B
from bot.blocks import escalation
from slack_sandbox.blockkit import MAX_MESSAGE_BLOCKS, check_blocks
from tests.unit.bot.test_blocks import make_request

LINK = "https://countersign-sandbox.slack.com/archives/C0APPROVALS/p1700000000000100"
LADDER = Route(
    destination="C0APPROVALS",
    reviewers=("U0REVIEWER", "S0REVIEWERS"),
    remind_after_seconds=1800,
    escalate_after_seconds=7200,
    escalate_to="C0OPS",
)


def test_the_reminder_mentions_the_reviewers_and_says_what_comes_next() -> None:
    text = escalation.reminder_text(make_request(route=LADDER))
    assert text.startswith("<@U0REVIEWER> <!subteam^S0REVIEWERS> :alarm_clock:")
    assert "`req_abc123_1`" in text and "since <!date^1700000000^" in text
    assert "escalated to <#C0OPS> at <!date^1700007200^" in text
    assert "expires <!date^1700003600^" in text
    escalated = make_request(route=LADDER, escalations=[EscalatedCopy("C0OPS", "C0OPS", "1.2")])
    assert "escalated to" not in escalation.reminder_text(escalated)
    anyone = escalation.reminder_text(make_request(route=Route(remind_after_seconds=60)))
    assert anyone.startswith(":alarm_clock:") and "Anyone here may decide it." in anyone


def test_a_reminder_names_at_most_thirty_reviewers_and_nothing_the_model_wrote() -> None:
    many = tuple(f"U{n:04d}" for n in range(40))
    hostile = make_request(
        route=Route(reviewers=many, remind_after_seconds=60), tool="<!channel> <@U0BOSS>"
    )
    text = escalation.reminder_text(hostile)
    assert text.count("<@U") == escalation.REMINDER_MENTIONS_MAX
    assert "and 10 more reviewers" in text
    assert "<!channel>" not in text and "<@U0BOSS>" not in text
    assert "&lt;!channel&gt;" in text


def test_an_escalated_copy_links_the_original_only_through_a_slack_permalink() -> None:
    request = make_request(route=LADDER, message_channel="C0APPROVALS", message_ts="1.1")
    note = escalation.copy_note(request, LINK)
    assert f"<{LINK}|the original request> in <#C0APPROVALS>" in note
    assert "deciding here decides it there too" in note
    for forged in ("http://evil.example/x", "https://evil.example/a|b", "javascript:x", ""):
        assert "<http" not in escalation.copy_note(request, forged)
        assert "the original request in <#C0APPROVALS>" in escalation.copy_note(request, forged)
    decided = replace(request, status=RequestStatus.APPROVED)
    assert escalation.copy_note(decided, LINK).startswith(":rotating_light: Escalated copy of")


def test_the_original_says_where_it_was_escalated() -> None:
    assert "Escalated to <#C0OPS>." in escalation.escalated_note(make_request(route=LADDER))
    group = replace(LADDER, escalate_to="S0ONCALL")
    assert "Escalated to <!subteam^S0ONCALL>." in escalation.escalated_note(
        make_request(route=group)
    )


def test_a_copy_of_a_huge_request_stays_within_block_kit_limits() -> None:
    huge = make_request(
        route=LADDER,
        arguments={f"k{n}": "x" * 500 for n in range(20)},  # 10 KB of arguments
        reason="r" * 5000,
        tool="t" * 400,
    )
    for render in (B.approval_message, B.decided_message):
        text, body = escalation.with_note(escalation.copy_note(huge, LINK), *render(huge))
        assert body[0]["type"] == "context"
        assert check_blocks(body, limit=MAX_MESSAGE_BLOCKS) is None
        assert len(text) < 40_000


def test_a_note_on_a_message_already_at_the_block_limit_goes_in_its_text() -> None:
    full = [{"type": "divider"}] * B.MESSAGE_BLOCKS_MAX
    text, body = escalation.with_note("note", "fallback", full)
    assert body == full and text == "note\nfallback"
