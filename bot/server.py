"""Running the aiohttp server and waiting for Ctrl-C / SIGTERM: shared by serve and demo."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

__all__ = ["start_site", "stop_on_signals"]


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app`; returns the runner (to clean up) and the bound port (for port 0)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


def stop_on_signals() -> asyncio.Event:
    """An event set by Ctrl-C or SIGTERM. Call it first thing, so that a signal during
    start-up stops the process cleanly once started rather than cancelling it half-way."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
