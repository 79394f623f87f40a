"""Everything one running local Slack sandbox shares between its HTTP routes and its
interaction driver: the workspace, settings, faults, rate limiting, triggers, change events,
the call log, and the HTTP client it uses to reach the app. Not Slack: a local stand-in.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from slack_sandbox.events import ChangeEvent, ChangeHub
from slack_sandbox.faults import ChannelRateLimiter, FaultQueue, MethodRateLimiter
from slack_sandbox.triggers import TriggerRegistry
from slack_sandbox.workspace import ResponseHook, Workspace

RESPONSE_URL_MAX_USES = 5
RESPONSE_URL_TTL_SECONDS = 30 * 60


BOT_SCOPES = ("chat:write", "commands", "usergroups:read", "channels:read", "groups:read")


@dataclass
class SandboxConfig:
    token: str
    events_url: str | None
    signing_secret: str | None
    verification_token: str = "sandbox-verification-token"
    # The bot token's scopes, sent as Slack sends them (X-OAuth-Scopes): the manifest's.
    scopes: tuple[str, ...] = BOT_SCOPES
    app_timeout: float = 3.0  # Slack waits three seconds for the app's acknowledgement
    permalink_base: str | None = None
    # the bot's HTTP API, for the sandbox page's "Runs" panel (None: the panel is disabled)
    api_url: str | None = None
    api_token: str | None = None


class SandboxCore:
    def __init__(
        self,
        workspace: Workspace,
        config: SandboxConfig,
        *,
        rate_limit_per_channel: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.clock = clock
        self.faults = FaultQueue()
        self.limiter = ChannelRateLimiter(rate_limit_per_channel)
        self.method_limiter = MethodRateLimiter()
        self.triggers = TriggerRegistry(clock)
        self.hub = ChangeHub()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.events_sent: dict[str, bytes] = {}  # Events API deliveries by id, for retries
        self.base_url: str | None = None  # "http://127.0.0.1:port", known once serving
        self._session: aiohttp.ClientSession | None = None

    # ----------------------------------------------------------------- state changes

    def commit(self, *events: ChangeEvent) -> None:
        """Persist the workspace, then tell subscribers what changed."""
        self.workspace.save()
        for event in events:
            self.hub.publish(event)

    def permalink_base(self) -> str:
        return self.config.permalink_base or f"https://{self.workspace.team.domain}.slack.com"

    # ----------------------------------------------------------------- response_url hooks

    def new_response_url(
        self, channel: str, user: str, message_ts: str | None, *, is_ephemeral: bool
    ) -> str:
        token = secrets.token_urlsafe(18)
        now = self.clock()
        self.workspace.response_hooks = [
            h
            for h in self.workspace.response_hooks
            if now - h.created_at < RESPONSE_URL_TTL_SECONDS
        ]
        self.workspace.response_hooks.append(
            ResponseHook(token, channel, user, message_ts, is_ephemeral, now)
        )
        return f"{self.require_base_url()}/_sandbox/response/{token}"

    def use_response_hook(self, token: str) -> ResponseHook | str:
        """The hook behind a response_url, or the error string when it cannot be used."""
        hook = self.workspace.hook(token)
        if hook is None or self.clock() - hook.created_at >= RESPONSE_URL_TTL_SECONDS:
            return "expired_url"
        if hook.uses >= RESPONSE_URL_MAX_USES:
            return "used_url"
        hook.uses += 1
        return hook

    def require_base_url(self) -> str:
        if self.base_url is None:
            raise RuntimeError("the Slack stand-in is not serving yet; start it first")
        return self.base_url

    # ----------------------------------------------------------------- HTTP client to the app

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


CORE_KEY: web.AppKey[SandboxCore] = web.AppKey("countersign_sandbox_core", SandboxCore)
