"""The approval domain, without transport: requests and runs as stored, routes, and the one
approval service every decision goes through."""

from agent_host.approvals.edits import ArgumentEditor, EditableField, EditCheck, EditForm
from agent_host.approvals.requests import (
    DEFAULT_EXPIRY_SECONDS,
    TERMINAL,
    ApprovalRequest,
    DecideResult,
    EscalatedCopy,
    FixedRouter,
    RequestStatus,
    Route,
    Router,
)
from agent_host.approvals.runs import RunRecord, RunStatus
from agent_host.approvals.service import (
    WEBHOOK,
    ApprovalService,
    Eligibility,
    ReviewerDirectory,
    Via,
    decision_for,
    kind_refusal,
    may_decide,
    self_approval_refusal,
)

__all__ = [
    "DEFAULT_EXPIRY_SECONDS",
    "TERMINAL",
    "WEBHOOK",
    "ApprovalRequest",
    "ApprovalService",
    "ArgumentEditor",
    "DecideResult",
    "EditCheck",
    "EditForm",
    "EditableField",
    "Eligibility",
    "EscalatedCopy",
    "FixedRouter",
    "RequestStatus",
    "ReviewerDirectory",
    "Route",
    "Router",
    "RunRecord",
    "RunStatus",
    "Via",
    "decision_for",
    "kind_refusal",
    "may_decide",
    "self_approval_refusal",
]
