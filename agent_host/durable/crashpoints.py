"""Named crash points for the fault-injection tests.

`COUNTERSIGN_CRASH_AT=<point>` makes the process SIGKILL itself the first time it reaches
that point, so a test can prove that no approval is lost and nothing runs twice whatever
instant a process dies at. Unset (always, outside those tests) it does nothing.

Points: after_pause_saved (before the chat post), after_post (before its ts is saved),
after_tool_ran (before the resumed run's state is saved), sweeper_after_due (the sweeper
has read due requests and not yet expired them).
"""

from __future__ import annotations

import logging
import os
import signal

from agent_host.errors import ConfigurationError

__all__ = ["POINTS", "CrashPoints"]

log = logging.getLogger(__name__)

POINTS = frozenset({"after_pause_saved", "after_post", "after_tool_ran", "sweeper_after_due"})


class CrashPoints:
    def __init__(self, armed: str | None = None) -> None:
        if armed and armed not in POINTS:
            known = ", ".join(sorted(POINTS))
            raise ConfigurationError(
                f"COUNTERSIGN_CRASH_AT={armed!r} is not a crash point ({known})"
            )
        self.armed = armed or None

    def reached(self, point: str) -> None:
        if point == self.armed:
            log.warning("crash point %s reached: killing this process (test only)", point)
            os.kill(os.getpid(), signal.SIGKILL)


NEVER = CrashPoints()
