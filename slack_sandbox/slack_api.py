"""A local sandbox standing in for Slack's Web API (NOT Slack; nothing here reaches Slack).

:func:`create_slack_api` builds the aiohttp application; :class:`SlackStandIn` serves it on
loopback and drives interactions. Routes:

* ``GET|POST /api/{method}``: the Web API, form-encoded, JSON or query-string arguments,
  ``Authorization: Bearer <token>``; errors answer HTTP 200 ``{"ok": false, "error": ...}``
  except rate limiting (HTTP 429 + ``Retry-After``) and injected faults.
* ``POST /_sandbox/response/{token}``: the ``response_url``\\ s handed to the app.
* ``POST /api/apps.connections.open``, ``GET /_sandbox/socket`` (a websocket) and
  ``POST /_sandbox/socket/relay``: Socket Mode (see :mod:`slack_sandbox.socket_mode`).
* ``GET|POST|DELETE /_sandbox/faults``: list, inject (JSON: method, status, retry_after,
  delay, times) or clear injected faults, for out-of-process tests.
* ``GET /_sandbox/state``: the whole workspace as JSON.
* ``GET /``, ``/static/...``, ``/_sandbox/events`` and ``/_sandbox/ui/...``: the sandbox's
  web page and what it calls (see :mod:`slack_sandbox.page`).
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from slack_sandbox import interactions
from slack_sandbox.app_client import AppReply
from slack_sandbox.core import CORE_KEY, SandboxConfig, SandboxCore
from slack_sandbox.events import ChangeEvent
from slack_sandbox.faults import Fault
from slack_sandbox.methods import METHODS, NO_AUTH_METHODS, needed_scope
from slack_sandbox.page import add_page_routes
from slack_sandbox.params import ParamsError, as_str, read_params
from slack_sandbox.persistence import workspace_to_dict
from slack_sandbox.responses import apply_response_url
from slack_sandbox.shapes import api_error
from slack_sandbox.socket_mode import SOCKET_KEY, SocketHub, add_socket_mode_routes
from slack_sandbox.workspace import Workspace

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
_FAULT_ERRORS = {429: "ratelimited", 500: "internal_error", 503: "service_unavailable"}


def _answer(
    data: JsonDict, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    all_headers = {"X-Slack-Req-Id": secrets.token_hex(16), **(headers or {})}
    return web.json_response(data, status=status, headers=all_headers)


async def _fault_answer(fault: Fault) -> web.Response:
    if fault.delay:
        await asyncio.sleep(fault.delay)
    error = _FAULT_ERRORS.get(fault.status, "fatal_error")
    headers = {"Retry-After": str(fault.retry_after)} if fault.status == 429 else None
    logger.info("sandbox fault: %s answers HTTP %d", fault.method, fault.status)
    return _answer(api_error(error), fault.status, headers)


async def _web_api(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    if core.base_url is None:  # served by someone else's runner: learn our own address
        core.base_url = str(request.url.origin())
    method = request.match_info["method"]
    try:
        params, token = await read_params(request)
    except ParamsError as exc:
        core.calls.append((method, {}))
        return _answer(api_error(exc.code))
    core.calls.append((method, copy.deepcopy(params)))
    fault = core.faults.take(method)
    if fault is not None and fault.status == 200:
        await asyncio.sleep(fault.delay)  # slow, then answered as usual
    elif fault is not None:
        return await _fault_answer(fault)
    handler = METHODS.get(method)
    if handler is None:
        return _answer({"ok": False, "error": "unknown_method", "req_method": method})
    if method not in NO_AUTH_METHODS:
        if not token:
            return _answer(api_error("not_authed"))
        if not hmac.compare_digest(token.encode(), core.config.token.encode()):
            return _answer(api_error("invalid_auth"))
    scopes = {"X-OAuth-Scopes": ",".join(core.config.scopes)}
    if (needed := needed_scope(core, method, params)) is not None:
        provided = scopes["X-OAuth-Scopes"]
        refusal = api_error("missing_scope") | {"needed": needed, "provided": provided}
        return _answer(refusal, headers=scopes)
    now = core.clock()
    if (wait := core.method_limiter.retry_after(method, now)) is not None:
        logger.info("sandbox rate limit: %s refused for %ds", method, wait)
        return _answer(api_error("ratelimited"), 429, {"Retry-After": str(wait)})
    core.method_limiter.record(method, now)
    if method == "chat.postMessage":
        channel = core.workspace.resolve_channel(as_str(params.get("channel")))
        wait = core.limiter.retry_after(channel.id, now) if channel is not None else None
        if channel is not None and wait is not None:
            logger.info("sandbox rate limit: post to %s refused for %ds", channel.id, wait)
            return _answer(api_error("ratelimited"), 429, {"Retry-After": str(wait)})
    result = handler(core, params)
    if method == "chat.postMessage" and result.get("ok"):
        core.limiter.record(str(result["channel"]), now)
    return _answer(result, headers=scopes)


async def _response_url(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    try:
        data = await request.json()
    except ValueError:
        return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
    core.calls.append(("response_url", copy.deepcopy(data) if isinstance(data, dict) else {}))
    hook = core.use_response_hook(request.match_info["token"])
    if isinstance(hook, str):
        return web.json_response({"ok": False, "error": hook}, status=404)
    status, answer = apply_response_url(core, hook, data)
    core.commit()
    return web.json_response(answer, status=status)


async def _faults(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    if request.method == "POST":
        spec = await request.json()
        try:
            core.faults.inject(
                str(spec["method"]),
                status=int(spec.get("status", 500)),
                retry_after=int(spec.get("retry_after", 1)),
                delay=float(spec.get("delay", 0.0)),
                times=int(spec.get("times", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=400)
    elif request.method == "DELETE":
        core.faults.clear()
    return web.json_response({"ok": True, "faults": core.faults.pending()})


async def _state(request: web.Request) -> web.Response:
    return web.json_response(workspace_to_dict(request.app[CORE_KEY].workspace))


def create_slack_api(
    workspace: Workspace,
    *,
    token: str,
    events_url: str | None,
    signing_secret: str | None,
    rate_limit_per_channel: float | None = None,
    app_timeout: float = 3.0,
    clock: Callable[[], float] = time.time,
    api_url: str | None = None,
    api_token: str | None = None,
    app_token: str | None = None,
) -> web.Application:
    """The local Slack stand-in as an aiohttp application (see the module docstring).

    ``api_url``/``api_token`` name the bot's HTTP API (``http://host:port``, no path) for the
    page's "Runs" panel; without them the runs endpoints answer 503. ``app_token`` is the
    app-level token (``xapp-…``) ``apps.connections.open`` accepts, for Socket Mode.
    """
    config = SandboxConfig(
        token,
        events_url,
        signing_secret,
        app_timeout=app_timeout,
        api_url=api_url,
        api_token=api_token,
    )
    core = SandboxCore(
        workspace, config, rate_limit_per_channel=rate_limit_per_channel, clock=clock
    )
    app = web.Application()
    app[CORE_KEY] = core

    async def close_client(_: web.Application) -> None:
        await core.close()

    app.on_cleanup.append(close_client)
    add_socket_mode_routes(app, app_token=app_token)  # before /api/{method}: more specific
    app.router.add_route("*", "/api/{method}", _web_api)
    app.router.add_post("/_sandbox/response/{token}", _response_url)
    app.router.add_route("*", "/_sandbox/faults", _faults)
    app.router.add_get("/_sandbox/state", _state)
    add_page_routes(app)
    return app


class SlackStandIn:
    """Serves the local Slack stand-in on loopback and plays the Slack side of interactions.

    Point the bot at :attr:`url` (``AsyncWebClient(base_url=standin.url)``) and set
    :attr:`events_url` to the bot's request URL before clicking/submitting/running commands.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        token: str,
        events_url: str | None = None,
        signing_secret: str | None = None,
        rate_limit_per_channel: float | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        app_timeout: float = 3.0,
        clock: Callable[[], float] = time.time,
        api_url: str | None = None,
        api_token: str | None = None,
        app_token: str | None = None,
    ) -> None:
        self.app = create_slack_api(
            workspace,
            token=token,
            events_url=events_url,
            signing_secret=signing_secret,
            rate_limit_per_channel=rate_limit_per_channel,
            app_timeout=app_timeout,
            clock=clock,
            api_url=api_url,
            api_token=api_token,
            app_token=app_token,
        )
        self.core = self.app[CORE_KEY]
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> str:
        """Start serving; returns :attr:`url`."""
        if self._runner is not None:
            return self.url
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, self._host, self._port).start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.core.base_url = f"http://{host}:{port}"
        logger.info("Slack stand-in (local sandbox, not Slack) serving at %s", self.url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.workspace.save()

    async def __aenter__(self) -> SlackStandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` while serving."""
        return self.core.require_base_url()

    @property
    def url(self) -> str:
        """The Web API base URL for ``SLACK_API_URL``; ends in ``/api/``."""
        return f"{self.base_url}/api/"

    # ----------------------------------------------------------------- state for tests

    @property
    def workspace(self) -> Workspace:
        return self.core.workspace

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every Web API call as ``(method, params)``, plus ``("response_url", body)`` posts."""
        return self.core.calls

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.core.calls if name == method]

    @property
    def post_times(self) -> dict[str, list[float]]:
        """Clock time of each accepted ``chat.postMessage``, per channel id."""
        return self.core.limiter.post_times

    def max_posts_per_second(self, channel: str | None = None) -> int:
        return self.core.limiter.max_posts_per_second(channel)

    @property
    def events_url(self) -> str | None:
        return self.core.config.events_url

    @events_url.setter
    def events_url(self, value: str | None) -> None:
        self.core.config.events_url = value

    @property
    def api_url(self) -> str | None:
        """The bot's HTTP API base URL (``http://host:port``) for the page's "Runs" panel."""
        return self.core.config.api_url

    @api_url.setter
    def api_url(self, value: str | None) -> None:
        self.core.config.api_url = value

    @property
    def api_token(self) -> str | None:
        return self.core.config.api_token

    @api_token.setter
    def api_token(self, value: str | None) -> None:
        self.core.config.api_token = value

    @property
    def page_url(self) -> str:
        """The sandbox's web page (``http://127.0.0.1:<port>/``) while serving."""
        return f"{self.base_url}/"

    def inject(
        self,
        method: str,
        *,
        status: int = 500,
        retry_after: int = 1,
        delay: float = 0.0,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail with HTTP ``status`` (after
        sleeping ``delay`` seconds) without being applied."""
        self.core.faults.inject(
            method, status=status, retry_after=retry_after, delay=delay, times=times
        )

    def grant(self, *scopes: str) -> None:
        """The bot token's scopes from now on (as reinstalling the app with them would)."""
        self.core.config.scopes = scopes

    def limit(self, method: str, per_minute: int) -> None:
        """Answer calls of ``method`` past ``per_minute`` within any minute as Slack does
        past a method's rate-limit tier: HTTP 429, ``ratelimited``, ``Retry-After``."""
        self.core.method_limiter.per_minute[method] = per_minute

    def subscribe(self) -> asyncio.Queue[ChangeEvent]:
        return self.core.hub.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[ChangeEvent]) -> None:
        self.core.hub.unsubscribe(queue)

    @property
    def socket_mode(self) -> SocketHub:
        """Socket Mode: connections, envelopes sent and acks received (for tests)."""
        return self.app[SOCKET_KEY]

    def issue_trigger(self, user_id: str) -> str:
        """A fresh trigger_id for ``user_id``, as an interaction would carry."""
        return self.core.triggers.issue(user_id)

    # ----------------------------------------------------------------- interactions

    async def click(self, user_id: str, channel: str, ts: str, action_id: str) -> AppReply:
        return await interactions.click(self.core, user_id, channel, ts, action_id)

    async def submit_view(
        self, user_id: str, view_id: str, values: dict[str, dict[str, Any]]
    ) -> AppReply:
        return await interactions.submit_view(self.core, user_id, view_id, values)

    async def slash(self, user_id: str, channel_id: str, command: str, text: str) -> AppReply:
        return await interactions.slash(self.core, user_id, channel_id, command, text)

    async def open_home(
        self, user_id: str, *, event_id: str | None = None, retry: int = 0
    ) -> AppReply:
        return await interactions.open_home(self.core, user_id, event_id=event_id, retry=retry)

    async def click_home(
        self, user_id: str, action_id: str, block_id: str | None = None
    ) -> AppReply:
        return await interactions.click_home(self.core, user_id, action_id, block_id)

    def home_view(self, user_id: str) -> dict[str, Any] | None:
        """The App Home tab the app last published for ``user_id`` (``views.publish``)."""
        home = self.workspace.home(user_id)
        return copy.deepcopy(home.view) if home is not None else None
