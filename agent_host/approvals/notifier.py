"""The notifier interface from the agent host to chat, and a logging implementation.

`agent_host` knows nothing of Slack: the outbox calls these methods, and `bot` implements
them. A notifier raises to say "not now": the outbox keeps the entry and tries again
later, so an outage of the chat side delays notifications but loses none. It raises
`DeliveryFailed` to say "never": the outbox records that and does not retry. A request
that could not be posted where it was routed goes through `request_rerouted` (post it
somewhere else, saying why) and `request_undeliverable` (tell the people who can fix it).
The escalation ladder adds `request_reminded` (a reply in the message's thread) and
`escalation_targets` + `request_escalated` (a copy elsewhere); `request_updated` then
updates the copies as well as the original. Many calls of one turn to one channel are
posted as one message (`bulk_posted`) and kept up to date as they are decided
(`bulk_updated`); a call posted on its own later ("Review one by one") goes through
`request_posted` with its `bulk_ts` set (its bulk message's thread).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from agent_host.approvals import ApprovalRequest, EscalatedCopy
from agent_host.approvals.bulk import Bulk
from agent_host.errors import DeliveryFailed

__all__ = ["DeliveryFailed", "LoggingNotifier", "MessageRef", "Notifier", "RunSummary"]

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

    async def request_updated(self, request: ApprovalRequest) -> None:
        """Show `request` as it is now in its message and in each of its escalated copies."""
        ...

    async def run_finished(self, run: RunSummary, requests: list[ApprovalRequest]) -> None: ...

    async def bulk_posted(self, bulk: Bulk, requests: list[ApprovalRequest]) -> MessageRef | None:
        """Post one message for the calls of `bulk` (`requests`, in its order)."""
        ...

    async def bulk_updated(self, bulk: Bulk, requests: list[ApprovalRequest]) -> None:
        """Show the calls of `bulk` as they are now in its message."""
        ...

    async def bulk_escalated(
        self, bulk: Bulk, requests: list[ApprovalRequest], target: str
    ) -> MessageRef:
        """A note at `target` (one of `escalation_targets`) that the calls of `bulk` still
        wait, linking its message."""
        ...

    async def request_reminded(self, request: ApprovalRequest) -> MessageRef | None:
        """Remind the route's reviewers in the thread of the request's message."""
        ...

    async def escalation_targets(self, request: ApprovalRequest) -> list[str]:
        """Where the request's escalation is posted, one copy each: a channel, a user, or
        the members of a user group. Raises DeliveryFailed if there is nowhere to post."""
        ...

    async def request_escalated(self, request: ApprovalRequest, target: str) -> EscalatedCopy:
        """Post a copy of `request`, with its buttons and a link to the original message,
        to `target` (one of `escalation_targets`)."""
        ...

    async def request_rerouted(
        self, request: ApprovalRequest, failure: DeliveryFailed
    ) -> MessageRef | None:
        """Post `request` to a fallback destination with why it is there; None if there is
        none. Raises DeliveryFailed if the fallback refuses it too."""
        ...

    async def request_undeliverable(
        self,
        request: ApprovalRequest,
        failure: DeliveryFailed,
        rerouted: MessageRef | None,
        fallback_failure: DeliveryFailed | None = None,
    ) -> None:
        """Tell the administrators where it went instead (or that the fallback refused it
        too); it is the last resort, so it raises nothing but RetryLater while the chat
        side refuses the app itself (its token): then nobody at all could be told."""
        ...

    async def ladder_step_failed(
        self, request: ApprovalRequest, step: str, failures: list[DeliveryFailed]
    ) -> None:
        """Tell the administrators a step of the request's ladder ("remind" or "escalate")
        was refused for good at these destinations (the request still waits); raises
        nothing but RetryLater while the chat side refuses the app itself."""
        ...


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

    async def bulk_posted(self, bulk: Bulk, requests: list[ApprovalRequest]) -> MessageRef | None:
        log.info(
            "approval needed: %d calls of run %s (bulk %s)",
            len(requests),
            bulk.run_id,
            bulk.bulk_id,
        )
        return None

    async def bulk_updated(self, bulk: Bulk, requests: list[ApprovalRequest]) -> None:
        waiting = sum(1 for r in requests if not r.decided)
        log.info("bulk %s: %d of %d calls waiting", bulk.bulk_id, waiting, len(requests))

    async def bulk_escalated(
        self, bulk: Bulk, requests: list[ApprovalRequest], target: str
    ) -> MessageRef:
        raise DeliveryFailed("no_chat", target)

    async def request_reminded(self, request: ApprovalRequest) -> MessageRef | None:
        log.info("request %s is still waiting for a decision", request.request_id)
        return None

    async def escalation_targets(self, request: ApprovalRequest) -> list[str]:
        log.warning("request %s is escalated to %s", request.request_id, request.route.escalate_to)
        return []  # nowhere to post a copy

    async def request_escalated(self, request: ApprovalRequest, target: str) -> EscalatedCopy:
        raise DeliveryFailed("no_chat", target)

    async def request_rerouted(
        self, request: ApprovalRequest, failure: DeliveryFailed
    ) -> MessageRef | None:
        return None

    async def request_undeliverable(
        self,
        request: ApprovalRequest,
        failure: DeliveryFailed,
        rerouted: MessageRef | None,
        fallback_failure: DeliveryFailed | None = None,
    ) -> None:
        log.error("request %s could not be delivered: %s", request.request_id, failure)

    async def ladder_step_failed(
        self, request: ApprovalRequest, step: str, failures: list[DeliveryFailed]
    ) -> None:
        log.error("request %s: its step %s was refused: %s", request.request_id, step, failures)
