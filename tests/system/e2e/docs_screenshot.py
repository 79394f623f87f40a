"""Make docs/images/sandbox.png: the sandbox page mid-flow, for the README.

    .venv/bin/python -m tests.system.e2e.docs_screenshot [output.png]

Runs the real `countersign demo` on a temporary data dir and drives it in Chromium, as the
browser tests do: one refund is approved (its message decided, the outcome in its thread),
a second one waits. The picture is the reviewer's view at 1400x900: the pending approval
with its buttons in #approvals and the Runs panel with one succeeded and one waiting run.
Emoji need a colour emoji font (Debian: fonts-noto-color-emoji), else they show as boxes.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from agent_host.durable.redis_server import free_port

from .conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, VIEWPORT, Demo
from .sandbox_page import REQUESTER, REVIEWER, Sandbox

OUTPUT = ROOT / "docs" / "images" / "sandbox.png"
CONFIRM_TITLE = "Approve issue_refund?"


@contextmanager
def demo_page() -> Iterator[tuple[Page, Sandbox]]:
    """A real `countersign demo` on a temporary data dir, and its page in Chromium at
    1400x900, opened as the requester (every docs screenshot starts here)."""
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
                yield page, sandbox
                browser.close()
        finally:
            demo.stop()


def make_screenshot(output: Path) -> None:
    with demo_page() as (page, sandbox):
        first = sandbox.start_run("refund-agent", "refund order 200")
        sandbox.act_as(REVIEWER)
        sandbox.approve(sandbox.pending_message("issue_refund"), confirm_title=CONFIRM_TITLE)
        expect(sandbox.run(first)).to_have_attribute("data-status", "succeeded")
        expect(page.get_by_test_id("thread-reply")).to_contain_text("Refund issued")

        sandbox.act_as(REQUESTER)
        second = sandbox.start_run("refund-agent", "refund order 124")
        sandbox.act_as(REVIEWER)
        pending = sandbox.pending_message("issue_refund")
        expect(sandbox.run(second)).to_have_attribute("data-status", "waiting")
        pending.scroll_into_view_if_needed()
        output.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(output))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT
    make_screenshot(target)
    print(f"wrote {target}")
