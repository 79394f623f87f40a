"""Running the aiohttp server and waiting for Ctrl-C / SIGTERM: shared by serve and demo."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

__all__ = ["start_site", "until_signalled"]


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


async def until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
