"""The composition root: the whole countersign service assembled from ServiceSettings, in one place.

`countersign serve`, `countersign worker`, `countersign demo` and the tests all call
`build_service(settings)` and then `start(...)` / `stop()`; nothing else wires the agent
host, the Slack bot and the HTTP server together.

    serve:  build_service(s) -> start(http=(host, port), workers=N)   HTTP + Slack + workers
    worker: build_service(s) -> start(workers=1)                       workers, sweeper, outbox
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiohttp import web

from agent_host.durable.host import Host
from agent_host.http.application import create_app
from bot import delivery
from bot.server import start_site
from bot.slack_settings import ServiceSettings
from bot.socket_client import SocketMode, start_socket_mode
from bot.stop_within import REQUESTS_END_WITHIN
from bot.wiring import SlackBot, build, mount_slack

__all__ = ["Service", "build_service"]

log = logging.getLogger(__name__)


@dataclass
class Service:
    """The agent host, its Slack bot and (once started) the HTTP server of one process."""

    settings: ServiceSettings
    host: Host
    bot: SlackBot
    app: web.Application
    url: str = ""  # http://host:port once serving HTTP
    _runner: web.AppRunner | None = field(default=None, repr=False)
    _socket_mode: SocketMode | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    async def start(self, *, http: tuple[str, int] | None = None, workers: int = 1) -> None:
        """Serve HTTP (the Slack endpoint, unless Socket Mode, and the API) when `http` is
        given, then start `workers` resume workers, the sweeper and the outbox."""
        if not self.settings.default_channel:
            log.warning(delivery.NO_DEFAULT_CHANNEL)
        try:
            await delivery.refuse_a_refused_token(self.bot.client)
            await self.host.say_keys_gone()
            if http is not None:
                await self._serve_http(*http)
            self.host.start_background(workers)
        except BaseException:
            await self.stop()
            raise

    async def until_stopped_or_work_lost(self, stop: asyncio.Event) -> bool:
        """Wait until `stop` is set, or a background task of the host ends while it runs
        (for a process with no /healthz to say so, as `countersign worker`); True for the
        latter."""
        waits = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self.host.work_lost.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self.host.work_lost.is_set()

    async def _serve_http(self, host_name: str, port: int) -> None:
        if self.settings.slack_app_token:  # Slack's requests arrive over a websocket
            self._socket_mode = await start_socket_mode(
                self.bot.bolt,
                app_token=self.settings.slack_app_token,
                api_url=self.settings.slack_api_url,
                foreground=self.bot.foreground,
            )
            log.info("SLACK_APP_TOKEN is set: Socket Mode, POST /slack/events is not used")
        else:
            mount_slack(self.app, self.bot)
        self._runner, bound = await start_site(self.app, host_name, port)
        self.url = f"http://{host_name}:{bound}"

    async def stop(self) -> None:
        """Stop taking requests; let the requests being handled end (for at most
        REQUESTS_END_WITHIN), then, side by side, what the workers and the outbox have
        under way (a tool call, a post on its way to Slack) and the work started after
        acks, all within the one grace (`host.stop_grace`) from the stop's start; cancel
        what is left; close every connection, Slack's after the posts that use it. Safe to
        call more than once; whatever step fails, the later ones are still taken (the
        workers told to stop, not just cancelled)."""
        if self._stopped:
            return
        self._stopped = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.host.stop_grace

        def left() -> float:
            return max(deadline - loop.time(), 0.0)

        async def work_ends() -> None:  # the workers' and the bot's, side by side
            await asyncio.gather(self.host.stop_work(left()), self.bot.tasks.drain(left()))

        async with contextlib.AsyncExitStack() as steps:  # (run last first)
            steps.push_async_callback(self.host.close)  # Redis, last: the bot's work uses it
            steps.push_async_callback(lambda: self.bot.close(left()))  # (and what work began)
            steps.push_async_callback(work_ends)
            if self._runner is not None:  # (long polls answered at once: its on_shutdown)
                steps.push_async_callback(self._runner.cleanup)  # (REQUESTS_END_WITHIN)
                self._runner = None
            if (socket_mode := self._socket_mode) is not None:
                steps.push_async_callback(
                    lambda: socket_mode.stop(min(REQUESTS_END_WITHIN, left()))
                )
                self._socket_mode = None


async def build_service(settings: ServiceSettings) -> Service:
    """Everything one process runs, from its settings (nothing read from the environment
    here): the host (Redis, store, runner, workers), the bot and the HTTP app."""
    host, bot = await build(settings)
    return Service(settings=settings, host=host, bot=bot, app=create_app(host))
