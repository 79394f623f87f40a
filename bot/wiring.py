"""Assembles the agent host with its Slack face: client, notifier, routes, Bolt app, endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.connections import open_redis
from agent_host.errors import ConfigurationError
from agent_host.host import Host, load_keyring, load_registry
from agent_host.settings import Settings

from .app import BackgroundTasks, build_bolt_app
from .commands import SlashCommands
from .notifier import SlackNotifier
from .reviewers import ReviewerRules
from .routing import RouteBook, load_routes_file

__all__ = ["SlackBot", "build", "mount_slack"]

BOT_KEY = web.AppKey("countersign_bot", object)


@dataclass
class SlackBot:
    client: Any
    routes: RouteBook
    bolt: AsyncApp
    tasks: BackgroundTasks
    session: aiohttp.ClientSession

    async def close(self) -> None:
        """Finish the work started after acks, then close the Web API connections."""
        await self.tasks.drain()
        await self.session.close()


async def build(settings: Settings) -> tuple[Host, SlackBot]:
    """The host and its Slack bot; SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET are required."""
    missing = [
        name
        for name, value in (
            ("SLACK_BOT_TOKEN", settings.slack_bot_token),
            ("SLACK_SIGNING_SECRET", settings.slack_signing_secret),
        )
        if not value
    ]
    if missing:
        raise ConfigurationError(
            f"{' and '.join(missing)} must be set (see manifest.yml and the README's Slack setup)"
        )
    registry = load_registry(settings.agents)
    keyring = load_keyring(settings)
    redis, embedded = await open_redis(settings)
    # One session for every Web API call: keep-alive connections (and one TLS handshake)
    # instead of a new connection per post, update and ephemeral.
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    client = AsyncWebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        timeout=10,
        session=session,
    )
    routes = RouteBook(redis, settings.default_channel)
    if settings.routes_file is not None:
        await routes.seed(load_routes_file(settings.routes_file))
    host = Host(
        settings=settings,
        redis=redis,
        registry=registry,
        keyring=keyring,
        router=routes,
        notifier=SlackNotifier(client, settings.default_channel),
        embedded=embedded,
    )
    tasks = BackgroundTasks()
    bolt = build_bolt_app(
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        store=host.store,
        reviewers=ReviewerRules(client),
        commands=SlashCommands(host.store, routes, settings.admin_ids),
        tasks=tasks,
    )
    return host, SlackBot(client, routes, bolt, tasks, session)


def mount_slack(app: web.Application, bot: SlackBot) -> None:
    """POST /slack/events: every Slack request, signature-verified by Bolt."""

    async def slack_events(request: web.Request) -> web.Response:
        bolt_request = await to_bolt_request(request)
        return await to_aiohttp_response(await bot.bolt.async_dispatch(bolt_request))

    app.router.add_post("/slack/events", slack_events)
