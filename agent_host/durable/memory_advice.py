"""One line of advice for operators with their own Redis (REDIS_URL) still on the defaults
that cost memory per pending approval (see `redis_server.MEMORY_SETTINGS`).

Said only when the server answers CONFIG GET with Redis's own default for a setting; a
server that refuses CONFIG (managed Redis), an older Redis without the setting, or one an
operator already tuned gets no advice. Never raises: advice must not stop a start.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agent_host.durable.redis_server import MEMORY_SETTINGS

__all__ = ["REDIS_DEFAULTS", "memory_advice"]

REDIS_DEFAULTS: dict[str, str] = {"hash-max-listpack-value": "64", "stream-node-max-bytes": "4096"}
ASK_WITHIN = 2.0  # seconds


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


async def memory_advice(redis: Any) -> str | None:
    """The advice for `redis`, or None when there is none to give."""
    reply: Any = None
    with contextlib.suppress(Exception):  # refused, unreachable, too old: no advice
        async with asyncio.timeout(ASK_WITHIN):
            reply = await redis.config_get(*REDIS_DEFAULTS)
    if not isinstance(reply, dict):
        return None
    values = {_text(name): _text(value) for name, value in reply.items()}
    on_default = [name for name, default in REDIS_DEFAULTS.items() if values.get(name) == default]
    if not on_default:
        return None
    settings = " ".join(f"{name} {MEMORY_SETTINGS[name]}" for name in on_default)
    return (
        f"REDIS_URL's server keeps Redis's default {', '.join(on_default)}: each pending "
        f"approval takes about twice the memory it needs there; set `{settings}` in its "
        "redis.conf (or with CONFIG SET) as the embedded Redis does"
    )
