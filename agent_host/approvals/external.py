"""Approval requests from agents that run elsewhere (`POST /api/v1/approvals`).

Such a request is stored as a run of its own with one pending request and no checkpoint
(`origin` "external"), so routing, the chat message, every way of deciding, expiry and the
audit trail are the ones of countersign's own runs; once decided, nothing resumes: the
caller reads the decision, long-polls for it, or gets it at its callback URL.

This module reads and checks the caller's body (pure; the store writes it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from agent_host.approvals.callback_hosts import callback_refusal
from agent_host.approvals.requester import requester_problem
from agent_host.approvals.requests import ApprovalRequest
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.decisions import Answer, Approve, Reject, RequestChanges
from agent_host.runtime.fingerprint import canonical_json
from agent_host.runtime.policy import Severity
from agent_host.runtime.strict_json import non_finite_path, too_deep_path, too_deep_text

__all__ = [
    "EXTERNAL",
    "ExternalRequestSpec",
    "InvalidExternalRequest",
    "approval_url",
    "external_call_hash",
    "external_view",
    "parse_external_request",
]

EXTERNAL = "external"  # the `origin` of such requests, and the `via` of their audit entries
MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_TEXT = {"agent": 200, "tool": 200, "requested_by": 200, "external_id": 200}
MAX_LONG_TEXT = 4000  # reason, question
MIN_HOURS, MAX_HOURS = 1, 720

FIELDS = frozenset(
    {
        "agent",
        "tool",
        "arguments",
        "requested_by",
        "severity",
        "reason",
        "question",
        "expires_in_hours",
        "external_id",
        "callback_url",
    }
)


class InvalidExternalRequest(ValueError):
    """The body is not a valid approval request; the message says what to send instead."""


@dataclass(frozen=True)
class ExternalRequestSpec:
    agent: str
    tool: str
    arguments: dict[str, Any]
    requested_by: str = ""
    severity: str = Severity.MEDIUM.value
    reason: str = ""
    question: str = ""
    expires_in_hours: int | None = None
    external_id: str = ""
    callback_url: str = ""

    @property
    def call_hash(self) -> str:
        return external_call_hash(self.agent, self.tool, self.arguments)

    @property
    def fingerprint(self) -> str:
        """What makes two creations with one external id the same request."""
        fields = {name: getattr(self, name) for name in sorted(FIELDS)}
        return hashlib.sha256(canonical_json(fields).encode()).hexdigest()


def external_call_hash(agent: str, tool: str, arguments: Any) -> str:
    """sha256 of the canonical JSON `{"agent", "tool", "arguments"}` (sorted keys, no
    spaces): a caller can compute it itself to check it runs what the reviewer saw."""
    return call_hash(agent, tool, arguments)


def parse_external_request(
    body: dict[str, Any], callback_hosts: frozenset[str]
) -> ExternalRequestSpec:
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise InvalidExternalRequest(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}"
        )
    agent, tool = _text(body, "agent", required=True), _text(body, "tool", required=True)
    arguments = body.get("arguments")
    if not isinstance(arguments, dict):
        raise InvalidExternalRequest('arguments must be a JSON object, e.g. {"order_id": 123}')
    if (where := non_finite_path(arguments)) is not None:
        raise InvalidExternalRequest(f"arguments hold a non-finite number at {where}")
    if (deep := too_deep_path(arguments)) is not None:  # no reviewer could read them
        raise InvalidExternalRequest(f"arguments {too_deep_text(deep)}")
    if len(canonical_json(arguments).encode()) > MAX_ARGUMENTS_BYTES:
        raise InvalidExternalRequest(f"arguments are larger than {MAX_ARGUMENTS_BYTES} bytes")
    severity = body.get("severity", Severity.MEDIUM.value)
    if severity not in [s.value for s in Severity]:
        raise InvalidExternalRequest(
            "severity must be one of " + ", ".join(s.value for s in Severity)
        )
    hours = body.get("expires_in_hours")
    if hours is not None and (
        isinstance(hours, bool) or not isinstance(hours, int) or not MIN_HOURS <= hours <= MAX_HOURS
    ):
        raise InvalidExternalRequest(
            f"expires_in_hours must be a whole number from {MIN_HOURS} to {MAX_HOURS}"
        )
    external_id = _text(body, "external_id")
    if external_id in (".", ".."):  # a URL's path drops them: it could not be looked up
        raise InvalidExternalRequest('external_id may not be "." or ".."')
    requester = _text(body, "requested_by")
    if problem := requester_problem(requester):
        raise InvalidExternalRequest(problem)
    question = _text(body, "question", limit=MAX_LONG_TEXT)
    if question and not any(c.isprintable() and not c.isspace() for c in question):
        # only blanks, or characters that show as nothing: a reviewer would be asked nothing
        raise InvalidExternalRequest(
            "question is blank: ask something, or leave it out to ask for an approval"
        )
    callback_url = _text(body, "callback_url", limit=4096)
    if callback_url and (refusal := callback_refusal(callback_url, callback_hosts)):
        raise InvalidExternalRequest(refusal)
    return ExternalRequestSpec(
        agent=agent,
        tool=tool,
        arguments=arguments,
        requested_by=requester,
        severity=severity,
        reason=_text(body, "reason", limit=MAX_LONG_TEXT),
        question=question,
        expires_in_hours=hours,
        external_id=external_id,
        callback_url=callback_url,
    )


def _text(body: dict[str, Any], name: str, *, required: bool = False, limit: int = 0) -> str:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidExternalRequest(f"{name} is required (a non-empty string)")
        return ""
    limit = limit or MAX_TEXT[name]
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidExternalRequest(f"{name} must be a {'non-empty ' if required else ''}string")
    if len(value) > limit or "\x00" in value:
        raise InvalidExternalRequest(f"{name} must be at most {limit} characters, without NUL")
    return value


# A request's status as the verdict a caller acts on (seed 003's words, plus the rest).
VERDICTS = {
    "approved": "approved",
    "rejected": "rejected",
    "changes_requested": "request_changes",
    "answered": "answered",
    "expired": "expired",
}


def approval_url(request_id: str) -> str:
    return f"/api/v1/approvals/{request_id}"


def external_view(request: ApprovalRequest) -> dict[str, Any]:
    """The request as its caller reads it (the API, a callback's body): everything the list
    shows, the verdict, and the reviewer's words (an approval's comment, a rejection's
    reason, the changes asked for, or the answer)."""
    decision = request.decision
    feedback = ""
    if isinstance(decision, Approve):
        feedback = decision.comment
    elif isinstance(decision, Reject):
        feedback = decision.message
    elif isinstance(decision, RequestChanges):
        feedback = decision.feedback
    elif isinstance(decision, Answer):
        feedback = decision.text
    return request.public() | {
        "verdict": VERDICTS.get(str(request.status)),
        "feedback": feedback or None,
        "url": approval_url(request.request_id),
    }
