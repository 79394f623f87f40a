"""`countersign` child processes for the system tests, and the wait that watches them.

A `Proc` is one `python -m bot.cli serve|worker` child with its output in a log file; `until`
is `eventually` that also fails as soon as a watched process dies, with the tail of its log.
`inherited_env` is the environment a child starts from: the caller's, without anything
countersign reads, so a stray variable on the developer's machine cannot change a test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp

from tests.support.paths import PROJECT_ROOT
from tests.support.waiting import eventually

__all__ = ["CLI", "SPAWN_LOCK", "Finished", "Proc", "inherited_env", "run_cli", "until"]

T = TypeVar("T")

CLI: tuple[str, ...] = (sys.executable, "-m", "bot.cli")
# Scenarios run in threads; spawning children from several threads at once once failed
# with `OSError: [Errno 14] Bad address` from exec, so every spawn here takes this lock.
SPAWN_LOCK = threading.Lock()
# What countersign (and pytest's own plumbing) reads from the environment: a stray
# SLACK_APP_TOKEN would switch a server to Socket Mode, a COUNTERSIGN_ROUTES_FILE its routes.
# OPENAI_API_KEY would switch an agent (an example) from its offline model to a real one.
_NOT_INHERITED = ("SLACK_", "COUNTERSIGN_", "REDIS_", "PYTEST_", "OPENAI_")


def inherited_env() -> dict[str, str]:
    """The caller's environment without SLACK_*, COUNTERSIGN_*, REDIS_*, PYTEST_*, OPENAI_*
    and PORT."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED) and k != "PORT"}


@dataclass(frozen=True)
class Finished:
    """A `countersign` command that ran to its end: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


async def run_cli(
    *args: str, env: dict[str, str], cwd: Path = PROJECT_ROOT, within: float = 60
) -> Finished:
    """`countersign ARGS` in `cwd` with exactly `env` (plus PYTHONPATH for countersign
    itself), awaited without blocking the loop, so servers of the test keep answering it."""
    with SPAWN_LOCK:
        child = await asyncio.create_subprocess_exec(
            *CLI,
            *args,
            env={**env, "PYTHONPATH": str(PROJECT_ROOT)},
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    try:
        out, err = await asyncio.wait_for(child.communicate(), within)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise
    assert child.returncode is not None
    return Finished(child.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


class Proc:
    """One `countersign` child process (serve or worker), its output in `log`."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        env: dict[str, str],
        log: Path,
        port: int | None,
        cwd: Path = PROJECT_ROOT,
    ) -> None:
        self.name, self.log, self.port = name, log, port
        self.url = f"http://127.0.0.1:{port}" if port else ""
        self.crash_at = env.get("COUNTERSIGN_CRASH_AT", "")
        with log.open("ab") as out:
            out.write(f"\n===== {name}: {' '.join(args)} crash_at={self.crash_at!r}\n".encode())
            out.flush()
            with SPAWN_LOCK:
                self.proc = subprocess.Popen(
                    list(args),
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )

    @property
    def events_url(self) -> str:
        return f"{self.url}/slack/events"

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.wait(10)

    async def exited(self, within: float) -> int | None:
        """The exit code once the process exits, or None if it still runs after `within` s."""
        deadline = time.monotonic() + within
        while True:
            code = self.proc.poll()
            if code is not None or time.monotonic() >= deadline:
                return code
            await asyncio.sleep(0.02)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text.splitlines()[-lines:])


async def until(
    what: str,
    check: Callable[[], Awaitable[T | None]],
    *,
    within: float = 20.0,
    watch: Sequence[Proc] = (),
    interval: float = 0.05,
) -> T:
    """`eventually(check)`, failing as soon as a watched process dies; a poll that cannot
    reach a server yet (timeout, refused connection) counts as "not yet"."""

    def all_alive() -> None:
        for proc in watch:
            if not proc.alive():
                raise AssertionError(
                    f"{proc.name} exited (code {proc.returncode}) while waiting for {what}\n"
                    + proc.tail()
                )

    return await eventually(
        check,
        within=within,
        interval=interval,
        what=what,
        ignoring=(TimeoutError, aiohttp.ClientError, OSError),
        guard=all_alive,
        details=lambda: "\n".join(p.tail() for p in watch),
    )
