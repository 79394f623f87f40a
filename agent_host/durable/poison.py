"""Stream entries that fail with an error of countersign's own: given up after
POISON_AFTER attempts, visibly, rather than retried for ever in silence.

A consumer leaves an entry whose handler raised pending, to be reclaimed and tried again.
That is right for what passes: Slack's "not now" (`RetryLater`), Redis or the network
away. Any other error is countersign's own, and the same entry would meet it on every
attempt. The consumer's owner says what giving such an entry up means (the outbox records
a refusal and tells the administrators; the resume worker fails the run, so its requester
hears of it in the thread); the consumer then acknowledges it.

Attempts are counted by each consumer in its own process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.exceptions import RedisClusterException, RedisError

from agent_host.errors import RetryLater, StoreError

__all__ = ["POISON_AFTER", "TRANSIENT", "Failures", "GiveUp"]

# Attempts of one entry failing with an error of countersign's own before it is given up.
POISON_AFTER = 5

# Errors that pass: "not now", and Redis or the network away. Never given up for.
TRANSIENT = (RetryLater, StoreError, RedisError, RedisClusterException, OSError)

# What giving up an entry means, given (entry id, fields, the last error). Raising a
# TRANSIENT error leaves the entry pending: it is given up again on its next attempt.
GiveUp = Callable[[str, dict[str, str], Exception], Awaitable[None]]

_KEPT = 10_000  # entries whose failures are counted at once (then counted afresh)


class Failures:
    """How many times each entry has failed with an error of countersign's own."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def failed(self, entry_id: str) -> bool:
        """Count one more failure of `entry_id`; True once it is due to be given up."""
        count = self._counts.get(entry_id, 0) + 1
        if count == 1 and len(self._counts) >= _KEPT:
            self._counts.clear()
        self._counts[entry_id] = count
        return count >= POISON_AFTER

    def forget(self, entry_id: str) -> None:
        """`entry_id` succeeded, or was given up."""
        self._counts.pop(entry_id, None)
