"""The HTTP API's handlers (aiohttp): runs, approvals, health, metrics, and what every
handler shares (JSON errors, the bearer token, strict JSON bodies).

Bad input is a 4xx with a JSON body that says what is wrong, never a 500; bodies over the
configured limit get 413. `agent_host.http.application` puts the routes together.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from agent_host.approvals.requester import requester_problem
from agent_host.approvals.routes import did_you_mean
from agent_host.durable import keys as K
from agent_host.durable.host import Host
from agent_host.durable.metrics import MetricsPage
from agent_host.durable.store import parse_cursor
from agent_host.errors import CountersignError, StoreUnavailable, UnknownAgentError
from agent_host.runtime import strict_json
from agent_host.runtime.fingerprint import same_json

__all__ = [
    "HOST_KEY",
    "MAX_WAIT_SECONDS",
    "METRICS_KEY",
    "STORE_BUDGET_SECONDS",
    "authorized",
    "error",
    "healthz",
    "json_errors",
    "json_object",
    "list_approvals",
    "long_poll",
    "metrics",
    "readyz",
    "run_detail",
    "same_secret",
    "start_run",
    "unknown_fields",
]

log = logging.getLogger(__name__)

HOST_KEY = web.AppKey("countersign_host", Host)
METRICS_KEY = web.AppKey("countersign_metrics", MetricsPage)
MAX_WAIT_SECONDS = 60  # the longest long poll (`?wait=`)
# How long a request may wait on Redis (beyond its long poll) before it is answered 503: the
# client does not time out on a Redis that accepts connections and answers nothing.
STORE_BUDGET_SECONDS = 10.0
READY_WITHIN_SECONDS = 2.0  # /readyz: Redis answers a PING within this, or it is not ready
RUN_FIELDS = ("agent", "input", "requested_by")  # POST /api/v1/runs
NAMED_UNKNOWN = 10  # an answer names this many unknown fields at most
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison of a header with a secret; odd bytes simply do not match."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    budget = STORE_BUDGET_SECONDS + (long_poll(request) or 0.0)
    deadline = asyncio.timeout(budget)
    try:
        async with deadline:
            return await handler(request)
    except TimeoutError:
        if not deadline.expired():  # a handler's own, not the budget: a bug
            log.exception("unexpected error on %s %s", request.method, request.path)
            return error(500, "internal error; the request may be retried")
        log.warning("%s %s: no answer within %.0f s", request.method, request.path, budget)
        response = error(
            503,
            f"Redis did not answer within {budget:.0f} s; nothing may have changed, try again "
            "shortly",
        )
        response.headers["Retry-After"] = "1"
        return response
    except web.HTTPRequestEntityTooLarge as exc:
        return error(413, f"request body too large: {exc.text}; send a smaller body")
    except web.RequestPayloadError:  # aiohttp could not read the body as it was sent
        return _unreadable_body(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.reason)
    except StoreUnavailable as exc:  # nothing may have changed: the caller can try again
        log.warning("%s %s: %s (%s)", request.method, request.path, exc, exc.__cause__)
        response = error(503, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return error(500, "internal error; the request may be retried")


def _unreadable_body(request: web.Request) -> web.Response:
    """The answer to a body aiohttp could not read: bad input, not a server error."""
    encodings = ", ".join(request.headers.getall("Content-Encoding", []))
    if encodings:
        response = error(
            400,
            f"the body could not be decoded as its Content-Encoding ({encodings}) says; send "
            "it uncompressed, or encoded as declared; nothing was changed",
        )
    else:
        response = error(
            400,
            "the body could not be read as sent (it ended early, or its chunked framing is "
            "broken); send it again, whole; nothing was changed",
        )
    # The connection cannot carry another request once its body failed to decode: close it
    # after this answer, and mark the body read so that aiohttp does not drain it again
    # (that read raises the same error, logged as an unhandled traceback).
    response.force_close()
    request.content.feed_eof()
    return response


def unknown_fields(body: dict[str, Any], accepted: Iterable[str]) -> str | None:
    """What to tell a caller whose body has fields other than `accepted`, or None. A field
    dropped unseen would be worse than a refusal: `requestedBy` for `requested_by` leaves
    the run without its requester, whom the self-approval rule then cannot stop."""
    known = sorted(accepted)
    unknown = sorted(set(body) - set(known))
    if not unknown:
        return None
    named = [f"{name!r}{did_you_mean(name, known)}" for name in unknown[:NAMED_UNKNOWN]]
    if len(unknown) > NAMED_UNKNOWN:
        named.append(f"and {len(unknown) - NAMED_UNKNOWN} more")
    return f"unknown field(s) {', '.join(named)}; the accepted fields are {', '.join(known)}"


def long_poll(request: web.Request) -> float | None:
    """The seconds a request asks to be held (`?wait=`, 0 when absent), or None when that
    is not a number of seconds from 0 to MAX_WAIT_SECONDS."""
    try:
        wait = float(request.query.get("wait", "0"))
    except ValueError:
        return None
    return wait if math.isfinite(wait) and 0 <= wait <= MAX_WAIT_SECONDS else None


def authorized(request: web.Request) -> web.Response | None:
    """None when the request carries the API's bearer token, else the answer to send."""
    token = request.app[HOST_KEY].settings.api_token
    if not token:
        return error(503, "the API is disabled: set COUNTERSIGN_API_TOKEN to enable it")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not same_secret(given, token):
        return error(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'")
    return None


async def json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = strict_json.loads(await request.read() or b"null")
    except ValueError as exc:  # not JSON, not UTF-8, NaN, too deep, a number too long...
        return error(400, f"body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        return error(400, "body must be a JSON object")
    return body


async def start_run(request: web.Request) -> web.Response:
    if denied := authorized(request):
        return denied
    body = await json_object(request)
    if isinstance(body, web.Response):
        return body
    if problem := unknown_fields(body, RUN_FIELDS):
        return error(400, f"{problem}; no run was started")
    host = request.app[HOST_KEY]
    agent, text, requested_by = body.get("agent"), body.get("input"), body.get("requested_by")
    if not isinstance(agent, str) or not isinstance(text, str):
        return error(400, 'expected {"agent": str, "input": str, "requested_by"?: str}')
    if requested_by is not None and not isinstance(requested_by, str):
        return error(400, "requested_by must be a string")
    if problem := requester_problem(requested_by or ""):
        return error(400, problem)
    try:
        host.runner.agent(agent)
    except UnknownAgentError as exc:
        return error(400, str(exc))
    run_id = await host.store.create_run(agent, text, requested_by)
    return web.json_response({"run_id": run_id, "status": "running"}, status=202)


async def run_detail(request: web.Request) -> web.Response:
    if denied := authorized(request):
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
    if pause_id and info.origin != "external":  # an external request has no checkpoint
        try:
            state = await host.store.load_checkpoint(run_id, pause_id)
            detail["tool_calls"] = [
                {
                    "call_id": c.call_id,
                    "tool": c.tool,
                    "arguments": c.arguments,
                    # what it ran with when a reviewer edited the arguments before approving
                    "edited_arguments": None
                    if same_json(c.run_arguments, c.arguments)
                    else c.run_arguments,
                    "outcome": c.outcome,
                    "result": c.result,
                }
                for c in state.calls
            ]
        except CountersignError as exc:
            detail["checkpoint_error"] = str(exc)
    return web.json_response(detail)


async def list_approvals(request: web.Request) -> web.Response:
    if denied := authorized(request):
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


async def healthz(request: web.Request) -> web.Response:
    """Liveness: fails once a background task of the host (a resume worker, the outbox, the
    callbacks, the sweeper) ended while it runs, so that an orchestrator restarts the process
    whose approvals would otherwise wait for ever."""
    if ended := request.app[HOST_KEY].ended_early:
        return error(
            503,
            f"background work stopped in this process ({', '.join(ended)}): restart it; "
            "its log says why",
        )
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(READY_WITHIN_SECONDS):
            await request.app[HOST_KEY].redis.ping()
    except Exception as exc:  # the detail (e.g. Redis's address) is for the log, not callers
        log.warning("/readyz: Redis is not reachable: %s", exc)
        return error(503, "Redis is not reachable; the server log says why")
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=await request.app[METRICS_KEY].render(),
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )
