"""The execution ledger in Redis: one hash per run, call id -> `started` or `done:<result>`."""

from __future__ import annotations

from redis.asyncio import Redis

from agent_host.durable.connections import as_text
from agent_host.durable.keys import Keys
from agent_host.runtime.ledger import Claim

__all__ = ["RedisLedger"]

_DONE = "done:"


class RedisLedger:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def claim(self, run_id: str, call_id: str) -> Claim:
        key = Keys(run_id).ledger
        if await self.redis.hsetnx(key, call_id, "started"):
            return Claim("claimed")
        value = await self.redis.hget(key, call_id)
        text = as_text(value or "")
        if text.startswith(_DONE):
            return Claim("finished", text[len(_DONE) :])
        return Claim("in_doubt")

    async def finish(self, run_id: str, call_id: str, result: str) -> None:
        await self.redis.hset(Keys(run_id).ledger, call_id, _DONE + result)
