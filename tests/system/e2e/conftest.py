"""Browser tests of `countersign demo`: the REAL demo process, driven through its page.

* `demo` starts ``python -m bot.cli demo --port <free port>`` on a fresh data dir (embedded
  redis-server, REDIS_URL removed), waits for its "Open http://..." line and, on teardown,
  stops it with SIGINT and checks it exits 0, without a traceback and without leaving its
  redis-server behind. ``demo.restart()`` does the same stop and starts again on the same
  data dir and port, as a person pressing Ctrl-C and running the command again would.
* `browser` is Debian's Chromium (``/usr/bin/chromium``) through sync Playwright; a missing
  Chromium FAILS the tests with the command that installs it.
* `page` is a 1400x900 page that saves ``artifacts/e2e/<test name>.png`` when the test ends
  and fails the test on any uncaught JavaScript error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from agent_host.durable.redis_server import free_port
from tests.support.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
ARTIFACTS = ROOT / "artifacts" / "e2e"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1400, "height": 900}
START_TIMEOUT = 30.0  # until the demo prints its "Open http://..." line
STOP_TIMEOUT = 20.0  # from SIGINT until the process has exited
EXPECT_TIMEOUT_MS = 15_000
OPEN_LINE = re.compile(r"Open (http://\S+) in your browser")

expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: browser tests of `countersign demo` (Chromium)")


def _children(pid: int) -> list[int]:
    """Direct child processes of `pid` (Linux /proc), e.g. the embedded redis-server."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Demo:
    """One `countersign demo` process on a fixed data dir and port; restartable."""

    data_dir: Path
    port: int
    log_path: Path
    url: str = ""
    starts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _log_offset: int = 0
    _children: list[int] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env.update(COUNTERSIGN_DATA_DIR=str(self.data_dir), PYTHONUNBUFFERED="1")
        return env

    def log(self) -> str:
        """What the current (or last) process wrote to stdout and stderr."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(self._log_offset)
            return handle.read().decode("utf-8", "replace")

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def start(self) -> str:
        assert self.proc is None, "the demo is already running"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        command = [sys.executable, "-m", "bot.cli", "demo", "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our SIGINT reaches the demo only, as Ctrl-C would
            )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = OPEN_LINE.search(self.log())
            if match:
                self.url = match.group(1).rstrip("/") + "/"
                self._children = _children(self.proc.pid)
                return self.url
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                pytest.fail(
                    f"`countersign demo` exited with {code} before it was ready:\n{self._tail()}"
                )
            time.sleep(0.1)
        self._kill()
        pytest.fail(
            f"`countersign demo` printed no 'Open http://...' line within {START_TIMEOUT:.0f} s:\n"
            f"{self._tail()}"
        )

    def stop(self) -> None:
        """SIGINT (Ctrl-C), then check a clean exit: code 0, no traceback, no orphans."""
        proc = self.proc
        if proc is None:
            return
        children = self._children or _children(proc.pid)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill()
            pytest.fail(
                f"`countersign demo` did not exit within {STOP_TIMEOUT:.0f} s of SIGINT "
                f"(killed):\n{self._tail()}"
            )
        self.proc = None
        log = self.log()
        assert code == 0, f"`countersign demo` exited with {code} after SIGINT:\n{self._tail()}"
        assert "Traceback" not in log, f"`countersign demo` logged a traceback:\n{log}"
        deadline = time.monotonic() + 5
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [c for c in children if _alive(c)]
        for pid in left:  # ours: started by the demo we started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"child processes {left} (redis-server) outlived the demo"

    def restart(self) -> str:
        """Ctrl-C and run it again: same data dir, same port."""
        self.stop()
        return self.start()

    def _kill(self) -> None:
        """Last resort: SIGKILL the demo's process group (it and its redis-server)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self.proc = None


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    """A fresh `countersign demo` for one test, stopped (and checked) afterwards."""
    data_dir = tmp_path / "data"
    running = Demo(data_dir=data_dir, port=free_port(), log_path=tmp_path / "demo.log")
    running.start()
    try:
        yield running
    finally:
        if running.proc is not None:
            try:
                running.stop()
            finally:
                running._kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"the browser tests need Debian's Chromium at {CHROMIUM}: "
            "run `sudo apt-get install chromium` (or `make system-deps`); "
            "never `playwright install`, which downloads a browser",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


def artifact_name(node_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", node_name)


@pytest.fixture
def page(browser: Browser, demo: Demo, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh page; its screenshot goes to artifacts/e2e/<test>.png whatever the outcome.

    It asks for `demo` so the demo is still running when the screenshot is taken.
    """
    context = browser.new_context(viewport=VIEWPORT, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):  # the page may be gone after a failure
            opened.screenshot(path=str(ARTIFACTS / f"{artifact_name(request.node.name)}.png"))
        context.close()
    assert not errors, f"uncaught JavaScript errors on the page: {errors}"
