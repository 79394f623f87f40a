"""The app's Home tab in the sandbox page, in Chromium: "waiting for you" with buttons that
decide, refreshed after the decision; a person who may not decide sees nothing of it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS, Demo
from .sandbox_page import APPROVE, OUTSIDER, REQUESTER, REVIEWER, Sandbox

pytestmark = pytest.mark.e2e


def test_a_reviewer_approves_from_the_home_tab_and_it_refreshes(page: Page, demo: Demo) -> None:
    sandbox = Sandbox(page, demo.url)
    sandbox.open(REQUESTER)
    run_id = sandbox.start_run("refund-agent", "refund order 123")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")

    # The message says what the run did before asking, and what the agent said.
    message = sandbox.pending_message("issue_refund")
    expect(message).to_contain_text("Before this call, the run")
    expect(message).to_contain_text("lookup_order")
    expect(message).to_contain_text("The agent said before asking")
    expect(message).to_contain_text("Order 123 is paid ($42.50)")

    sandbox.act_as(OUTSIDER)  # the demo's refund route names two reviewers, not them
    home = sandbox.open_home()
    expect(home).to_contain_text("Nothing is waiting for your decision")
    expect(home).not_to_contain_text("issue_refund")

    sandbox.act_as(REVIEWER)  # their own tab, published for them
    expect(home).to_contain_text("Waiting for you")
    expect(home).to_contain_text("issue_refund")
    expect(home).to_contain_text("order_id")
    expect(home).to_contain_text("open message")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "home-tab.png"))

    home.get_by_test_id(f"button-{APPROVE}").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("Approve issue_refund?")
    dialog.get_by_test_id("confirm-ok").click()

    expect(home.get_by_test_id(f"button-{APPROVE}")).to_have_count(0)  # published again
    expect(home).to_contain_text("Decided by you recently")
    expect(home).to_contain_text("approved")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
