"""Make docs/images/home-tab.png, pending-list.png and approval-context.png for the README.

    .venv/bin/python -m tests.system.e2e.docs_screenshot_home [output directory]

Runs the real `countersign demo` on a temporary data dir and drives it in Chromium, as the
browser tests do: refunds are asked for and one is approved; then the reviewer's App Home
tab, `/approvals pending` with its Next page button, and an approval message with what the
run did before it, each at 1400x900.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import expect

from .conftest import ROOT
from .docs_screenshot import demo_page
from .sandbox_page import APPROVE, REQUESTER, REVIEWER

OUTPUT = ROOT / "docs" / "images"
CONFIRM_TITLE = "Approve issue_refund?"


def make_screenshots(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with demo_page() as (page, sandbox):
        done = sandbox.start_run("refund-agent", "refund order 200")
        sandbox.act_as(REVIEWER)
        sandbox.approve(sandbox.pending_message("issue_refund"), confirm_title=CONFIRM_TITLE)
        expect(sandbox.run(done)).to_have_attribute("data-status", "succeeded")
        sandbox.act_as(REQUESTER)
        waiting = sandbox.start_run("refund-agent", "refund order 124")
        sandbox.start_run("cleanup-agent", " ".join(f"/tmp/draft-{n}.txt" for n in range(11)))
        sandbox.act_as(REVIEWER)
        expect(sandbox.run(waiting)).to_have_attribute("data-status", "waiting")

        message = sandbox.pending_message("issue_refund")
        expect(message).to_contain_text("The agent said before asking")
        message.scroll_into_view_if_needed()
        page.screenshot(path=str(output / "approval-context.png"))

        sandbox.slash("/approvals pending")
        expect(sandbox.ephemerals().last).to_contain_text("Next page")
        sandbox.ephemerals().last.scroll_into_view_if_needed()
        page.screenshot(path=str(output / "pending-list.png"))

        home = sandbox.open_home()  # published again for the opening: with buttons
        expect(home.get_by_test_id(f"button-{APPROVE}").first).to_be_visible()
        expect(home).to_contain_text("Decided by you recently")
        page.evaluate("document.getElementById('messages').scrollTop = 1e6")
        page.screenshot(path=str(output / "home-tab.png"))


if __name__ == "__main__":
    make_screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT)
