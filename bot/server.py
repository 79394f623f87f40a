"""Running the aiohttp server and waiting for Ctrl-C / SIGTERM: shared by serve and demo."""

from __future__ import annotations

import asyncio
import errno
import signal

from aiohttp import web

from agent_host.errors import ConfigurationError
from bot.stop_within import REQUESTS_END_WITHIN

__all__ = ["start_site", "stop_on_signals"]


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app`; returns the runner (to clean up) and the bound port (for port 0)."""
    # (a stop waits for the requests being handled as long as it waits over Socket Mode)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=REQUESTS_END_WITHIN)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigurationError(cannot_listen(host, port, exc)) from exc
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


def cannot_listen(host: str, port: int, exc: OSError, setting: str = "PORT / --port") -> str:
    """One line for an operator: what is in the way, and which `setting` moves the server."""
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use: stop the other process or set {setting}"
    if exc.errno == errno.EACCES:
        return (
            f"may not listen on port {port} on {host} (permission denied): choose a port "
            f"above 1023 with {setting}"
        )
    return f"cannot listen on {host}:{port} ({exc.strerror or exc}): check --host and {setting}"


def stop_on_signals() -> asyncio.Event:
    """An event set by Ctrl-C or SIGTERM. Call it first thing, so that a signal during
    start-up stops the process cleanly once started rather than cancelling it half-way."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
