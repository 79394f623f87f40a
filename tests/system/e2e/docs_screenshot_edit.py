"""Make docs/images/edit-modal.png and edited-approval.png for the README.

    .venv/bin/python -m tests.system.e2e.docs_screenshot_edit [output directory]

Runs the real `countersign demo` on a temporary data dir and drives it in Chromium, as the
browser tests do: a refund is asked for; the reviewer opens **Edit & approve**, lowers the
amount and adds a comment (the modal, pre-filled from the tool's schema); then the decided
message with the diff and the comment, each at 1400x900.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import expect

from .conftest import ROOT
from .docs_screenshot import demo_page
from .sandbox_page import REVIEWER

OUTPUT = ROOT / "docs" / "images"
EDIT = "countersign_edit"


def make_screenshots(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with demo_page() as (page, sandbox):
        run_id = sandbox.start_run("refund-agent", "refund order 123")
        sandbox.act_as(REVIEWER)
        message = sandbox.pending_message("issue_refund")
        message.get_by_test_id(f"button-{EDIT}").click()
        modal = page.get_by_test_id("modal")
        expect(modal).to_contain_text("Edit & approve")
        modal.get_by_test_id("modal-input-arg:amount").fill("40")
        modal.get_by_test_id("modal-input-comment").fill("the customer kept one item")
        page.screenshot(path=str(output / "edit-modal.png"))

        modal.get_by_test_id("modal-submit").click()
        expect(message).to_contain_text("amount: 42.5 → 40.0")
        expect(sandbox.run(run_id)).to_have_attribute("data-status", "succeeded")
        message.scroll_into_view_if_needed()
        page.screenshot(path=str(output / "edited-approval.png"))


if __name__ == "__main__":
    make_screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT)
