"""Commands packed into Redis's protocol by hiredis (in C) rather than by redis-py's
asyncio connection (in Python, argument by argument): the same bytes, about a quarter of
the CPU over the commands of an approval cycle (a ninth for a script call of a dozen keys).

redis-py's synchronous client packs with hiredis; its asyncio client does not.
`hiredis_packing` gives a pool's connection class hiredis's packer (the pools of
`connection_pool`; a Redis Cluster's connections keep redis-py's). A value hiredis does not
take (None, a bool) goes to redis-py's packer, whose error names it; nothing is sent.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio.connection import AbstractConnection

__all__ = ["hiredis_packing"]


class _HiredisPacking(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        # A command name of several words ("CONFIG GET") is sent as that many arguments.
        if isinstance(args[0], str | bytes) and len(words := args[0].split()) > 1:
            args = (*words, *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # None, a bool, ...: redis-py's packer says which and why
            return super().pack_command(*args)


_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def hiredis_packing(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """`connection_class`, packing its commands with hiredis (one class made per class)."""
    if issubclass(connection_class, _HiredisPacking):
        return connection_class
    if connection_class not in _PACKING:
        name = connection_class.__name__
        _PACKING[connection_class] = type(name, (_HiredisPacking, connection_class), {})
    return _PACKING[connection_class]
