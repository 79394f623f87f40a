"""A turn with many gated calls in the sandbox page, in Chromium: one message for them all,
Approve all with its confirm dialog, the tally as the calls are decided, and Review one by
one with each call in the message's thread.

docs/images/bulk-message.png is made by `python -m tests.system.e2e.docs_screenshot_bulk`.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import Demo
from .sandbox_page import APPROVALS, APPROVE, REQUESTER, REVIEWER, Sandbox

pytestmark = pytest.mark.e2e

BULK_APPROVE = "countersign_bulk_approve"
BULK_SPLIT = "countersign_bulk_split"
SEVEN = "delete " + " ".join(f"/tmp/draft-{n}.docx" for n in range(7))


def bulk_message(sandbox: Sandbox, calls: int) -> Locator:
    """The one top-level message asking about `calls` calls at once, pinned by its ts."""
    found = (
        sandbox.page.locator(f'[data-testid^="message-"][data-channel="{APPROVALS}"]')
        .filter(has_text=f"Approval needed: {calls} calls from cleanup-agent")
        .filter(has=sandbox.page.get_by_test_id(f"button-{BULK_APPROVE}"))
    )
    expect(found).to_have_count(1)
    ts = found.get_attribute("data-ts")
    assert ts, "the bulk message has no ts"
    return sandbox.message(ts)


def start_cleanup(page: Page, demo: Demo) -> tuple[Sandbox, str, Locator]:
    sandbox = Sandbox(page, demo.url)
    sandbox.open(REQUESTER, APPROVALS)
    run_id = sandbox.start_run("cleanup-agent", SEVEN)
    sandbox.act_as(REVIEWER)
    message = bulk_message(sandbox, 7)
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")
    return sandbox, run_id, message


def test_approve_all_with_its_confirm_decides_every_call_and_the_tally_updates(
    page: Page, demo: Demo
) -> None:
    sandbox, run_id, message = start_cleanup(page, demo)
    for n in range(7):
        expect(message).to_contain_text(f"/tmp/draft-{n}.docx")
    expect(message).to_contain_text("7 calls: 7 waiting")
    expect(message.get_by_test_id(f"button-{APPROVE}")).to_have_count(0)  # no single buttons
    # Only one message for the seven calls.
    expect(page.locator(f'[data-testid^="message-"][data-channel="{APPROVALS}"]')).to_have_count(1)

    message.get_by_test_id(f"button-{BULK_APPROVE}").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Approve all 7 calls?")
    expect(dialog).to_contain_text("delete_file (7)")
    dialog.get_by_test_id("confirm-cancel").click()  # cancelled: nothing is sent
    expect(dialog).to_have_count(0)
    expect(message).to_contain_text("7 waiting")

    message.get_by_test_id(f"button-{BULK_APPROVE}").click()
    expect(dialog).to_contain_text("Approve all 7 calls?")
    dialog.get_by_test_id("confirm-ok").click()

    expect(message).to_contain_text("All 7 calls decided")
    expect(message).to_contain_text("7 approved")
    expect(message.locator("button.btn")).to_have_count(0)
    expect(sandbox.ephemerals()).to_contain_text("Approved 7 call(s)")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
    expect(message.get_by_test_id("thread-reply")).to_contain_text("Cleanup finished")
    for n in range(7):
        call = sandbox.run(run_id).get_by_test_id("tool-call").filter(has_text=f"draft-{n}.docx")
        expect(call).to_have_attribute("data-outcome", "executed")


def test_review_one_by_one_puts_each_call_in_the_thread_and_the_tally_follows(
    page: Page, demo: Demo
) -> None:
    sandbox, run_id, message = start_cleanup(page, demo)
    message.get_by_test_id(f"button-{BULK_SPLIT}").click()

    replies = message.get_by_test_id("thread-reply")
    expect(replies).to_have_count(7)
    expect(message).to_contain_text("chose to review these one by one")
    expect(message.get_by_test_id(f"button-{BULK_APPROVE}")).to_have_count(0)

    first = replies.filter(has_text="/tmp/draft-0.docx")
    sandbox.approve(first, confirm_title="Approve delete_file?")
    expect(first).to_contain_text(re.compile("Approved by @Rev One"))
    expect(message).to_contain_text("1 approved")
    expect(message).to_contain_text("6 waiting")
    expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")
