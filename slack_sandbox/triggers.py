"""``trigger_id`` issuing and exchange for the local Slack sandbox.

As in Slack, a trigger is handed to the app with an interaction, belongs to the user who
interacted, can open one view, and expires three seconds after it was issued.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

TRIGGER_TTL_SECONDS = 3.0
_FORGET_AFTER_SECONDS = 300.0


class TriggerError(Exception):
    """A trigger cannot be exchanged; ``code`` is the Slack error string."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _Trigger:
    user_id: str
    issued_at: float
    exchanged: bool = False


class TriggerRegistry:
    def __init__(self, clock: Callable[[], float], ttl: float = TRIGGER_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl
        self._triggers: dict[str, _Trigger] = {}

    def issue(self, user_id: str) -> str:
        now = self._clock()
        self._triggers = {
            k: t for k, t in self._triggers.items() if now - t.issued_at < _FORGET_AFTER_SECONDS
        }
        trigger_id = (
            f"{secrets.randbelow(9_000_000) + 1_000_000}."
            f"{secrets.randbelow(9_000_000_000) + 1_000_000_000}."
            f"{secrets.token_hex(16)}"
        )
        self._triggers[trigger_id] = _Trigger(user_id, now)
        return trigger_id

    def exchange(self, trigger_id: str) -> str:
        """The user the trigger belongs to; raises :class:`TriggerError` like Slack would."""
        trigger = self._triggers.get(trigger_id)
        if trigger is None:
            raise TriggerError("invalid_trigger_id")
        if trigger.exchanged:
            raise TriggerError("exchanged_trigger_id")
        if self._clock() - trigger.issued_at > self._ttl:
            raise TriggerError("expired_trigger_id")
        trigger.exchanged = True
        return trigger.user_id
