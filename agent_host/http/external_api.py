"""Approval requests from agents that run elsewhere, over HTTP (docs/openapi.yaml):

    POST /api/v1/approvals             create (idempotent by external_id) -> 201
    GET  /api/v1/approvals/{id}        its state and decision; ?wait=S long-polls up to 60 s
    GET  /api/v1/approvals/by-external-id/{external_id}     the same, found by the caller's id
    GET  /api/v1/callbacks/dead        decision callbacks that kept failing

The request is routed, posted, decided and audited like one of countersign's own runs
(`agent_host.approvals.external`); these handlers only read, check and answer. A long poll
whose client hangs up stops waiting (within HUNG_UP_CHECK of its connection closing), so
clients that time out and poll again do not pile up waits nobody will read.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from agent_host.approvals.callback_hosts import parse_callback_hosts
from agent_host.approvals.external import (
    InvalidExternalRequest,
    approval_url,
    external_view,
    parse_external_request,
)
from agent_host.durable.callbacks import dead_callbacks
from agent_host.http.api import (
    HOST_KEY,
    MAX_WAIT_SECONDS,
    authorized,
    error,
    json_object,
    long_poll,
)

__all__ = [
    "MAX_WAIT_SECONDS",
    "STOPPING",
    "approval_by_external_id",
    "approval_detail",
    "create_approval",
    "end_long_polls_on_shutdown",
    "list_dead_callbacks",
]

HUNG_UP_CHECK = 0.5  # seconds between looks at a long-polling client's connection
# Set when the server begins to stop: long polls answer what they know at once, so that a
# stop waits for none of them (the client asks again, of another replica or after restart).
STOPPING = web.AppKey("countersign_stopping", asyncio.Event)


def end_long_polls_on_shutdown(app: web.Application) -> None:
    app[STOPPING] = asyncio.Event()

    async def stopping(app: web.Application) -> None:
        app[STOPPING].set()

    app.on_shutdown.append(stopping)


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
    wait = long_poll(request)
    if wait is None:
        return error(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}")
    external = request.app[HOST_KEY].external
    stopping = request.app[STOPPING]
    waiting = asyncio.ensure_future(external.wait(request_id, wait))
    try:
        while not waiting.done() and not stopping.is_set():
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499, text="the client hung up")  # read by nobody
            await asyncio.wait({waiting}, timeout=HUNG_UP_CHECK)
    finally:  # hung up, or the server stopping: no longer waited on
        if not waiting.done():
            waiting.cancel()
            await asyncio.wait({waiting})  # its end, without taking its cancellation for ours
    found = waiting.result() if not waiting.cancelled() else await external.wait(request_id, 0)
    if found is None:
        return error(404, f"no approval request {request_id!r}")
    return web.json_response(external_view(found))


async def list_dead_callbacks(request: web.Request) -> web.Response:
    """Callbacks that kept failing (or could not be sent), newest first."""
    if denied := authorized(request):
        return denied
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 500:
        return error(400, "limit must be an integer between 1 and 500")
    letters = await dead_callbacks(request.app[HOST_KEY].redis, limit)
    return web.json_response({"dead": letters})
