"""Programmable failures and per-channel rate limiting for the local Slack sandbox.

:class:`FaultQueue` makes the next *n* calls of a Web API method fail with an HTTP status
(optionally after a delay, to trip client timeouts) without applying them; status 200 makes
them slow instead: answered normally, after the delay.
:class:`ChannelRateLimiter` enforces a minimum spacing between ``chat.postMessage`` calls to
one channel, answering like Slack does (HTTP 429, ``Retry-After`` in whole seconds), and
records when each accepted post happened so tests can measure the posting rate.
:class:`MethodRateLimiter` holds chosen Web API methods to a number of calls a minute, as
Slack's rate-limit tiers do (Tier 2: 20, Tier 3: 50, Tier 4: 100 a minute), answering the
same way once a method is over it.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Fault:
    method: str
    status: int
    retry_after: int
    delay: float
    remaining: int


class FaultQueue:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def inject(
        self,
        method: str,
        *,
        status: int = 500,
        retry_after: int = 1,
        delay: float = 0.0,
        times: int = 1,
    ) -> Fault:
        if not (status == 200 or 400 <= status <= 599):
            raise ValueError(
                f"fault status must be an HTTP error status (or 200: a slow but normal "
                f"answer), not {status}"
            )
        if times < 1:
            raise ValueError("times must be at least 1")
        if delay < 0 or retry_after < 1:
            raise ValueError("delay must be >= 0 and retry_after >= 1")
        fault = Fault(method, status, int(retry_after), float(delay), int(times))
        self._faults.append(fault)
        return fault

    def take(self, method: str) -> Fault | None:
        """The fault the next ``method`` call should suffer, if any (consumes one use)."""
        for fault in self._faults:
            if fault.method == method:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def pending(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self._faults]

    def clear(self) -> None:
        self._faults.clear()


class ChannelRateLimiter:
    def __init__(self, rate_per_channel: float | None) -> None:
        if rate_per_channel is not None and rate_per_channel <= 0:
            raise ValueError("rate_limit_per_channel must be positive")
        self.rate_per_channel = rate_per_channel
        self._last: dict[str, float] = {}
        self.post_times: dict[str, list[float]] = defaultdict(list)

    def retry_after(self, channel: str, now: float) -> int | None:
        """Whole seconds to wait before posting to ``channel`` again, or None if allowed."""
        if self.rate_per_channel is None:
            return None
        last = self._last.get(channel)
        interval = 1.0 / self.rate_per_channel
        if last is None or now - last >= interval:
            return None
        return max(1, math.ceil(interval - (now - last)))

    def record(self, channel: str, now: float) -> None:
        self._last[channel] = now
        self.post_times[channel].append(now)

    def max_posts_per_second(self, channel: str | None = None) -> int:
        """Most accepted posts to one channel within any one-second window."""
        channels = [channel] if channel is not None else list(self.post_times)
        best = 0
        for name in channels:
            times = sorted(self.post_times.get(name, []))
            start = 0
            for end, moment in enumerate(times):
                while moment - times[start] >= 1.0:
                    start += 1
                best = max(best, end - start + 1)
        return best


class MethodRateLimiter:
    """At most `per_minute[method]` calls of a method within any sixty seconds; methods
    not named are not limited."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self.per_minute: dict[str, int] = {}
        self._calls: dict[str, deque[float]] = defaultdict(deque)

    def retry_after(self, method: str, now: float) -> int | None:
        """Whole seconds to wait before calling ``method`` again, or None if allowed."""
        limit = self.per_minute.get(method)
        if limit is None:
            return None
        calls = self._calls[method]
        while calls and now - calls[0] >= self.WINDOW:
            calls.popleft()
        if len(calls) < limit:
            return None
        return max(1, math.ceil(self.WINDOW - (now - calls[0])))

    def record(self, method: str, now: float) -> None:
        if method in self.per_minute:
            self._calls[method].append(now)
