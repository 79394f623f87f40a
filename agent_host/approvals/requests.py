"""Approval requests: one per gated call of a paused turn, as stored in Redis.

Also the routing interface: where a request goes and who may decide it is decided by routing
rules (`agent_host.approvals.routes`, kept in Redis by `agent_host.durable.route_book`); the
store only asks a `Router` and keeps the answer.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Protocol

from agent_host.approvals.context import CallContext
from agent_host.runtime.decisions import Decision, decision_adapter

__all__ = [
    "DEFAULT_EXPIRY_SECONDS",
    "TERMINAL",
    "ApprovalRequest",
    "DecideResult",
    "EscalatedCopy",
    "FixedRouter",
    "RequestStatus",
    "Route",
    "Router",
]

DEFAULT_EXPIRY_SECONDS = 72 * 3600  # seed 003's default (docs/ORIGINS.md)


class RequestStatus(enum.StrEnum):
    """A request's status: the one vocabulary of the scripts' callers, the API, metrics and
    the Slack blocks (a StrEnum, so it is stored and compared as its plain value)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    CHANGES_REQUESTED = "changes_requested"
    ANSWERED = "answered"
    EXPIRED = "expired"


TERMINAL = tuple(s for s in RequestStatus if s is not RequestStatus.PENDING)


@dataclass(frozen=True)
class Route:
    """Where a request is posted and who may decide it."""

    route_id: str = "default"
    destination: str = ""  # a chat channel id
    reviewers: tuple[str, ...] = ()  # user ids and user-group ids; empty: anyone
    quorum: int = 1
    expiry_seconds: int = DEFAULT_EXPIRY_SECONDS
    allow_self_approval: bool = False
    # A webhook approval is one identity (`webhook`); with this set it completes a quorum
    # on its own, for routes whose second approver is an outside system by design.
    webhook_completes_quorum: bool = False
    # The escalation ladder (0 / "": off): a reminder in the message's thread after
    # `remind_after_seconds`, a copy posted to `escalate_to` (a channel, a user group or a
    # user) after `escalate_after_seconds`; both before `expiry_seconds`.
    remind_after_seconds: int = 0
    escalate_after_seconds: int = 0
    escalate_to: str = ""

    def to_json(self) -> str:
        """As stored in a request's hash (what `asdict` gives, without its deep copy)."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def allows_standing_approval(self) -> bool:
        """ "Approve for this run" is offered only where one person may decide alone."""
        return not self.reviewers and self.quorum <= 1


class Router(Protocol):
    async def route(self, agent: str, tool: str, severity: str) -> Route: ...


class FixedRouter:
    """Every request to one destination: for running without routing rules."""

    def __init__(self, destination: str = "", expiry_seconds: int = DEFAULT_EXPIRY_SECONDS) -> None:
        self._route = Route(destination=destination, expiry_seconds=expiry_seconds)

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return self._route


@dataclass(frozen=True)
class EscalatedCopy:
    """A copy of a request posted by its escalation: where it was sent (`to`: the channel
    or the user escalated to; for a user group, each of its members), the message it made
    (`channel`, `ts`: a user's is their direct message with the app), and the link to the
    original message it shows (empty when the original has none)."""

    to: str
    channel: str
    ts: str
    link: str = ""


@dataclass
class ApprovalRequest:
    request_id: str
    run_id: str
    call_id: str
    agent: str
    tool: str
    arguments: Any
    call_hash: str
    kind: Literal["approval", "question"]
    reason: str
    severity: str
    requested_by: str
    created_at: float
    expires_at: float
    route: Route
    allow_always: bool = True
    question: str = ""
    status: RequestStatus = RequestStatus.PENDING
    decision: Decision | None = None
    decided_by: str = ""
    decided_at: float | None = None
    approvals: list[str] = field(default_factory=list)
    message_channel: str = ""
    message_ts: str = ""
    pause_id: str = ""
    delivery: str = ""  # "undeliverable": chat refused to post it where it was routed
    delivery_error: str = ""  # the chat side's error code, e.g. not_in_channel
    origin: str = ""  # "external": asked by an agent that runs elsewhere (no checkpoint here)
    callback_url: str = ""  # where its decision is POSTed (external requests only)
    editable: tuple[str, ...] = ()  # arguments a reviewer may edit before approving
    reminder_ts: str = ""  # the reminder posted in the message's thread, once posted
    escalations: list[EscalatedCopy] = field(default_factory=list)  # copies, kept in step
    # The escalation notes of the bulk message it waits in (one per destination, for its
    # route's calls): no copy of it, never updated with it, but the same right to decide
    # it as a copy gives, from the App Home tab.
    escalation_notes: list[EscalatedCopy] = field(default_factory=list)
    # What the run did before this call, sealed by the store like the checkpoint it comes
    # from (base64 of the encrypted `CallContext`); `context` is it opened, never stored.
    sealed_context: str = ""
    # Posted with other calls of its turn in one message (`approvals.bulk`): that message's
    # id (its first call's request id) and ts. Until the call is posted on its own too
    # ("Review one by one"), `message_channel`/`message_ts` are that message's.
    bulk_id: str = ""
    bulk_ts: str = ""
    context: CallContext | None = field(default=None, compare=False, repr=False)
    # Fields whose sealed value could not be decrypted, and why (set by the store, never
    # stored); each such field reads "[unreadable: <why>]".
    unreadable: dict[str, str] = field(default_factory=dict)
    # Of those, the ones sealed under a key this process's ring lacks (not damaged).
    keys_missing: frozenset[str] = frozenset()

    @property
    def decided(self) -> bool:
        return self.status != RequestStatus.PENDING

    @property
    def asked(self) -> bool:
        """Put to people (posted to chat); False for a call a standing approval covered."""
        return not (self.decision is not None and self.decision.via == "standing")

    def to_hash(self) -> dict[str, str]:
        # Field by field, without `asdict`'s deep copy of the arguments and the context:
        # every structured value is serialized below, so nothing is shared.
        data: dict[str, Any] = {name: getattr(self, name) for name in _STORED_FIELDS}
        data["route"] = self.route.to_json()
        data["arguments"] = json.dumps(self.arguments)
        data["decision"] = (
            decision_adapter.dump_json(self.decision).decode() if self.decision is not None else ""
        )
        data["status"] = str(self.status)
        data["approvals"] = json.dumps(self.approvals)
        data["editable"] = json.dumps(list(self.editable))
        data["escalations"] = json.dumps([asdict(copy) for copy in self.escalations])
        data["escalation_notes"] = json.dumps([asdict(note) for note in self.escalation_notes])
        data["allow_always"] = "1" if self.allow_always else "0"
        data["decided_at"] = "" if self.decided_at is None else repr(self.decided_at)
        return {k: v if isinstance(v, str) else repr(v) for k, v in data.items()}

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> ApprovalRequest:
        route = json.loads(raw["route"])
        route["reviewers"] = tuple(route.get("reviewers", ()))
        return cls(
            request_id=raw["request_id"],
            run_id=raw["run_id"],
            call_id=raw["call_id"],
            agent=raw["agent"],
            tool=raw["tool"],
            arguments=json.loads(raw["arguments"]),
            call_hash=raw["call_hash"],
            kind=raw["kind"],  # type: ignore[arg-type]
            reason=raw["reason"],
            severity=raw["severity"],
            requested_by=raw.get("requested_by", ""),
            created_at=float(raw["created_at"]),
            expires_at=float(raw["expires_at"]),
            route=Route(**route),
            allow_always=raw.get("allow_always") == "1",
            question=raw.get("question", ""),
            status=RequestStatus(raw.get("status") or RequestStatus.PENDING),
            decision=(
                decision_adapter.validate_json(raw["decision"]) if raw.get("decision") else None
            ),
            decided_by=raw.get("decided_by", ""),
            decided_at=float(raw["decided_at"]) if raw.get("decided_at") else None,
            approvals=json.loads(raw.get("approvals") or "[]"),
            message_channel=raw.get("message_channel", ""),
            message_ts=raw.get("message_ts", ""),
            pause_id=raw.get("pause_id", ""),
            delivery=raw.get("delivery", ""),
            delivery_error=raw.get("delivery_error", ""),
            origin=raw.get("origin", ""),
            callback_url=raw.get("callback_url", ""),
            editable=tuple(json.loads(raw.get("editable") or "[]")),
            reminder_ts=raw.get("reminder_ts", ""),
            escalations=escalated_copies(raw.get("escalations", "")),
            escalation_notes=escalated_copies(raw.get("escalation_notes", "")),
            sealed_context=raw.get("sealed_context", ""),
            bulk_id=raw.get("bulk_id", ""),
            bulk_ts=raw.get("bulk_ts", ""),
        )

    @property
    def only_in_bulk(self) -> bool:
        """Shown only in its bulk message (which has no buttons of its own for it)."""
        return bool(self.bulk_ts) and self.message_ts == self.bulk_ts

    @property
    def original_channel(self) -> str:
        """The channel of its original message: its route's destination while that is not
        recorded (not posted yet, or posted nowhere)."""
        return self.message_channel or self.route.destination

    @property
    def rerouted(self) -> bool:
        """Posted to the default channel because its route's refused it: the people there
        are not the route's (they may decide the call, not approve the rest of the run)."""
        return (
            self.delivery == "undeliverable"
            and bool(self.message_channel)
            and self.message_channel != self.route.destination
        )

    def channels(self) -> list[str]:
        """The channels whose people it was put to: the original's, then those of its
        escalated copies and of its bulk message's escalation notes."""
        first = self.original_channel
        escalated = (copy.channel for copy in [*self.escalations, *self.escalation_notes])
        return list(dict.fromkeys([first, *escalated]))

    def escalated_to(self) -> tuple[str, ...]:
        """Where its copies and its bulk message's escalation notes were sent: channels,
        and people (in their direct messages; for a user group, each member)."""
        return tuple(copy.to for copy in [*self.escalations, *self.escalation_notes])

    def posted_in(self, channel: str) -> bool:
        """Whether a message of this request (the original, or an escalated copy) is in
        `channel`; True while the original's channel is not recorded yet."""
        if not self.message_channel or channel == self.message_channel:
            return True
        return any(copy.channel == channel for copy in self.escalations)

    def public(self) -> dict[str, Any]:
        """The request as the HTTP API shows it."""
        return {
            "request_id": self.request_id,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "agent": self.agent,
            "tool": self.tool,
            "kind": self.kind,
            "arguments": self.arguments,
            "call_hash": self.call_hash,
            "reason": self.reason,
            "question": self.question or None,
            "severity": self.severity,
            "requested_by": self.requested_by or None,
            "status": str(self.status),
            "decision": None if self.decision is None else self.decision.model_dump(mode="json"),
            "decided_by": self.decided_by or None,
            "decided_at": self.decided_at,
            "approvals": self.approvals,
            "quorum": self.route.quorum,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "channel": self.route.destination or None,
            "message_ts": self.message_ts or None,
            "delivery": self.delivery or None,  # "undeliverable" when its channel refused it
            "delivery_error": self.delivery_error or None,
            "origin": self.origin or "countersign",
            "editable": list(self.editable),
            "bulk_id": self.bulk_id or None,
        }


# What `to_hash` stores: every field but the context (only its sealed form is stored) and
# what the store notes on reading (`unreadable`, `keys_missing`).
_STORED_FIELDS = tuple(
    f.name
    for f in fields(ApprovalRequest)
    if f.name not in ("context", "unreadable", "keys_missing")
)


def escalated_copies(raw: str) -> list[EscalatedCopy]:
    """The `escalations` (or `escalation_notes`) field as stored (a JSON list of objects);
    [] when absent."""
    return [EscalatedCopy(**item) for item in json.loads(raw or "[]")]


@dataclass(frozen=True)
class DecideResult:
    """What the compare-and-set answered."""

    outcome: Literal[
        "decided",
        "progress",
        "already_decided",
        "not_found",
        "duplicate_vote",
        "hash_mismatch",
        "past_deadline",
        "wrong_kind",  # e.g. an answer to an approval, an approval of a question
        "not_due",  # an expiry before the deadline (by Redis's clock)
        "refused",  # this decider may not decide this request; `reason` says why
        "stale",  # a form of a pause that is over
        "unknown",  # the result could not be learnt within the caller's budget
    ]
    request: ApprovalRequest | None = None
    resume_queued: bool = False
    approvals: int = 0  # with outcome "progress": approvals recorded so far, this one included
    reason: str = ""  # with outcome "refused": why, in words for the decider
    # with outcome "refused" of edited arguments that do not fit the tool: the problem of
    # each argument by its name ("" for the arguments as a whole)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.outcome in ("decided", "progress")
