"""The execution ledger in Redis: one hash per run, call id -> `started`, `done:<result>`
(the tool returned) or `failed:<error>` (it raised; the text the model was given).

A recorded result is the tool's output, so it is sealed (`sealed_fields`: bound to the run,
the call and the field `result`); `started` and the prefixes stay clear.
"""

from __future__ import annotations

import contextlib

from redis.asyncio import Redis

from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing
from agent_host.durable.keys import Keys
from agent_host.durable.sealed_fields import FieldSealer
from agent_host.errors import SealedFieldError
from agent_host.runtime.ledger import Claim, Finished

__all__ = ["DONE", "FAILED", "FINISHED", "RESULT_FIELD", "RedisLedger"]

DONE = "done:"
FAILED = "failed:"
FINISHED: dict[str, Finished] = {DONE: "executed", FAILED: "error"}  # prefix -> outcome
RESULT_FIELD = "result"


class RedisLedger:
    def __init__(self, redis: Redis, keyring: KeyRing) -> None:
        self.redis = redis
        self.sealer = FieldSealer(keyring)

    async def claim(self, run_id: str, call_id: str) -> Claim:
        """A finished call's result whose seal cannot be opened raises SealedFieldError:
        the call is not run again, and the run fails saying why."""
        key = Keys(run_id).ledger
        if await self.redis.hsetnx(key, call_id, "started"):
            return Claim("claimed")
        value = await self.redis.hget(key, call_id)
        return self._claim(run_id, call_id, as_text(value or ""))

    async def recorded(self, run_id: str) -> dict[str, Claim]:
        """Every call of the run the ledger holds: finished (with its result), or started
        and in doubt (as is one whose result cannot be opened)."""
        entries = await self.redis.hgetall(Keys(run_id).ledger)
        claims: dict[str, Claim] = {}
        for raw_id, raw_value in entries.items():
            call_id = as_text(raw_id)
            claims[call_id] = Claim("in_doubt")
            with contextlib.suppress(SealedFieldError):
                claims[call_id] = self._claim(run_id, call_id, as_text(raw_value))
        return claims

    async def finish(
        self, run_id: str, call_id: str, result: str, outcome: Finished = "executed"
    ) -> None:
        sealed = self.sealer.seal(result, run_id=run_id, record_id=call_id, field=RESULT_FIELD)
        prefix = FAILED if outcome == "error" else DONE
        await self.redis.hset(Keys(run_id).ledger, call_id, prefix + sealed)

    def _claim(self, run_id: str, call_id: str, value: str) -> Claim:
        """The claim an existing entry stands for: finished (its result opened) or in doubt."""
        for prefix, outcome in FINISHED.items():
            if value.startswith(prefix):
                result = self.sealer.open(
                    value[len(prefix) :], run_id=run_id, record_id=call_id, field=RESULT_FIELD
                )
                return Claim("finished", result, outcome)
        return Claim("in_doubt")
