"""Every error countersign's agent host raises, in one tree.

    CountersignError
    ├── ConfigurationError        a setting is missing or invalid: fix the named variable
    ├── AgentError
    │   ├── UnknownAgentError     no factory of that name in the registry
    │   └── ToolDefinitionError   a tool function cannot be turned into a schema
    ├── CheckpointError
    │   ├── UnsupportedCheckpointVersion   written by an unknown or newer countersign
    │   ├── AgentChangedError     the agent's tools or policy changed while the run waited
    │   └── CheckpointDecryptError         ciphertext tampered with, moved, or key missing
    │       ├── MissingKeyError   sealed under a key this ring lacks: waits for it, not failed
    │       └── SealedFieldError  the same, for one sealed field of a run (input, arguments, ...)
    │           └── MissingFieldKeyError   (and a MissingKeyError) one field's key is missing
    ├── DecisionError
    │   ├── MissingDecisionError  resume called without a decision for every pending call
    │   ├── InvalidDecisionError  a decision that does not fit its pending call
    │   └── DecisionMismatchError the decider saw a different call than the one pending
    ├── DeliveryFailed            the chat side refused a notification for good (never retried)
    ├── ModelError                the model endpoint failed or answered something unusable
    ├── PolicyRuleError           an operator's rule file is malformed
    └── StoreError                Redis-side failures (see agent_host.durable.store)
        └── StoreUnavailable      Redis could not be used; nothing may have changed, retry
            └── StoreFull         Redis refuses writes (maxmemory): retry once there is room

Each message says what happened and what to do about it.

Signals are apart from that tree: raised on purpose to steer the flow, never a failure to
report, and each caught by exactly one place that knows what to do:

    Signal
    ├── PauseRequest              a tool asks a human (`pause()`): the runner pauses the run
    ├── InvalidArguments          the model's arguments do not fit the tool: the text goes
    │                             back to the model as the call's result
    ├── RetryLater                a stream handler (the outbox's notifier) cannot act yet:
    │                             the entry stays pending and is tried again
    └── RunMovedOn                the run was paused, finished or taken by another worker:
                                  this worker stops and acknowledges its entry
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentChangedError",
    "AgentError",
    "CheckpointDecryptError",
    "CheckpointError",
    "ConfigurationError",
    "CountersignError",
    "DecisionError",
    "DecisionMismatchError",
    "DeliveryFailed",
    "InvalidArguments",
    "InvalidDecisionError",
    "MissingDecisionError",
    "MissingFieldKeyError",
    "MissingKeyError",
    "ModelError",
    "PauseRequest",
    "PolicyRuleError",
    "RetryLater",
    "RunMovedOn",
    "SealedFieldError",
    "Signal",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "ToolDefinitionError",
    "UnknownAgentError",
    "UnsupportedCheckpointVersion",
]


class CountersignError(Exception):
    """Base of every countersign error."""


class ConfigurationError(CountersignError):
    pass


class AgentError(CountersignError):
    pass


class UnknownAgentError(AgentError):
    pass


class ToolDefinitionError(AgentError):
    pass


class CheckpointError(CountersignError):
    pass


class UnsupportedCheckpointVersion(CheckpointError):
    pass


class AgentChangedError(CheckpointError):
    pass


class CheckpointDecryptError(CheckpointError):
    pass


class MissingKeyError(CheckpointDecryptError):
    """Sealed under a key this process's ring does not hold: not damage. The ring with that
    key added back reads it, so what needs it waits rather than fails."""


class SealedFieldError(CheckpointDecryptError):
    """A sealed field (`agent_host.durable.sealed_fields`) cannot be opened. Readers show it
    as "[unreadable: <message>]"; a worker that needs it to go on fails the run with it."""


class MissingFieldKeyError(SealedFieldError, MissingKeyError):
    """A sealed field under a key this ring lacks: shown as unreadable, as any, but a
    worker that needs it waits for a ring with the key rather than failing the run."""


class DecisionError(CountersignError):
    pass


class MissingDecisionError(DecisionError):
    pass


class InvalidDecisionError(DecisionError):
    pass


class DecisionMismatchError(DecisionError):
    pass


class DeliveryFailed(CountersignError):
    """A notification the chat side refused in a way no retry can fix (a channel the bot is
    not in, an archived channel, a deleted message, a revoked token).

    `code` is the chat platform's own error code (Slack's `not_in_channel`, ...), `channel`
    the destination that refused it. Raised by a notifier; the outbox records it, routes
    the request elsewhere where it can, and acknowledges the entry instead of retrying.
    """

    # countersign's own codes, for a notification it gave up on itself (see `poison`): one
    # that kept failing with an error of its own, and one that stopped every process
    # that took it.
    OWN_ERROR = "countersign_error"
    STOPPED = "countersign_stopped"

    def __init__(self, code: str, channel: str = "", detail: str = "") -> None:
        self.code, self.channel, self.detail = code, channel, detail
        where = f" in {channel}" if channel else ""
        super().__init__(f"delivery refused{where}: {code}" + (f" ({detail})" if detail else ""))


class ModelError(CountersignError):
    pass


class PolicyRuleError(CountersignError):
    pass


class StoreError(CountersignError):
    pass


class StoreUnavailable(StoreError):
    """The store (Redis) could not be reached or answered with an error: nothing was changed
    by this call as far as the caller can know; try again shortly."""

    retry_after = 1  # seconds an HTTP API caller is asked to wait before trying again


class StoreFull(StoreUnavailable):
    """Redis refused a write because its memory is full (`maxmemory` reached under
    `noeviction`): nothing was changed, and no write will be taken until an operator makes
    room, so trying again at once does not help."""

    retry_after = 30


# -- signals ----------------------------------------------------------------------------------
class Signal(Exception):
    """Raised on purpose to steer the flow; see the module docstring."""


class PauseRequest(Signal):
    """A tool asks a human `question`; the answer becomes the call's result."""

    def __init__(self, question: str, severity: str, data: dict[str, Any]) -> None:
        # severity: a `Severity` (agent_host.runtime.policy), kept as its text here so the
        # error tree imports nothing
        super().__init__(question)
        self.question = question
        self.severity = severity
        self.data = data


class InvalidArguments(Signal):
    """The model's arguments do not fit the tool's schema; the text goes back to the model.

    `problems` holds the first problem of each top-level argument by its name ("" for the
    arguments as a whole), for a form that shows each under its field."""

    def __init__(self, message: str, problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or {}


class RetryLater(Signal):
    """A handler cannot act on a stream entry yet; it is retried after the idle time."""


class RunMovedOn(Signal):
    """The run was paused, finished or taken over elsewhere; this worker must stop."""
