"""Socket Mode for the local Slack sandbox (a stand-in, NOT Slack; nothing here reaches Slack).

An app that cannot expose a request URL opens a websocket instead. As Slack documents it:

* ``POST /api/apps.connections.open`` with the app-level token (``xapp-…``) as
  ``Authorization: Bearer`` answers ``{"ok": true, "url": "ws://…/_sandbox/socket?ticket=…"}``;
  a missing token is ``not_authed``, the bot token ``not_allowed_token_type``, any other
  token (or none configured: the stand-in was built without ``app_token``) ``invalid_auth``.
  Each URL's ticket connects once, within :data:`TICKET_TTL_SECONDS`.
* ``GET /_sandbox/socket?ticket=…``: the websocket. The sandbox greets with
  ``{"type": "hello", ...}``; interactions then arrive as envelopes
  ``{"envelope_id", "type": "interactive" | "slash_commands", "payload",
  "accepts_response_payload": true}`` and the app acknowledges each with
  ``{"envelope_id", "payload"?}`` within the app timeout (three seconds).

While at least one socket client is connected, every interaction the sandbox plays (the
:class:`~slack_sandbox.slack_api.SlackStandIn` methods and the page's buttons alike) goes over
the socket: :mod:`slack_sandbox.interactions` still builds and signs the very same request
body, but it is addressed to ``POST /_sandbox/socket/relay``, which unwraps it into an
envelope (``payload=<json>`` bodies become ``interactive`` with that JSON object, slash
command form fields ``slash_commands`` with the fields as an object), sends it on the newest
connection, waits for the acknowledgement and answers with its ``payload`` as the response
body, so slash command replies and ``response_action``\\ s are applied exactly as over HTTP.
With no client connected nothing changes: interactions are POSTed to ``events_url``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSCloseCode, WSMsgType, web

from slack_sandbox.core import CORE_KEY, SandboxCore
from slack_sandbox.shapes import api_error
from slack_sandbox.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, compute_signature

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]

METHOD = "apps.connections.open"
SOCKET_PATH = "/_sandbox/socket"
RELAY_PATH = "/_sandbox/socket/relay"
TICKET_TTL_SECONDS = 60.0
_FAULT_ERRORS = {429: "ratelimited", 500: "internal_error", 503: "service_unavailable"}


@dataclass
class _Delivery:
    socket: web.WebSocketResponse
    answer: asyncio.Future[JsonDict | None]


@dataclass
class SocketHub:
    """The sandbox's Socket Mode side: the app-level token, tickets, open connections, and
    the envelopes sent and acknowledged (for tests)."""

    core: SandboxCore
    app_token: str | None
    tickets: dict[str, float] = field(default_factory=dict)
    connections: list[web.WebSocketResponse] = field(default_factory=list)
    envelopes: list[JsonDict] = field(default_factory=list)
    acks: list[JsonDict] = field(default_factory=list)
    _pending: dict[str, _Delivery] = field(default_factory=dict, init=False)
    _relay_secret: str = field(default_factory=lambda: secrets.token_hex(16), init=False)
    _saved: tuple[str | None, str | None] | None = field(default=None, init=False)

    @property
    def connected(self) -> bool:
        """Whether a socket client is connected (interactions then go over the socket)."""
        return any(not ws.closed for ws in self.connections)

    # ----------------------------------------------------------------- tickets

    def issue_ticket(self) -> str:
        now = self.core.clock()
        self.tickets = {t: exp for t, exp in self.tickets.items() if exp > now}
        ticket = secrets.token_urlsafe(18)
        self.tickets[ticket] = now + TICKET_TTL_SECONDS
        return ticket

    def use_ticket(self, ticket: str) -> bool:
        expires = self.tickets.pop(ticket, None)
        return expires is not None and expires > self.core.clock()

    # ----------------------------------------------------------------- connections

    def attach(self, ws: web.WebSocketResponse) -> None:
        if not self.connections:
            # Interactions now go to the relay (see the module docstring); remember the
            # request URL and secret to give back when the last client leaves.
            config = self.core.config
            self._saved = (config.events_url, config.signing_secret)
            config.events_url = f"{self.core.require_base_url()}{RELAY_PATH}"
            if not config.signing_secret:
                config.signing_secret = self._relay_secret
        self.connections.append(ws)

    def detach(self, ws: web.WebSocketResponse) -> None:
        if ws in self.connections:
            self.connections.remove(ws)
        for envelope_id, delivery in list(self._pending.items()):
            if delivery.socket is ws and not delivery.answer.done():
                delivery.answer.set_exception(ConnectionError("the socket closed before the ack"))
                del self._pending[envelope_id]
        if not self.connections and self._saved is not None:
            config = self.core.config
            events_url, signing_secret = self._saved
            self._saved = None
            if config.events_url == f"{self.core.require_base_url()}{RELAY_PATH}":
                config.events_url = events_url  # unless someone set a new one meanwhile
            if config.signing_secret == self._relay_secret:
                config.signing_secret = signing_secret

    def _newest(self) -> web.WebSocketResponse | None:
        open_ = [ws for ws in self.connections if not ws.closed]
        return open_[-1] if open_ else None

    async def deliver(self, kind: str, payload: JsonDict, within: float) -> JsonDict | None:
        """Send ``payload`` as an envelope of type ``kind``; the ack's payload (None: a bare
        ack). Raises ConnectionError without a connection, TimeoutError without an ack."""
        ws = self._newest()
        if ws is None:
            raise ConnectionError("no Socket Mode client is connected")
        envelope_id = str(uuid.uuid4())
        envelope: JsonDict = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": True,
        }
        answer: asyncio.Future[JsonDict | None] = asyncio.get_running_loop().create_future()
        self._pending[envelope_id] = _Delivery(ws, answer)
        try:
            self.envelopes.append(envelope)
            await ws.send_json(envelope)
            async with asyncio.timeout(within):
                return await answer
        finally:
            self._pending.pop(envelope_id, None)

    def acknowledge(self, raw: str) -> None:
        try:
            ack = json.loads(raw)
        except ValueError:
            logger.warning("sandbox socket: a message that is not JSON: %.200s", raw)
            return
        if not isinstance(ack, dict) or not isinstance(ack.get("envelope_id"), str):
            logger.warning("sandbox socket: a message without an envelope_id: %.200s", raw)
            return
        self.acks.append(ack)
        delivery = self._pending.get(ack["envelope_id"])
        if delivery is None or delivery.answer.done():
            logger.info("sandbox socket: ack for unknown or late envelope %s", ack["envelope_id"])
            return
        payload = ack.get("payload")
        delivery.answer.set_result(payload if isinstance(payload, dict) and payload else None)

    async def close_all(self) -> None:
        for ws in list(self.connections):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"sandbox shutting down")


SOCKET_KEY: web.AppKey[SocketHub] = web.AppKey("countersign_sandbox_socket_mode", SocketHub)


def _core(request: web.Request) -> SandboxCore:
    core = request.app[CORE_KEY]
    if core.base_url is None:  # served by someone else's runner: learn our own address
        core.base_url = str(request.url.origin())
    return core


def _answer(
    data: JsonDict, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    all_headers = {"X-Slack-Req-Id": secrets.token_hex(16), **(headers or {})}
    return web.json_response(data, status=status, headers=all_headers)


async def _connections_open(request: web.Request) -> web.Response:
    core = _core(request)
    hub = request.app[SOCKET_KEY]
    core.calls.append((METHOD, {}))
    fault = core.faults.take(METHOD)
    if fault is not None:
        if fault.delay:
            await asyncio.sleep(fault.delay)
        headers = {"Retry-After": str(fault.retry_after)} if fault.status == 429 else None
        error = _FAULT_ERRORS.get(fault.status, "fatal_error")
        return _answer(api_error(error), fault.status, headers)
    # Slack takes this method's token from the Authorization header only.
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else ""
    if not token:
        return _answer(api_error("not_authed"))
    if hmac.compare_digest(token.encode(), core.config.token.encode()):
        return _answer(api_error("not_allowed_token_type"))
    if hub.app_token is None or not hmac.compare_digest(token.encode(), hub.app_token.encode()):
        return _answer(api_error("invalid_auth"))
    ws_base = "ws" + core.require_base_url().removeprefix("http")
    app_id = core.workspace.bot.app_id
    url = f"{ws_base}{SOCKET_PATH}?ticket={hub.issue_ticket()}&app_id={app_id}"
    return _answer({"ok": True, "url": url})


async def _socket(request: web.Request) -> web.StreamResponse:
    core = _core(request)
    hub = request.app[SOCKET_KEY]
    if not hub.use_ticket(request.query.get("ticket", "")):
        return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    hub.attach(ws)
    logger.info("sandbox: a Socket Mode client connected (%d open)", len(hub.connections))
    try:
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(hub.connections),
                "debug_info": {
                    "host": "countersign-sandbox",
                    "approximate_connection_time": 3600,
                },
                "connection_info": {"app_id": core.workspace.bot.app_id},
            }
        )
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                hub.acknowledge(str(message.data))
    finally:
        hub.detach(ws)
        logger.info("sandbox: a Socket Mode client left (%d open)", len(hub.connections))
    return ws


def _envelope_of(body: bytes, content_type: str) -> tuple[str, JsonDict] | None:
    """The envelope type and payload for one of the sandbox's interaction request bodies."""
    if content_type != "application/x-www-form-urlencoded":
        return None
    fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    if "command" in fields:
        return "slash_commands", fields
    if set(fields) == {"payload"}:
        try:
            payload = json.loads(fields["payload"])
        except ValueError:
            return None
        return ("interactive", payload) if isinstance(payload, dict) else None
    return None


async def _relay(request: web.Request) -> web.Response:
    core = _core(request)
    hub = request.app[SOCKET_KEY]
    body = await request.read()
    secret = core.config.signing_secret or ""
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    expected = compute_signature(secret, timestamp, body)
    if not secret or not hmac.compare_digest(
        request.headers.get(SIGNATURE_HEADER, "").encode(), expected.encode()
    ):
        return web.Response(status=401, text="only the sandbox itself posts here")
    shaped = _envelope_of(body, request.content_type)
    if shaped is None:
        return web.Response(status=400, text="not an interaction body the sandbox sends")
    kind, payload = shaped
    try:
        answer = await hub.deliver(kind, payload, core.config.app_timeout)
    except ConnectionError as exc:
        return web.Response(status=502, text=f"Socket Mode: {exc}")
    except TimeoutError:
        return web.Response(status=504, text="Socket Mode: the app did not acknowledge in time")
    if answer is None:
        return web.Response(status=200)
    return web.json_response(answer)


def add_socket_mode_routes(app: web.Application, *, app_token: str | None) -> None:
    """Register the Socket Mode routes; ``app[CORE_KEY]`` must already be set."""
    hub = SocketHub(app[CORE_KEY], app_token)
    app[SOCKET_KEY] = hub

    async def close_sockets(_: web.Application) -> None:
        await hub.close_all()

    app.on_shutdown.append(close_sockets)
    app.router.add_route("*", f"/api/{METHOD}", _connections_open)
    app.router.add_get(SOCKET_PATH, _socket)
    app.router.add_post(RELAY_PATH, _relay)
