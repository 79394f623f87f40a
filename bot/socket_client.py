"""Socket Mode: the same Bolt app, reached over a websocket the bot opens to Slack.

For workspaces that cannot expose a request URL. With ``SLACK_APP_TOKEN`` (an app-level
token, ``xapp-…``, scope ``connections:write``) set, ``countersign serve`` calls
``apps.connections.open`` at ``SLACK_API_URL`` and connects to the URL it answers; Slack then
sends clicks, modal submissions and slash commands as envelopes on that socket, Bolt's
Socket Mode adapter hands each to the very listeners ``POST /slack/events`` would, and
acknowledges it with the listener's response. As at ``POST /slack/events``, a payload not
shaped as Slack sends it is refused before Bolt routes it (logged, not acknowledged: Slack
tells the person their action failed), and while a request is handled the outbox and the
workers wait their turn (`Foreground`). The HTTP server still serves the API, health and
metrics.

Start-up fails fast with a :class:`~agent_host.errors.ConfigurationError` when the token is
refused or no connection is greeted in time (the SDK's own connect loop would retry a
refused token forever).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.durable.foreground import Foreground
from agent_host.errors import ConfigurationError
from bot.parsing import well_formed
from bot.stop_within import REQUESTS_END_WITHIN, end_within

__all__ = ["SocketMode", "socket_mode_url", "start_socket_mode"]

log = logging.getLogger(__name__)

_HINTS = {
    "invalid_auth": "the token is not a valid app-level token for this app",
    "not_authed": "no token was sent",
    "not_allowed_token_type": "that is not an app-level token (xoxb-/xoxp- tokens are refused)",
    "missing_scope": "the app-level token needs the connections:write scope",
}


class SocketMode:
    """A connected Socket Mode session; :meth:`stop` disconnects and frees its resources."""

    def __init__(self, handler: _Handler) -> None:
        self.handler = handler

    async def stop(self, within: float = REQUESTS_END_WITHIN) -> None:
        """Take no more requests, let those being handled end and send their acks over the
        socket (for up to `within` seconds: then they are cancelled), then disconnect. As
        an HTTP server's stop does; until then a click decided here would not be answered,
        and its listener would go on against a closed Redis."""
        try:
            await self.handler.finish(within)
        finally:
            await _close(self.handler)


async def _close(handler: AsyncSocketModeHandler) -> None:
    await handler.close_async()  # type: ignore[no-untyped-call]


async def socket_mode_url(client: AsyncWebClient, app_token: str, api_url: str) -> str:
    """Where Socket Mode connects (`apps.connections.open` with SLACK_APP_TOKEN), or
    ConfigurationError saying what to fix: what `serve` starts with, and `check` checks."""
    try:
        response = await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "unknown_error")
        hint = _HINTS.get(error, "see the app's Socket Mode settings")
        if not app_token.startswith("xapp-"):
            hint += "; app-level tokens start with xapp-"
        raise ConfigurationError(
            f"SLACK_APP_TOKEN was refused: apps.connections.open answered {error!r} ({hint}). "
            "Create an app-level token with connections:write under Basic Information, "
            "or unset SLACK_APP_TOKEN to receive Slack's requests at POST /slack/events"
        ) from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ConfigurationError(
            f"Socket Mode: could not call apps.connections.open at {api_url} "
            f"(SLACK_API_URL): {type(exc).__name__}: {exc}"
        ) from exc
    url = response.get("url")
    if not isinstance(url, str) or not url:
        raise ConfigurationError("Socket Mode: apps.connections.open answered no url")
    return url


class _Handler(AsyncSocketModeHandler):
    """Bolt's handler, with what the HTTP endpoint does around each request."""

    def __init__(self, bolt: AsyncApp, foreground: Foreground, **options: Any) -> None:
        super().__init__(bolt, **options)
        self.foreground = foreground
        # slack_sdk starts each request's handling as a task it does not keep: kept here
        self._handling: set[asyncio.Task[Any]] = set()
        self._stopping = False

    async def handle(  # type: ignore[override]  # narrowed as Bolt's own handler does
        self, client: SocketModeClient, req: SocketModeRequest
    ) -> None:
        if self._stopping:
            log.warning(
                "a Socket Mode %s request arrived while stopping: not taken (not "
                "acknowledged; Slack tells the person it failed, and they try again)",
                req.type,
            )
            return
        if not well_formed(req.payload):
            log.warning("refused a malformed Socket Mode %s payload (not acknowledged)", req.type)
            return
        task = asyncio.current_task()
        if task is not None:  # (always, inside a coroutine)
            self._handling.add(task)
        try:
            with self.foreground.serving():  # the outbox and the workers wait meanwhile
                await super().handle(client, req)
        finally:
            self._handling.discard(task)

    async def finish(self, within: float) -> None:
        """Take no more requests; wait up to `within` seconds for those being handled, and
        cancel what is left (saying so)."""
        self._stopping = True
        if cancelled := await end_within(lambda: self._handling, within):
            log.warning(
                "%d Socket Mode request(s) still being handled when the stop's wait for them "
                "ran out; cancelled, not acknowledged (Slack tells the person it failed; a "
                "decision it recorded stands, and a click again says it is decided)",
                cancelled,
            )


async def start_socket_mode(
    bolt: AsyncApp,
    *,
    app_token: str,
    api_url: str,
    foreground: Foreground | None = None,
    connect_within: float = 10.0,
) -> SocketMode:
    """Connect ``bolt`` over Socket Mode; returns once Slack has said hello on the socket."""
    client = AsyncWebClient(base_url=api_url, timeout=10)
    url = await socket_mode_url(client, app_token, api_url)
    handler = _Handler(
        bolt, foreground or Foreground(), app_token=app_token, logger=log, web_client=client
    )
    greeted = asyncio.Event()

    async def on_message(_client: Any, message: dict[str, Any], _raw: str | None) -> None:
        if message.get("type") == "hello":
            greeted.set()

    handler.client.message_listeners.append(on_message)
    handler.client.wss_uri = url  # the URL just issued: the SDK connects to it as is
    try:
        async with asyncio.timeout(connect_within):
            await handler.connect_async()  # type: ignore[no-untyped-call]
            await greeted.wait()
    except TimeoutError as exc:
        await _close(handler)
        raise ConfigurationError(
            f"Socket Mode: no connection to {url.split('?')[0]} was established within "
            f"{connect_within:g}s (is the websocket URL reachable from here?)"
        ) from exc
    except BaseException:
        await _close(handler)
        raise
    log.info("connected to Slack over Socket Mode (%s)", url.split("?")[0])
    return SocketMode(handler)
