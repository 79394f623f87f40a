"""The one bounded wait of the tests: poll a check until it holds.

Every test that waits for something asynchronous (a worker, the outbox, a child process, the
Slack stand-in) goes through `eventually`, so "how long", "how often" and "what a timeout
says" follow one rule. `tests/support/processes.py` adds `until`, the same wait that also
fails as soon as a watched child process dies.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["WITHIN", "eventually", "stack_of"]

T = TypeVar("T")

WITHIN = 20.0  # seconds: generous for a loaded 2-core machine; a passing check returns at once
INTERVAL = 0.02


async def eventually(
    check: Callable[[], Awaitable[T | None] | T | None],
    *,
    within: float = WITHIN,
    interval: float = INTERVAL,
    what: str = "the condition",
    ignoring: tuple[type[BaseException], ...] = (),
    guard: Callable[[], None] | None = None,
    details: Callable[[], str] | None = None,
) -> T:
    """Poll `check` (sync or async) until it returns a truthy value, and return that value.

    - `ignoring`: exceptions a poll may raise that mean "not yet" (a server still starting).
    - `guard`: called before each poll; it raises to give up early (a watched process died).
    - `details`: appended to the timeout's message (process logs, the state seen last).
    """
    deadline = time.monotonic() + within
    while True:
        if guard is not None:
            guard()
        try:
            found = check()
            value = await found if inspect.isawaitable(found) else found
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(f"timed out after {within:g}s waiting for {what}{extra}")
        await asyncio.sleep(interval)


def stack_of(task: asyncio.Task[object]) -> str:
    """Where `task` stands: what a wait that did not end says of what it waited for."""
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue()
