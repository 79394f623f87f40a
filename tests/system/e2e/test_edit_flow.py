"""Approve with a comment, and edit then approve, in Chromium through the sandbox page: the
buttons on the refund's message, the modals, the decided message and the run's outcome."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .conftest import Demo
from .sandbox_page import REVIEWER
from .test_demo_flow import start_refund

pytestmark = pytest.mark.e2e

APPROVE_COMMENT = "countersign_approve_comment"
EDIT = "countersign_edit"


def test_reviewer_edits_the_amount_then_approves(page: Page, demo: Demo) -> None:
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("issue_refund")

    message.get_by_test_id(f"button-{EDIT}").click()
    modal = page.get_by_test_id("modal")
    expect(modal).to_be_visible()
    expect(modal).to_contain_text("Edit & approve")
    amount = modal.get_by_test_id("modal-input-arg:amount")
    expect(amount).to_have_value("42.5")  # pre-filled with the model's argument
    amount.fill("40")
    modal.get_by_test_id("modal-input-comment").fill("the customer kept one item")
    modal.get_by_test_id("modal-submit").click()
    expect(modal).to_have_count(0)

    expect(message.locator("button.btn")).to_have_count(0)
    expect(message).to_contain_text("Edited by @Rev One before approval")
    expect(message).to_contain_text("amount: 42.5 → 40.0")
    expect(message).to_contain_text("Approved by @Rev One: the customer kept one item")
    reply = message.get_by_test_id("thread-reply")
    expect(reply).to_contain_text("$40.00 to order 123")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
    expect(sandbox.tool_call(run_id, "issue_refund")).to_have_attribute("data-outcome", "executed")


def test_an_edit_the_tool_refuses_is_shown_in_the_modal(page: Page, demo: Demo) -> None:
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("issue_refund")

    message.get_by_test_id(f"button-{EDIT}").click()
    modal = page.get_by_test_id("modal")
    modal.get_by_test_id("modal-input-arg:amount").fill("lots")
    modal.get_by_test_id("modal-submit").click()
    expect(page.get_by_test_id("modal-error-arg:amount")).to_contain_text("Enter a number")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")


def test_reviewer_approves_with_a_comment(page: Page, demo: Demo) -> None:
    comment = "Verified the double charge in Stripe. Refund is correct."
    sandbox, run_id = start_refund(page, demo)
    sandbox.act_as(REVIEWER)
    message = sandbox.pending_message("issue_refund")

    message.get_by_test_id(f"button-{APPROVE_COMMENT}").click()
    modal = page.get_by_test_id("modal")
    expect(modal).to_contain_text("Approve with comment")
    modal.get_by_test_id("modal-input-comment").fill(comment)
    modal.get_by_test_id("modal-submit").click()
    expect(modal).to_have_count(0)

    expect(message).to_contain_text(f"Approved by @Rev One: {comment}")
    expect(message.get_by_test_id("thread-reply")).to_contain_text("$42.50 to order 123")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
