"""The HTTP API (aiohttp): runs, approvals, the seed-003 approval webhook, health, metrics.

Bad input is a 4xx with a JSON body that says what is wrong, never a 500; bodies over the
configured limit get 413.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agent_host.approvals import decision_for
from agent_host.durable import keys as K
from agent_host.durable.host import Host
from agent_host.durable.store import parse_cursor
from agent_host.errors import CountersignError, UnknownAgentError
from agent_host.runtime import strict_json

__all__ = ["add_api_routes", "create_app"]

log = logging.getLogger(__name__)

HOST_KEY = web.AppKey("countersign_host", Host)
# seed 003's wire format (docs/ORIGINS.md)
WEBHOOK_DECISIONS = ("approved", "rejected", "request_changes")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of a header with a secret; odd bytes simply do not match."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        return error(413, f"request body too large: {exc.text}; send a smaller body")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.reason)
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return error(500, "internal error; the request may be retried")


def _authorized(request: web.Request) -> web.Response | None:
    token = request.app[HOST_KEY].settings.api_token
    if not token:
        return error(503, "the API is disabled: set COUNTERSIGN_API_TOKEN to enable it")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not _same(given, token):
        return error(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'")
    return None


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = strict_json.loads(await request.read() or b"null")
    except strict_json.NonFiniteNumber as exc:
        return error(400, f"body is not valid JSON: {exc}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return error(400, f"body is not valid JSON: {exc}")
    except RecursionError:
        return error(400, "body is nested too deeply; send a flatter JSON object")
    if not isinstance(body, dict):
        return error(400, "body must be a JSON object")
    return body


async def start_run(request: web.Request) -> web.Response:
    if denied := _authorized(request):
        return denied
    body = await _json_object(request)
    if isinstance(body, web.Response):
        return body
    host = request.app[HOST_KEY]
    agent, text, requested_by = body.get("agent"), body.get("input"), body.get("requested_by")
    if not isinstance(agent, str) or not isinstance(text, str):
        return error(400, 'expected {"agent": str, "input": str, "requested_by"?: str}')
    if requested_by is not None and not isinstance(requested_by, str):
        return error(400, "requested_by must be a string")
    try:
        host.runner.agent(agent)
    except UnknownAgentError as exc:
        return error(400, str(exc))
    run_id = await host.store.create_run(agent, text, requested_by)
    return web.json_response({"run_id": run_id, "status": "running"}, status=202)


async def run_detail(request: web.Request) -> web.Response:
    if denied := _authorized(request):
        return denied
    host, run_id = request.app[HOST_KEY], request.match_info["run_id"]
    if not K.is_run_id(run_id):
        return error(404, f"no run {run_id!r}")
    info = await host.store.run_info(run_id)
    if info is None:
        return error(404, f"no run {run_id!r}")
    detail: dict[str, Any] = {
        "run_id": run_id,
        "agent": info.agent,
        "status": info.status.public,
        "output": info.output or None,
        "error": info.error or None,
        "requested_by": info.requested_by or None,
        "approvals": [r.public() for r in await host.store.run_requests(run_id)],
        "tool_calls": [],
        "audit": await host.store.audit(run_id),
    }
    pause_id = info.pause_id
    if pause_id:
        try:
            state = await host.store.load_checkpoint(run_id, pause_id)
            detail["tool_calls"] = [
                {
                    "call_id": c.call_id,
                    "tool": c.tool,
                    "arguments": c.arguments,
                    "outcome": c.outcome,
                    "result": c.result,
                }
                for c in state.calls
            ]
        except CountersignError as exc:
            detail["checkpoint_error"] = str(exc)
    return web.json_response(detail)


async def list_approvals(request: web.Request) -> web.Response:
    if denied := _authorized(request):
        return denied
    status = request.query.get("status", "pending")
    if status != "pending":
        return error(400, "only status=pending is listed; see a run's detail for decided ones")
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError:
        return error(400, "limit must be an integer between 1 and 500")
    if not 1 <= limit <= 500:
        return error(400, "limit must be an integer between 1 and 500")
    cursor = request.query.get("cursor") or None
    if cursor is not None:
        try:
            parse_cursor(cursor)
        except ValueError as exc:
            return error(400, str(exc))
    host = request.app[HOST_KEY]
    page = await host.store.list_pending(request.query.get("channel"), cursor, limit)
    return web.json_response(
        {"approvals": [r.public() for r in page.requests], "next_cursor": page.next_cursor}
    )


async def approval_webhook(request: web.Request) -> web.Response:
    host = request.app[HOST_KEY]
    secret = host.settings.webhook_secret
    if not secret:
        return error(503, "the approval webhook is disabled: set COUNTERSIGN_WEBHOOK_SECRET")
    raw = await request.read()
    given = request.headers.get("X-Webhook-Signature", "")
    expected = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    if not given or not _same(given, expected):
        return error(
            401, "missing or wrong X-Webhook-Signature (sha256=<hex HMAC of the raw body>)"
        )
    body = await _json_object(request)
    if isinstance(body, web.Response):
        return body
    request_id, verdict = body.get("requestId"), body.get("decision")
    feedback = body.get("feedback") or ""
    if not isinstance(request_id, str) or verdict not in WEBHOOK_DECISIONS:
        return error(
            400, 'expected {"requestId": str, "decision": "approved"|"rejected"|"request_changes"}'
        )
    if not isinstance(feedback, str):
        return error(400, "feedback must be a string")
    claimed = body.get("decidedBy")
    if claimed is not None and not isinstance(claimed, str):
        return error(400, "decidedBy must be a string")
    approval = await host.approvals.load(request_id)
    if approval is None:
        return error(404, f"no approval request {request_id!r}")
    if approval.kind == "question" and verdict == "approved" and not feedback.strip():
        return error(400, "this request is a question: its answer is the feedback; send one")
    decision = decision_for(verdict, approval, feedback, claimed or "")
    result = await host.approvals.decide(request_id, decision, via="webhook", current=approval)
    current = result.request
    if result.outcome in ("already_decided", "duplicate_vote") and current is not None:
        return _already(request_id, current.status, current.decided_by)
    if result.outcome == "not_found" or current is None:
        return error(404, f"no approval request {request_id!r}")
    if result.outcome == "past_deadline":
        return error(409, f"approval request {request_id!r} is past its deadline; it expires")
    if result.outcome == "hash_mismatch":
        return error(409, f"approval request {request_id!r} changed; nothing was decided")
    if result.outcome in ("wrong_kind", "refused"):
        return error(409, f"approval request {request_id!r}: {result.reason}; nothing was decided")
    return web.json_response(
        {
            "status": "processed" if result.outcome == "decided" else "recorded",
            "request_id": request_id,
            "decision": str(current.status),
            "decided_by": current.decided_by or None,
            "approvals": len(current.approvals),
            "quorum": current.route.quorum,
        }
    )


def _already(request_id: str, status: str, decided_by: str) -> web.Response:
    return web.json_response(
        {
            "status": "already_processed",
            "request_id": request_id,
            "decision": str(status),
            "decided_by": decided_by,
        }
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await request.app[HOST_KEY].redis.ping()
    except Exception as exc:
        return error(503, f"Redis is not reachable: {exc}")
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    from agent_host.durable.metrics import render_metrics

    return web.Response(
        text=await render_metrics(request.app[HOST_KEY]),
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def add_api_routes(app: web.Application, host: Host) -> None:
    app[HOST_KEY] = host
    app.middlewares.append(json_errors)
    app.router.add_post("/api/v1/runs", start_run)
    app.router.add_get("/api/v1/runs/{run_id}", run_detail)
    app.router.add_get("/api/v1/approvals", list_approvals)
    app.router.add_post("/api/v1/webhooks/approval-response", approval_webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


def create_app(host: Host) -> web.Application:
    app = web.Application(client_max_size=host.settings.max_body_bytes)
    add_api_routes(app, host)
    return app
