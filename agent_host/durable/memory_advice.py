"""One line of advice for operators with their own Redis (REDIS_URL) still on the defaults
that cost memory per pending approval (see `redis_server.MEMORY_SETTINGS`).

Said only when the server answers CONFIG GET with Redis's own default for a setting; a
server that refuses CONFIG (managed Redis), an older Redis without the setting, or one an
operator already tuned gets no advice. The settings are read with the eviction policy's, in
one CONFIG GET (`connections.server_config`).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent_host.durable.redis_server import MEMORY_SETTINGS

__all__ = ["REDIS_DEFAULTS", "memory_advice"]

REDIS_DEFAULTS: dict[str, str] = {"hash-max-listpack-value": "64", "stream-node-max-bytes": "4096"}


def memory_advice(config: Mapping[str, str]) -> str | None:
    """The advice for a server whose CONFIG GET answered `config` (empty: refused or not
    asked), or None when there is none to give."""
    on_default = [name for name, default in REDIS_DEFAULTS.items() if config.get(name) == default]
    if not on_default:
        return None
    settings = " ".join(f"{name} {MEMORY_SETTINGS[name]}" for name in on_default)
    return (
        f"REDIS_URL's server keeps Redis's default {', '.join(on_default)}: each pending "
        f"approval takes about twice the memory it needs there; set `{settings}` in its "
        "redis.conf (or with CONFIG SET) as the embedded Redis does"
    )
