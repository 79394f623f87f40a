"""At most once per so many seconds: for what a loop would otherwise log at every turn
(the same error of its own each round, every message refused while a token is)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Every"]


class Every:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self._last: dict[str, float] = {}

    def due(self, what: str = "") -> bool:
        """Whether `what` is due now (and, when it is, it counts as done now)."""
        now, last = self.clock(), self._last.get(what)
        if last is not None and now - last < self.seconds:
            return False
        self._last[what] = now
        return True
