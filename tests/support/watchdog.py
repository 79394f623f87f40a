"""A test still going a minute past its timeout ends the run, saying where every task and
thread stood. pytest-timeout fails a test at its timeout with a signal, and the run goes
on; but a test whose teardown then waits for ever (a task that lets its cancellation go by:
the loop's close waits for it) would hold the run until CI's own limit, with nothing said.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.waiting import stack_of

GRACE_SECONDS = 60
DEFAULT_TIMEOUT = 120.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = timeout_of(item) + GRACE_SECONDS
    timer = threading.Timer(limit, end_the_run, args=(item, limit))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    configured = item.config.getini("timeout")
    return float(configured) if configured else DEFAULT_TIMEOUT


def end_the_run(item: pytest.Item, limit: float) -> None:
    """From the timer's thread: the run is stuck, and nothing else will end it."""
    capture: Any = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    out = sys.stderr
    out.write(
        f"\n{item.nodeid} is still going {limit:.0f} s after it began (its timeout and "
        f"{GRACE_SECONDS} s more): the run ends here. Where each task and thread stands:\n"
    )
    try:
        for loop in running_loops():
            for task in asyncio.all_tasks(loop):
                out.write(f"\n--- task {task.get_name()}: {task.get_coro()!r}\n")
                out.write(stack_of(task))
        frames = sys._current_frames()
        for thread in threading.enumerate():
            frame = frames.get(thread.ident or -1)
            if frame is not None and thread is not threading.current_thread():
                out.write(f"\n--- thread {thread.name}\n{''.join(traceback.format_stack(frame))}")
    finally:
        out.flush()
        os._exit(1)


def running_loops() -> list[asyncio.AbstractEventLoop]:
    return [
        o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()
    ]
