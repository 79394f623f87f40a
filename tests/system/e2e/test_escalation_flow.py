"""Reminders and escalation in Chromium through the sandbox page: an admin gives the refund
route a ladder with `/approvals route add`; a refund nobody decides gets a reminder in its
thread, then a copy in #ops-approvals that links the original; approving from the copy
updates both messages and the run succeeds."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS, Demo
from .sandbox_page import APPROVALS, APPROVE, OPS, REQUESTER, REVIEWER, Sandbox

pytestmark = pytest.mark.e2e

ADMIN = "U0ADMIN"
LADDER = (
    "/approvals route add agent=refund-agent tool=issue_refund channel=C0APPROVALS "
    "reviewers=U0REVIEWER,U0REVIEWER2 remind_after=2s escalate_after=4s escalate_to=C0OPS"
)


def test_a_request_nobody_decides_is_reminded_then_escalated_and_decided_there(
    page: Page, demo: Demo
) -> None:
    sandbox = Sandbox(page, demo.url)
    sandbox.open(ADMIN)
    sandbox.slash("/approvals route remove r2")  # the demo's refund route, matched first
    expect(sandbox.ephemerals().last).to_contain_text("Removed route r2")
    sandbox.slash(LADDER)
    expect(sandbox.ephemerals().last).to_contain_text("Added route")

    sandbox.act_as(REQUESTER)
    run_id = sandbox.start_run("refund-agent", "refund order 123")
    original = sandbox.pending_message("issue_refund")
    reminder = original.get_by_test_id("thread-reply").filter(has_text="waiting for a decision")
    expect(reminder).to_have_count(1, timeout=15_000)
    expect(reminder).to_contain_text("Rev One")

    sandbox.show_channel(OPS)
    copy = sandbox.pending_message("issue_refund", channel=OPS)
    expect(copy).to_contain_text("Escalated", timeout=15_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "escalated-copy.png"))

    sandbox.act_as(REVIEWER)
    sandbox.approve(copy, confirm_title="Approve issue_refund?")
    expect(copy.get_by_test_id(f"button-{APPROVE}")).to_have_count(0)
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
    sandbox.show_channel(APPROVALS)
    expect(original.get_by_test_id(f"button-{APPROVE}")).to_have_count(0)
    expect(original).to_contain_text("Approved")
