"""Approval requests from agents that run elsewhere, over HTTP (docs/openapi.yaml):

    POST /api/v1/approvals             create (idempotent by external_id) -> 201
    GET  /api/v1/approvals/{id}        its state and decision; ?wait=S long-polls up to 60 s
    GET  /api/v1/approvals/by-external-id/{external_id}     the same, found by the caller's id

The request is routed, posted, decided and audited like one of countersign's own runs
(`agent_host.approvals.external`); these handlers only read, check and answer.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.callback_hosts import parse_callback_hosts
from agent_host.approvals.external import InvalidExternalRequest, parse_external_request
from agent_host.http.api import HOST_KEY, authorized, error, json_object
from agent_host.runtime.decisions import Answer, Reject, RequestChanges

__all__ = [
    "MAX_WAIT_SECONDS",
    "approval_by_external_id",
    "approval_detail",
    "create_approval",
    "external_view",
]

MAX_WAIT_SECONDS = 60

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
    """The request as its caller reads it: everything the list shows, the verdict and the
    reviewer's words (a rejection's reason, the changes asked for, or the answer)."""
    decision = request.decision
    feedback = ""
    if isinstance(decision, Reject):
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


async def create_approval(request: web.Request) -> web.Response:
    if denied := authorized(request):
        return denied
    body = await json_object(request)
    if isinstance(body, web.Response):
        return body
    host = request.app[HOST_KEY]
    try:
        spec = parse_external_request(body, parse_callback_hosts(host.settings.callback_hosts))
    except InvalidExternalRequest as exc:
        return error(400, str(exc))
    if spec.callback_url and not host.settings.webhook_secret:
        return error(
            400,
            "callbacks are signed with COUNTERSIGN_WEBHOOK_SECRET, which is not set on the "
            "server; set it, or leave out callback_url and poll GET /api/v1/approvals/{id}",
        )
    created = await host.external.create(spec)
    if created.outcome == "conflict":
        return error(
            409,
            f"external_id {spec.external_id!r} was already used for request "
            f"{created.request_id} with a different body; use a new external_id for a new "
            "request, or resend the same body to get that one",
            request_id=created.request_id,
        )
    current = await host.store.get_request(created.request_id)
    status = str(current.status) if current is not None else "pending"
    return web.json_response(
        {
            "request_id": created.request_id,
            "status": status,
            "call_hash": spec.call_hash,
            "url": approval_url(created.request_id),
            "created": created.outcome == "created",
        },
        status=201 if created.outcome == "created" else 200,
    )


async def approval_detail(request: web.Request) -> web.Response:
    if denied := authorized(request):
        return denied
    return await _detail(request, request.match_info["request_id"])


async def approval_by_external_id(request: web.Request) -> web.Response:
    """The request a caller's external_id created (e.g. to wait for it after a crash)."""
    if denied := authorized(request):
        return denied
    external_id = request.match_info["external_id"]
    request_id = await request.app[HOST_KEY].external.by_external_id(external_id)
    if request_id is None:
        return error(
            404,
            f"no approval request was created with external_id {external_id!r}; create it "
            "with POST /api/v1/approvals",
        )
    return await _detail(request, request_id)


async def _detail(request: web.Request, request_id: str) -> web.Response:
    raw_wait = request.query.get("wait", "0")
    try:
        wait = float(raw_wait)
    except ValueError:
        wait = -1.0
    if not math.isfinite(wait) or not 0 <= wait <= MAX_WAIT_SECONDS:
        return error(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}")
    found = await request.app[HOST_KEY].external.wait(request_id, wait)
    if found is None:
        return error(404, f"no approval request {request_id!r}")
    return web.json_response(external_view(found))
