"""The local sandbox's web page and the routes it calls (a stand-in for Slack, NOT Slack).

Served by the same aiohttp application as the Web API stand-in:

* ``GET /``: ``static/index.html``; ``GET /static/...``: its script and style sheet.
* ``GET /_sandbox/events``: Server-Sent Events, one ``data:`` line of JSON per change event
  (see :mod:`slack_sandbox.events`), a ``: heartbeat`` comment every 15 seconds.
* ``GET /_sandbox/ui/config``: users with role labels, channels, example agents.
* ``POST /_sandbox/ui/click`` ``{user, channel, ts, action_id}``: a person clicks a button.
* ``POST /_sandbox/ui/submit`` ``{user, view_id, values: {block_id: {action_id: value}}}``.
* ``POST /_sandbox/ui/close`` ``{user, view_id}``: the person closes a modal.
* ``POST /_sandbox/ui/slash`` ``{user, channel, text}``: runs ``/approvals <text>``.
* ``POST /_sandbox/ui/home/open`` ``{user}``: the person opens the app's Home tab (the app
  is sent an ``app_home_opened`` event); ``POST /_sandbox/ui/home/click``
  ``{user, block_id, action_id}``: they click a button in it.
* ``GET|POST /_sandbox/ui/runs``: the "Runs" panel (see :mod:`slack_sandbox.page_runs`).

The interaction routes answer ``{"status": <the app's HTTP status>, "body": <its body>}``;
a bad request is a 4xx ``{"error": ...}``, an app that cannot be reached a 502.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from slack_sandbox import interactions
from slack_sandbox.app_client import AppReply, AppUnreachable
from slack_sandbox.core import CORE_KEY, SandboxCore
from slack_sandbox.events import ChangeEvent
from slack_sandbox.page_runs import EXAMPLE_AGENTS, add_runs_routes

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
STATIC_DIR = Path(__file__).parent / "static"
LABEL = "countersign local sandbox — not Slack"
HEARTBEAT_SECONDS = 15.0
SLASH_COMMAND = "/approvals"
DEFAULT_USER = "U0REVIEWER"
DEFAULT_CHANNEL = "C0APPROVALS"
_SHUTDOWN: ChangeEvent = {"type": "_shutdown"}


class _Streams:
    """The change queues of the open event streams, so shutdown can end them."""

    def __init__(self) -> None:
        self.queues: set[asyncio.Queue[ChangeEvent]] = set()


_STREAMS_KEY = web.AppKey("countersign_sandbox_sse_streams", _Streams)


def _core(request: web.Request) -> SandboxCore:
    core = request.app[CORE_KEY]
    if core.base_url is None:  # served by someone else's runner: learn our own address
        core.base_url = str(request.url.origin())
    return core


def _bad(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request, *fields: str) -> JsonDict | web.Response:
    """The JSON object body, or a 400 naming what is missing (``fields`` must be strings)."""
    try:
        body = await request.json()
    except ValueError:
        return _bad(400, "body must be JSON")
    if not isinstance(body, dict):
        return _bad(400, "body must be a JSON object")
    missing = [f for f in fields if not isinstance(body.get(f), str) or not body[f]]
    if missing:
        return _bad(400, f"expected string fields: {', '.join(missing)}")
    return body


def _reply(reply: AppReply) -> web.Response:
    return web.json_response({"status": reply.status, "body": reply.body})


async def _interact(action: Coroutine[Any, Any, AppReply]) -> web.Response:
    """Run one interaction coroutine, turning the driver's exceptions into HTTP answers."""
    try:
        return _reply(await action)
    except LookupError as exc:
        return _bad(404, str(exc))
    except PermissionError as exc:
        return _bad(403, str(exc))
    except ValueError as exc:
        return _bad(400, str(exc))
    except AppUnreachable as exc:
        return _bad(502, str(exc))
    except RuntimeError as exc:  # no events_url / signing secret configured yet
        return _bad(503, str(exc))


# ----------------------------------------------------------------- page and static files


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def _config(request: web.Request) -> web.Response:
    core = _core(request)
    ws = core.workspace
    return web.json_response(
        {
            "label": LABEL,
            "team": ws.team.name,
            "bot": {"id": ws.bot.user_id, "name": ws.bot.name},
            "users": [
                {"id": u.id, "name": u.real_name, "handle": u.name, "role": u.role}
                for u in ws.users
            ],
            "channels": [{"id": c.id, "name": c.name} for c in ws.channels if not c.is_im],
            "agents": [{"name": name, "example": text} for name, text in EXAMPLE_AGENTS],
            "default_user": DEFAULT_USER,
            "default_channel": DEFAULT_CHANNEL,
            "slash_command": SLASH_COMMAND,
            "runs_enabled": bool(core.config.api_url and core.config.api_token),
        }
    )


# ----------------------------------------------------------------- live change events


async def _events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: every change to the workspace, as it is committed."""
    core = _core(request)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    # subscribe before answering: a change made once the browser sees the stream is not lost
    queue = core.hub.subscribe()
    streams = request.app[_STREAMS_KEY].queues
    streams.add(queue)
    try:
        await response.prepare(request)
        # retry: how soon the browser reconnects; the comment flushes the headers through
        await response.write(b"retry: 2000\n: connected\n\n")
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_SECONDS):
                    event = await queue.get()
            except TimeoutError:
                # a comment keeps proxies from closing the stream, and finds dead clients
                await response.write(b": heartbeat\n\n")
                continue
            if event.get("type") == _SHUTDOWN["type"]:
                break
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
    except ConnectionError:  # the browser went away (found by the next write)
        logger.debug("sandbox page event stream closed by the browser")
    finally:
        streams.discard(queue)
        core.hub.unsubscribe(queue)
    return response


async def _end_streams(app: web.Application) -> None:
    """On shutdown, end open event streams so the server need not wait them out."""
    for queue in list(app[_STREAMS_KEY].queues):
        queue.put_nowait(dict(_SHUTDOWN))


# ----------------------------------------------------------------- interactions


async def _click(request: web.Request) -> web.Response:
    body = await _body(request, "user", "channel", "ts", "action_id")
    if isinstance(body, web.Response):
        return body
    core = _core(request)
    return await _interact(
        interactions.click(core, body["user"], body["channel"], body["ts"], body["action_id"])
    )


async def _submit(request: web.Request) -> web.Response:
    body = await _body(request, "user", "view_id")
    if isinstance(body, web.Response):
        return body
    values = body.get("values") or {}
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        return _bad(400, "values must be {block_id: {action_id: value}}")
    core = _core(request)
    return await _interact(interactions.submit_view(core, body["user"], body["view_id"], values))


async def _close(request: web.Request) -> web.Response:
    body = await _body(request, "user", "view_id")
    if isinstance(body, web.Response):
        return body
    core = _core(request)
    view = core.workspace.view(body["view_id"])
    if view is None:
        return _bad(404, f"no view {body['view_id']!r}")
    if view.user != body["user"]:
        return _bad(403, f"view {view.id} is open for {view.user}, not {body['user']}")
    if not view.closed:
        view.closed = True
        core.commit({"type": "view_closed", "view_id": view.id, "user": view.user})
    return web.json_response({"ok": True})


async def _slash(request: web.Request) -> web.Response:
    body = await _body(request, "user", "channel")
    if isinstance(body, web.Response):
        return body
    text = body.get("text", "")
    if not isinstance(text, str):
        return _bad(400, "text must be a string")
    core = _core(request)
    return await _interact(
        interactions.slash(core, body["user"], body["channel"], SLASH_COMMAND, text.strip())
    )


async def _home_open(request: web.Request) -> web.Response:
    body = await _body(request, "user")
    if isinstance(body, web.Response):
        return body
    return await _interact(interactions.open_home(_core(request), body["user"]))


async def _home_click(request: web.Request) -> web.Response:
    body = await _body(request, "user", "block_id", "action_id")
    if isinstance(body, web.Response):
        return body
    core = _core(request)
    return await _interact(
        interactions.click_home(core, body["user"], body["action_id"], body["block_id"])
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _same_page_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The ``/_sandbox/ui`` actions act as the workspace's people: only the page may send
    them. A POST from another site (a form, or a fetch without CORS) cannot send JSON, and
    one that says where it comes from must come from here."""
    if request.method == "POST" and request.path.startswith("/_sandbox/ui/"):
        origin = request.headers.get("Origin")
        if request.content_type != "application/json" or (
            origin is not None and origin != f"{request.scheme}://{request.host}"
        ):
            return web.json_response(
                {"ok": False, "error": "only the sandbox page may act here (JSON, same origin)"},
                status=403,
            )
    return await handler(request)


def add_page_routes(app: web.Application) -> None:
    """Add the page, its static files, the event stream and the ``/_sandbox/ui`` routes."""
    app.middlewares.append(_same_page_only)
    app[_STREAMS_KEY] = _Streams()
    app.on_shutdown.append(_end_streams)
    app.router.add_get("/", _index)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    app.router.add_get("/_sandbox/events", _events)
    app.router.add_get("/_sandbox/ui/config", _config)
    app.router.add_post("/_sandbox/ui/click", _click)
    app.router.add_post("/_sandbox/ui/submit", _submit)
    app.router.add_post("/_sandbox/ui/close", _close)
    app.router.add_post("/_sandbox/ui/slash", _slash)
    app.router.add_post("/_sandbox/ui/home/open", _home_open)
    app.router.add_post("/_sandbox/ui/home/click", _home_click)
    add_runs_routes(app)
