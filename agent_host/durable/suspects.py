"""Entries suspected of stopping the process that handles them are handled alone.

An entry reclaimed after deliveries that reached no verdict (its process was killed, or
crashed, each time: `poison.SUSPECT_AFTER`) may be what stopped that process. Handled
beside others, another death would count against them all. So a suspect waits until no
other entry of this process is being handled (waited for at most QUIET_WAIT, below), none
begins meanwhile, and suspects go one at a time: if it stops the process again, it is to
blame (`poison` counts those attempts). The Slack endpoint and the HTTP API are not held
back. Suspects follow a crash loop, so the usual cost is a counter and two flags per entry.

What is in flight is waited for at most QUIET_WAIT: a resume in a long model call, or posts
paced behind a busy channel, must not hold every stream of the process back for as long.
The suspect then goes on beside them; should the process stop, the suspect's attempt
counts against it whichever entry stopped it, and the others count a delivery more, and
become suspects only if that happens to them again.

One gate per process, shared by every consumer in it (the `Host` makes it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["QUIET_WAIT", "SuspectGate"]

# Seconds a suspect waits for the entries in flight to finish before it goes on anyway.
QUIET_WAIT = 30.0


class SuspectGate:
    def __init__(self, quiet_wait: float = QUIET_WAIT) -> None:
        self.quiet_wait = quiet_wait
        self._running = 0
        self._quiet = asyncio.Event()  # no entry is being handled
        self._quiet.set()
        self._open = asyncio.Event()  # no suspect waits for its turn or is being handled
        self._open.set()
        self._one_suspect = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def entry(self) -> AsyncIterator[None]:
        """Around the handling of an entry above suspicion."""
        while not self._open.is_set():
            await self._open.wait()
        self._running += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._running -= 1
            if not self._running:
                self._quiet.set()

    @contextlib.asynccontextmanager
    async def suspect(self) -> AsyncIterator[None]:
        """Around the handling of a suspect: alone in the process."""
        async with self._one_suspect:
            self._open.clear()
            try:
                # (asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a stop that
                # comes just as the wait ends, and the suspect would begin during shutdown)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.quiet_wait):
                        await self._quiet.wait()
                yield
            finally:
                self._open.set()
