"""Make docs/images/bulk-message.png: one message for a turn's many gated calls.

    .venv/bin/python -m tests.system.e2e.docs_screenshot_bulk [output.png]

Runs the real `countersign demo` on a temporary data dir and drives it in Chromium, as the
browser tests do: the cleanup agent asks to delete eight files in one turn, and the
reviewer approves one of them from their App Home tab. The picture is the reviewer's view
at 1400x900: the bulk message in #approvals with its table, its tally (1 approved, 7
waiting) and its Approve all / Reject all / Review one by one buttons.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import expect

from .conftest import ROOT
from .docs_screenshot import demo_page
from .sandbox_page import APPROVALS, APPROVE, REVIEWER
from .test_bulk_flow import bulk_message

OUTPUT = ROOT / "docs" / "images" / "bulk-message.png"
FILES = ["q3-draft.docx", "q3-draft-v2.docx", "notes.txt", "old-contract.pdf", "scan-001.png"]
FILES += ["scan-002.png", "budget-copy.xlsx", "tmp-export.csv"]


def make_screenshot(output: Path) -> None:
    with demo_page() as (page, sandbox):
        paths = " ".join(f"/matter/acme/{name}" for name in FILES)
        run_id = sandbox.start_run("cleanup-agent", f"delete {paths}")
        sandbox.act_as(REVIEWER)
        message = bulk_message(sandbox, len(FILES))
        expect(sandbox.run(run_id)).to_have_attribute("data-status", "waiting")

        home = sandbox.open_home()  # one call decided elsewhere: the tally follows
        home.get_by_test_id(f"button-{APPROVE}").first.click()
        dialog = page.get_by_test_id("confirm-dialog")
        dialog.get_by_test_id("confirm-ok").click()
        sandbox.show_channel(APPROVALS)
        message = bulk_message(sandbox, len(FILES))
        expect(message).to_contain_text("1 approved")
        message.scroll_into_view_if_needed()
        output.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(output))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT
    make_screenshot(target)
    print(f"wrote {target}")
