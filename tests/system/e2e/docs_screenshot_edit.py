"""Make docs/images/edit-modal.png and edited-approval.png for the README.

    .venv/bin/python -m tests.system.e2e.docs_screenshot_edit [output directory]

Runs the real `countersign demo` on a temporary data dir and drives it in Chromium, as the
browser tests do: a refund is asked for; the reviewer opens **Edit & approve**, lowers the
amount and adds a comment (the modal, pre-filled from the tool's schema); then the decided
message with the diff and the comment, each at 1400x900.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from agent_host.durable.redis_server import free_port

from .conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, VIEWPORT, Demo
from .sandbox_page import REQUESTER, REVIEWER, Sandbox

OUTPUT = ROOT / "docs" / "images"
EDIT = "countersign_edit"


def make_screenshots(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="countersign-screenshot-") as tmp:
        demo = Demo(data_dir=Path(tmp) / "data", port=free_port(), log_path=Path(tmp) / "log")
        demo.start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
                )
                page = browser.new_page(viewport=VIEWPORT, locale="en-US", timezone_id="UTC")
                sandbox = Sandbox(page, demo.url)
                sandbox.open(REQUESTER)
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
                browser.close()
        finally:
            demo.stop()


if __name__ == "__main__":
    make_screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT)
