"""The approval webhook (seed 003's wire format, docs/ORIGINS.md): a decision signed with
HMAC-SHA256 of the raw body, decided through the one approval service as the identity
`webhook`.

`feedback` is a rejection's reason, the changes asked for, a question's answer, or an
approval's comment; `edited_arguments`, with `approved` only, are the arguments to change
before the call runs (checked as a Slack edit is: the tool's schema, then the policy). A
field spelt as one of these but for case and separators (`decided_by`, `EDITED_ARGUMENTS`),
or another name for the edits (`edited_args`, `edits`), is refused (400, nothing decided):
it must not decide as if
absent (an approval without its edit, a claim of who decided dropped). Other fields, which
a control plane sending this wire format may add of its own (`decidedAt`), are ignored."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from aiohttp import web

from agent_host.approvals import WEBHOOK, decision_for
from agent_host.approvals.requester import user_id_problem
from agent_host.http.api import HOST_KEY, error, json_object, same_secret
from agent_host.runtime.decisions import Approve

__all__ = ["WEBHOOK_DECISIONS", "approval_webhook"]

WEBHOOK_DECISIONS = ("approved", "rejected", "request_changes")
WEBHOOK_FIELDS = ("requestId", "decision", "feedback", "decidedBy", "edited_arguments")


def _spelling(name: str) -> str:
    return "".join(c for c in name.casefold() if c not in "_-. ")


_SPELT = {_spelling(field): field for field in WEBHOOK_FIELDS}


def _names_edits(spelling: str) -> bool:
    """`edited_args`, `editArguments`, `edits`: an edit, which dropped would approve the call
    unedited (not `editedAt` or `editor`, a control plane's own)."""
    return spelling in ("edit", "edits") or spelling.startswith(("editedarg", "editarg"))


def misspelt_fields(body: dict[str, Any]) -> str | None:
    """What to tell a caller who wrote a field of this wire format another way, or None."""
    named = []
    for name in sorted(set(body) - set(WEBHOOK_FIELDS)):
        meant = _SPELT.get(_spelling(name))
        if meant is None and _names_edits(_spelling(name)):
            meant = "edited_arguments"
        if meant is not None:
            named.append(f"{name!r} (the field is {meant!r})")
    if not named:
        return None
    return f"misspelt field(s) {', '.join(named)}"


async def approval_webhook(request: web.Request) -> web.Response:
    host = request.app[HOST_KEY]
    secret = host.settings.webhook_secret
    if not secret:
        return error(503, "the approval webhook is disabled: set COUNTERSIGN_WEBHOOK_SECRET")
    encodings = [
        token.strip().lower()
        for value in request.headers.getall("Content-Encoding", [])
        for token in value.split(",")
    ]
    if any(token not in ("", "identity") for token in encodings):
        # aiohttp would decode it before the check: what is signed is the bytes as sent
        return error(
            415,
            "send the body uncompressed (no Content-Encoding): X-Webhook-Signature is the "
            "HMAC of the bytes as sent; nothing was decided",
        )
    raw = await request.read()
    given = request.headers.get("X-Webhook-Signature", "")
    expected = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    if not given or not same_secret(given, expected):
        return error(
            401, "missing or wrong X-Webhook-Signature (sha256=<hex HMAC of the raw body>)"
        )
    body = await json_object(request)
    if isinstance(body, web.Response):
        return body
    if misspelt := misspelt_fields(body):
        return error(400, f"{misspelt}; nothing was decided")
    request_id, verdict = body.get("requestId"), body.get("decision")
    feedback = body.get("feedback")
    feedback = "" if feedback is None else feedback
    if not isinstance(request_id, str) or verdict not in WEBHOOK_DECISIONS:
        return error(
            400, 'expected {"requestId": str, "decision": "approved"|"rejected"|"request_changes"}'
        )
    if not isinstance(feedback, str):
        return error(400, "feedback must be a string")
    claimed = body.get("decidedBy")
    if claimed is not None and not isinstance(claimed, str):
        return error(400, "decidedBy must be a string")
    if claimed and (problem := user_id_problem(claimed, "decidedBy", "the decider's")):
        return error(400, f"{problem}; nothing was decided")
    edited = body.get("edited_arguments")
    if edited is not None and (verdict != "approved" or not isinstance(edited, dict)):
        return error(
            400,
            'edited_arguments go with "decision": "approved" only, as a JSON object of the '
            'arguments to change, e.g. {"amount": 40}',
        )
    approval = await host.approvals.load(request_id)
    if approval is None:
        return error(404, f"no approval request {request_id!r}")
    if approval.decided:  # whatever this one says, the sender learns it was decided before
        return _already(request_id, approval.status, approval.decided_by)
    if approval.kind == "question" and verdict == "approved":
        if not feedback.strip():
            return error(400, "this request is a question: its answer is the feedback; send one")
        if edited is not None:
            return error(400, "this request is a question: answer it; it has no arguments to edit")
    decision = decision_for(verdict, approval, feedback, claimed or "", edited)
    result = await host.approvals.decide(request_id, decision, via="webhook", current=approval)
    current = result.request
    if result.outcome in ("already_decided", "duplicate_vote") and current is not None:
        if current.decided:
            return _already(request_id, current.status, current.decided_by)
        if WEBHOOK not in current.approvals:  # the person it names has voted already
            return error(
                409,
                f"approval request {request_id!r}: {claimed!r} has approved it already, and "
                "a vote in their name is not counted twice; nothing was recorded",
            )
        # The webhook's vote towards a quorum is in already (a sender retrying): still waiting
        # for the others, which `already_processed` would hide.
        return web.json_response(
            {
                "status": "already_voted",
                "request_id": request_id,
                "decision": str(current.status),
                "decided_by": None,
                "approvals": len(current.approvals),
                "quorum": current.route.quorum,
            }
        )
    if result.outcome == "not_found" or current is None:
        return error(404, f"no approval request {request_id!r}")
    if result.outcome == "past_deadline":
        return error(409, f"approval request {request_id!r} is past its deadline; it expires")
    if result.outcome == "hash_mismatch":
        return error(409, f"approval request {request_id!r} changed; nothing was decided")
    if result.outcome == "refused" and result.errors:
        return error(
            400,
            f"approval request {request_id!r}: {result.reason}; nothing was decided",
            errors=result.errors,
        )
    if result.outcome in ("wrong_kind", "refused"):
        return error(409, f"approval request {request_id!r}: {result.reason}; nothing was decided")
    answer: dict[str, Any] = {
        "status": "processed" if result.outcome == "decided" else "recorded",
        "request_id": request_id,
        "decision": str(current.status),
        "decided_by": current.decided_by or None,
        "approvals": len(current.approvals),
        "quorum": current.route.quorum,
    }
    recorded = current.decision
    if isinstance(recorded, Approve) and recorded.edited_arguments is not None:
        answer |= {
            "edited_arguments": recorded.edited_arguments,
            "edited_hash": recorded.edited_hash,
        }
    return web.json_response(answer)


def _already(request_id: str, status: str, decided_by: str) -> web.Response:
    return web.json_response(
        {
            "status": "already_processed",
            "request_id": request_id,
            "decision": str(status),
            "decided_by": decided_by or None,
        }
    )
