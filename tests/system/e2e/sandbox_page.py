"""What a person does on the sandbox page, by its data-testids (slack_sandbox/static/app.js)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from playwright.sync_api import Locator, Page, expect

REQUESTER = "U0REQUESTER"
REVIEWER = "U0REVIEWER"
REVIEWER2 = "U0REVIEWER2"
OUTSIDER = "U0OUTSIDER"
APPROVALS = "C0APPROVALS"
OPS = "C0OPS"

APPROVE = "countersign_approve"
REJECT = "countersign_reject"
REQUEST_ID = re.compile(r"req_[0-9a-f]+_\d{4}")


@dataclass
class Sandbox:
    page: Page
    url: str

    def open(self, user: str, channel: str = APPROVALS) -> None:
        self.page.goto(f"{self.url}?user={user}&channel={channel}")
        self.wait_ready(user)

    def wait_ready(self, user: str) -> None:
        expect(self.page.get_by_test_id("sandbox-banner")).to_contain_text("not Slack")
        expect(self.page.get_by_test_id(f"user-{user}")).to_have_attribute("aria-pressed", "true")
        expect(self.page.get_by_test_id("live-status")).to_have_text("● live")

    def act_as(self, user: str) -> None:
        self.page.get_by_test_id(f"user-{user}").click()
        expect(self.page.get_by_test_id(f"user-{user}")).to_have_attribute("aria-pressed", "true")

    def show_channel(self, channel: str) -> None:
        self.page.get_by_test_id(f"channel-{channel}").click()
        expect(self.page.get_by_test_id(f"channel-{channel}")).to_have_class(re.compile("active"))

    # -- runs panel --------------------------------------------------------------------------

    def start_run(self, agent: str, text: str) -> str:
        """Start a run from the Runs panel as the current user; its run id."""
        self.page.get_by_test_id("agent-select").select_option(agent)
        self.page.get_by_test_id("run-input").fill(text)
        with self.page.expect_response(
            lambda r: r.url.endswith("/_sandbox/ui/runs") and r.request.method == "POST"
        ) as started:
            self.page.get_by_test_id("start-run").click()
        answer = started.value
        assert answer.status == 202, f"starting the run: HTTP {answer.status} {answer.text()}"
        run_id = str(answer.json()["run_id"])
        expect(self.page.locator("#runs-note")).to_have_text(f"Started {run_id}.")
        expect(self.run(run_id)).to_be_visible()
        return run_id

    def run(self, run_id: str) -> Locator:
        return self.page.get_by_test_id(f"run-{run_id}")

    def tool_call(self, run_id: str, tool: str) -> Locator:
        return self.run(run_id).get_by_test_id("tool-call").filter(has_text=tool)

    # -- messages ----------------------------------------------------------------------------

    def pending_message(self, tool: str, channel: str = APPROVALS) -> Locator:
        """The one top-level message asking to approve `tool`, pinned by its ts."""
        pending = (
            self.page.locator(f'[data-testid^="message-"][data-channel="{channel}"]')
            .filter(has_text=f"Approval needed: {tool}")
            .filter(has=self.page.get_by_test_id(f"button-{APPROVE}"))
        )
        expect(pending).to_have_count(1)
        ts = pending.get_attribute("data-ts")
        assert ts, "the approval message has no ts"
        return self.message(ts)

    def message(self, ts: str) -> Locator:
        return self.page.get_by_test_id(f"message-{ts}")

    def request_id(self, message: Locator) -> str:
        match = REQUEST_ID.search(message.inner_text())
        assert match, f"no request id in the message: {message.inner_text()}"
        return match.group(0)

    def approve(self, message: Locator, *, confirm_title: str) -> None:
        """Click Approve and confirm in the dialog (high-severity requests ask first)."""
        message.get_by_test_id(f"button-{APPROVE}").click()
        dialog = self.page.get_by_test_id("confirm-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text(confirm_title)
        dialog.get_by_test_id("confirm-ok").click()
        expect(dialog).to_have_count(0)

    def slash(self, text: str) -> None:
        composer = self.page.get_by_test_id("composer")
        composer.fill(text)
        composer.press("Enter")
        expect(composer).to_have_value("")

    def ephemerals(self) -> Locator:
        return self.page.get_by_test_id("ephemeral")

    # -- the app's Home tab ------------------------------------------------------------------

    def open_home(self) -> Locator:
        """Open the app's Home tab (the app is sent app_home_opened); the published tab."""
        self.page.get_by_test_id("home-link").click()
        expect(self.page.get_by_test_id("home-link")).to_have_class(re.compile("active"))
        home = self.page.get_by_test_id("home-view")
        expect(home).to_be_visible()
        return home
