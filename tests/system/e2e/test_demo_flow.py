"""`countersign demo` end to end, as people use it: in Chromium, through the sandbox page.

Each test runs its own demo process (tests/system/e2e/conftest.py) so their requests never mix.
docs/images/sandbox.png is made by `python -m tests.system.e2e.docs_screenshot`, not by the tests.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS, Demo
from .sandbox_page import (
    APPROVALS,
    APPROVE,
    OPS,
    OUTSIDER,
    REJECT,
    REQUESTER,
    REVIEWER,
    REVIEWER2,
    Sandbox,
)

pytestmark = pytest.mark.e2e

REFUND = "refund order 123"
CONFIRM_TITLE = "Approve issue_refund?"


def sandbox_for(page: Page, demo: Demo, user: str, channel: str = APPROVALS) -> Sandbox:
    sandbox = Sandbox(page, demo.url)
    sandbox.open(user, channel)
    return sandbox


def start_refund(page: Page, demo: Demo) -> tuple[Sandbox, str]:
    """The requester starts the refund agent; its run waits for an approval."""
    sandbox = sandbox_for(page, demo, REQUESTER)
    run_id = sandbox.start_run("refund-agent", REFUND)
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")
    return sandbox, run_id


def test_requester_starts_refund_and_reviewer_approves_live(page: Page, demo: Demo) -> None:
    sandbox = sandbox_for(page, demo, REQUESTER)
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

    run_id = sandbox.start_run("refund-agent", REFUND)
    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("issue_refund")  # arrived over the live event stream
    expect(message).to_contain_text("Requested by")
    expect(message).to_contain_text("@Rina Requester")
    expect(message).to_contain_text("moves money back to the customer")
    expect(message.get_by_test_id(f"button-{REJECT}")).to_be_visible()
    run = sandbox.run(run_id)
    expect(run).to_have_attribute("data-status", "waiting")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "pending")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "sandbox-mid-flow.png"))

    sandbox.approve(message, confirm_title=CONFIRM_TITLE)

    expect(message.get_by_test_id(f"button-{APPROVE}")).to_have_count(0)
    expect(message.locator("button.btn")).to_have_count(0)
    expect(message).to_contain_text("Approved: issue_refund")
    expect(message).to_contain_text("Approved by @Rev One")
    reply = message.get_by_test_id("thread-reply")
    expect(reply).to_contain_text("Refund issued")
    expect(reply).to_contain_text("$42.50 to order 123")
    expect(run).to_have_attribute("data-status", "succeeded")
    expect(run.get_by_test_id("run-output")).to_contain_text("Refund issued")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "executed")
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


def test_reviewer_rejects_with_a_reason(page: Page, demo: Demo) -> None:
    reason = "Customer already got store credit for order 123"
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("issue_refund")

    message.get_by_test_id(f"button-{REJECT}").click()
    modal = page.get_by_test_id("modal")
    expect(modal).to_be_visible()
    expect(modal).to_contain_text("Reject request")
    modal.get_by_test_id("modal-input-reason").fill(reason)
    modal.get_by_test_id("modal-submit").click()
    expect(modal).to_have_count(0)

    expect(message.locator("button.btn")).to_have_count(0)
    expect(message).to_contain_text("Rejected: issue_refund")
    expect(message).to_contain_text(f"Rejected by @Rev One: {reason}")
    reply = message.get_by_test_id("thread-reply")
    expect(reply).to_contain_text("The refund for order 123 was not approved")
    expect(reply).to_contain_text(reason)
    expect(reply).not_to_contain_text("Refund issued")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "rejected")


def test_outsider_click_is_refused_only_to_them(page: Page, demo: Demo) -> None:
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(OUTSIDER)
    message = sandbox.pending_message("issue_refund")

    sandbox.approve(message, confirm_title=CONFIRM_TITLE)

    refusal = sandbox.ephemerals()
    expect(refusal).to_have_count(1)
    expect(refusal).to_contain_text("Only visible to you")
    expect(refusal).to_contain_text(re.compile(r"not allowed|not a reviewer", re.IGNORECASE))
    expect(refusal).to_contain_text("@Rev One")
    # still pending: the buttons stay, the run still waits
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_be_visible()
    expect(message).not_to_contain_text("Approved by")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "pending")

    sandbox.act_as(REQUESTER)  # nor may the person who started the run approve it
    expect(sandbox.ephemerals()).to_have_count(0)  # the outsider's refusal was theirs alone
    sandbox.approve(message, confirm_title=CONFIRM_TITLE)
    own = sandbox.ephemerals()
    expect(own).to_have_count(1)
    expect(own).to_contain_text("you started this run")
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_be_visible()
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")

    sandbox.act_as(REVIEWER)
    expect(sandbox.ephemerals()).to_have_count(0)
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_be_visible()


def test_approvals_slash_command_lists_pending_and_shows_help(page: Page, demo: Demo) -> None:
    sandbox, _ = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    request_id = sandbox.request_id(sandbox.pending_message("issue_refund"))

    sandbox.slash("/approvals pending")
    listing = sandbox.ephemerals().filter(has_text="Waiting for a decision")
    expect(listing).to_have_count(1)
    expect(listing).to_contain_text(request_id)
    expect(listing).to_contain_text("issue_refund")
    expect(listing).to_contain_text("Only visible to you")

    sandbox.slash("/approvals help")
    help_reply = sandbox.ephemerals().filter(has_text="/approvals show")
    expect(help_reply).to_have_count(1)
    expect(help_reply).to_contain_text("/approvals pending")
    expect(help_reply).to_contain_text("/approvals routes")


def test_pending_approval_survives_a_restart(page: Page, demo: Demo) -> None:
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    before = sandbox.pending_message("issue_refund")
    ts = before.get_attribute("data-ts")
    request_id = sandbox.request_id(before)

    url = demo.url
    assert demo.restart() == url, "the restarted demo must serve the same address"
    assert demo.starts == 2
    page.reload()
    sandbox.wait_ready(REQUESTER)  # the page's address still says ?user=U0REQUESTER
    sandbox.act_as(REVIEWER)

    message = sandbox.message(str(ts))
    expect(message).to_contain_text("Approval needed: issue_refund")
    expect(message).to_contain_text(request_id)
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_be_enabled()
    expect(message.get_by_test_id(f"button-{REJECT}")).to_be_enabled()
    run = sandbox.run(run_id)
    expect(run).to_have_attribute("data-status", "waiting")

    sandbox.approve(message, confirm_title=CONFIRM_TITLE)

    expect(message.locator("button.btn")).to_have_count(0)
    expect(message).to_contain_text("Approved by @Rev One")
    expect(message.get_by_test_id("thread-reply")).to_contain_text("Refund issued")
    expect(run).to_have_attribute("data-status", "succeeded")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "executed")


def test_production_repo_needs_two_reviewers(page: Page, demo: Demo) -> None:
    """delete_repo goes to #ops-approvals and needs 2 approvals from the reviewers group."""
    sandbox = sandbox_for(page, demo, REQUESTER, OPS)
    run_id = sandbox.start_run("repo-admin", "delete repos scratch, acme-prod")
    run = sandbox.run(run_id)
    expect(run).to_have_attribute("data-status", "waiting")
    expect(run.get_by_test_id("run-approval")).to_contain_text("waiting for 0 of 2 approvals")

    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("delete_repo", OPS)
    expect(message).to_contain_text("acme-prod")
    expect(message).to_contain_text("0 of 2 approvals")
    sandbox.approve(message, confirm_title="Approve delete_repo?")
    expect(sandbox.ephemerals()).to_contain_text("Your approval is recorded: 1 of 2 approvals")
    expect(message).to_contain_text("1 of 2 approvals (so far: @Rev One)")
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_be_visible()
    expect(run).to_have_attribute("data-status", "waiting")

    sandbox.act_as(REVIEWER2)
    sandbox.approve(message, confirm_title="Approve delete_repo?")
    expect(message.locator("button.btn")).to_have_count(0)
    expect(message).to_contain_text("Approved by @Rev One, @Rev Two (2 of 2 approvals)")
    expect(message.get_by_test_id("thread-reply")).to_contain_text("Deleted repository acme-prod")
    expect(run).to_have_attribute("data-status", "succeeded")
    expect(run.get_by_test_id("run-output")).to_contain_text("Deleted repository scratch")
    expect(sandbox.tool_call(run_id, "acme-prod")).to_have_attribute("data-outcome", "executed")
