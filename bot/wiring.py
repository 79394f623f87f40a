"""Assembles the agent host with its Slack face: client, notifier, routes, Bolt app, endpoint."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.approvals.routes import load_routes_file
from agent_host.durable.connections import close_redis, open_redis
from agent_host.durable.foreground import Foreground
from agent_host.durable.host import STOP_GRACE_SECONDS, Host, load_keyring, load_registry
from agent_host.durable.reviewer_log import ReviewerLog
from agent_host.durable.route_book import RouteBook
from agent_host.durable.seen_once import SeenOnce
from agent_host.errors import ConfigurationError
from bot.app import BackgroundTasks, build_bolt_app
from bot.delivery import channel_facts
from bot.home import HomeTab
from bot.library_loggers import web_api_logger
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.buttons import is_decision_click
from bot.listeners.taken_once import FIRST_TIME
from bot.member_channels import MemberChannels
from bot.parsing import well_formed
from bot.permalinks import Permalinks
from bot.reviewers import SlackReviewerDirectory
from bot.slack_notifier import SlackNotifier
from bot.slack_request import parse_slack_body, slack_request
from bot.slack_settings import ServiceSettings
from bot.slash_commands import SlashCommands

__all__ = ["SlackBot", "build", "mount_slack", "require_slack", "web_client"]

log = logging.getLogger(__name__)


@dataclass
class SlackBot:
    client: Any
    routes: RouteBook
    bolt: AsyncApp
    tasks: BackgroundTasks
    session: aiohttp.ClientSession
    signing_secret: str
    seen_requests: SeenOnce  # each signed request is taken once: see `mount_slack`
    foreground: Foreground = field(default_factory=Foreground)  # the host's: clicks first

    async def close(self, within: float = STOP_GRACE_SECONDS) -> None:
        """Finish the work started after acks (for up to `within` seconds), then close the
        Web API connections."""
        try:
            await self.tasks.drain(within)
        finally:
            await self.session.close()


async def build(settings: ServiceSettings) -> tuple[Host, SlackBot]:
    """The host and its Slack bot; SLACK_BOT_TOKEN is required, and SLACK_SIGNING_SECRET
    unless SLACK_APP_TOKEN (Socket Mode) is set."""
    require_slack(settings)
    registry = load_registry(settings)
    keyring = load_keyring(settings)
    routes_file = load_routes_file(settings.routes_file) if settings.routes_file else None
    redis, embedded = await open_redis(settings)  # after every check that can refuse a start
    routes = RouteBook(redis, settings.default_channel)
    if routes_file is not None:
        try:
            await routes.seed(routes_file)
        except BaseException:  # (Redis not reached: nothing is left open behind the error)
            await close_redis(redis, embedded)
            raise
    session, client = web_client(settings)
    # One directory for clicks, `/approvals` and escalations, sharing the user-group cache.
    directory = SlackReviewerDirectory(client)
    notifier = SlackNotifier(
        client,
        settings.default_channel,
        admins=settings.admin_ids,
        group_members=directory.group_members,
    )
    host = Host(
        settings=settings,
        redis=redis,
        registry=registry,
        keyring=keyring,
        router=routes,
        notifier=notifier,
        embedded=embedded,
        directory=directory,
    )
    tasks = BackgroundTasks()
    permalinks = Permalinks(client)
    home = HomeTab(
        client,
        host.store,
        directory,
        channels=MemberChannels(client, group_members=directory.group_listing),
        permalinks=permalinks,
        decisions=ReviewerLog(redis),
        tasks=tasks,
    )
    notifier.after_decision = home.after_decision
    bolt = build_bolt_app(
        client=client,
        notifier=notifier,
        signing_secret=settings.slack_signing_secret or "",
        approvals=host.approvals,
        commands=SlashCommands(
            host.store,
            routes,
            settings.admin_ids,
            directory,
            functools.partial(channel_facts, client),
            permalinks,
            agents=frozenset(registry.names()),
        ),
        tasks=tasks,
        home=home,
        seen_events=SeenOnce(redis, "slack-event"),
        bulks=host.bulks,
    )
    secret = settings.slack_signing_secret or ""
    seen = SeenOnce(redis, "slack-request", keep_seconds=REPLAYABLE_SECONDS)
    return host, SlackBot(client, routes, bolt, tasks, session, secret, seen, host.foreground)


def require_slack(settings: ServiceSettings) -> None:
    """The bot token always; the signing secret unless Socket Mode carries Slack's requests
    (then nothing arrives over HTTP to verify)."""
    needed = [("SLACK_BOT_TOKEN", settings.slack_bot_token)]
    if not settings.slack_app_token:
        needed.append(("SLACK_SIGNING_SECRET", settings.slack_signing_secret))
    missing = [name for name, value in needed if not value]
    if missing:
        raise ConfigurationError(
            f"{' and '.join(missing)} must be set (see manifest.yml and the README's Slack setup)"
        )


def web_client(settings: ServiceSettings) -> tuple[aiohttp.ClientSession, AsyncWebClient]:
    """One session for every Web API call: keep-alive connections (and one TLS handshake)
    instead of a new connection per post, update and ephemeral."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    client = AsyncWebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        timeout=10,
        session=session,
        logger=web_api_logger(),
    )
    return session, client


_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_SIGNATURE = re.compile(r"^v0=[0-9a-f]{64}$")
MAX_SKEW_SECONDS = 300  # as Slack's documentation and Bolt allow
# A signed request is accepted while its timestamp is within MAX_SKEW_SECONDS of the clock,
# ahead or behind: the longest it can be replayed, with a minute's margin.
REPLAYABLE_SECONDS = 2 * MAX_SKEW_SECONDS + 60


def mount_slack(app: web.Application, bot: SlackBot) -> None:
    """POST /slack/events: every Slack request. The signature is checked over the raw bytes
    before anything is parsed, so a forged request costs one HMAC and is refused with 401
    whatever its body; Bolt, which does not check it again, dispatches. A signed but
    malformed body gets 400.

    A signed request is taken once, by its signature (which covers its timestamp and body):
    a copy sent again while its timestamp is fresh gets an empty 200 and does nothing.
    Otherwise a click refused for a passing reason (a user group that could not be checked)
    would decide when replayed, and a `route add` since removed would come back. Slack's
    own retries of an event carry their own signatures (and event ids: `once_per_event`);
    a person's second click is a request of its own."""
    secret = bot.signing_secret.encode()

    def signed(raw: bytes, stamp: str, signature: str) -> bool:
        """Slack's v0 signature over the raw bytes, and a timestamp within 5 minutes."""
        if not (_TIMESTAMP.fullmatch(stamp) and _SIGNATURE.fullmatch(signature)):
            return False
        if abs(time.time() - int(stamp)) > MAX_SKEW_SECONDS:
            return False
        base = b"v0:" + stamp.encode() + b":" + raw
        expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, signature)

    async def slack_events(request: web.Request) -> web.Response:
        with bot.foreground.serving():  # the outbox and the workers wait meanwhile
            return await _handle(request)

    async def _handle(request: web.Request) -> web.Response:
        raw = await request.read()
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if not signed(raw, stamp, signature):
            return web.json_response({"error": "invalid or stale Slack signature"}, status=401)
        headers: dict[str, str | Sequence[str]] = dict(request.headers)
        content_type = request.headers.get("Content-Type", "").split(";")[0] or None  # as Bolt
        try:
            text = raw.decode("utf-8")
            body = parse_slack_body(text, content_type)
            bolt_request = slack_request(text, body, request.query_string, headers)
        except (ValueError, RecursionError, TypeError, KeyError, AttributeError):
            bolt_request = None
        if bolt_request is None or not well_formed(bolt_request.body):
            return web.json_response({"error": "malformed Slack request body"}, status=400)
        # The replay guard's round trip overlaps the dispatch; it is awaited before the
        # request can change anything (`bot.listeners.taken_once`), and here at the latest.
        # A decision click's listener awaits the guard beside its own first read, inside
        # its budget: the guard has that budget too, not a tighter one of its own.
        within = LISTENER_BUDGET if is_decision_click(bolt_request.body) else None
        guard = asyncio.ensure_future(_first_time(signature, within))
        bolt_request.context[FIRST_TIME] = guard
        try:
            return await to_aiohttp_response(await bot.bolt.async_dispatch(bolt_request))
        finally:
            # StoreUnavailable: the listener said so (taken_once)
            await asyncio.gather(guard, return_exceptions=True)

    async def _first_time(signature: str, within: float | None) -> bool:
        # Redis away, or no answer in time (half a second before a listener begins):
        # StoreUnavailable. The request is then refused ("try again"), never let through: a
        # Redis that is only slow still takes the writes of a copy it could not tell from
        # the first.
        return await bot.seen_requests.first(signature, within)

    app.router.add_post("/slack/events", slack_events)
