"""The notifier interface from the agent host to chat, and a logging implementation.

`agent_host` knows nothing of Slack: the outbox calls these three methods, and `bot`
implements them. A notifier raises to say "not now": the outbox keeps the entry and
tries again later, so an outage of the chat side delays notifications but loses none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from .approvals import ApprovalRequest

__all__ = ["LoggingNotifier", "MessageRef", "Notifier", "RunSummary"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MessageRef:
    channel: str
    ts: str


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    agent: str
    status: str  # succeeded | failed
    output: str
    error: str
    requested_by: str


class Notifier(Protocol):
    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None: ...

    async def request_updated(self, request: ApprovalRequest) -> None: ...

    async def run_finished(self, run: RunSummary, requests: list[ApprovalRequest]) -> None: ...


class LoggingNotifier:
    """For running without chat: every notification becomes a log line."""

    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None:
        log.info(
            "approval needed: request %s run %s tool %s (%s)",
            request.request_id,
            request.run_id,
            request.tool,
            request.severity,
        )
        return None

    async def request_updated(self, request: ApprovalRequest) -> None:
        log.info("request %s is %s by %s", request.request_id, request.status, request.decided_by)

    async def run_finished(self, run: RunSummary, requests: list[ApprovalRequest]) -> None:
        log.info("run %s %s", run.run_id, run.status)
