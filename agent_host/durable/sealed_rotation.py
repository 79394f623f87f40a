"""`countersign keys rotate` for sealed fields: every sealed value of one run re-sealed under
the active key, and every value written before fields were sealed sealed now.

For one run: its hash, its requests' hashes and its ledger are read, and each value that
needs it (`FieldSealer.needs_resealing`) is sealed anew. Then one Lua script, on the run's
hash tag, swaps each value only if it is still the one that was read (a value rewritten
meanwhile was written under the writer's key, and is left to the next rotation), and
rewrites the run's audit stream with every entry that repeated an old value (a request's
decision; the run's error or output) given the new one: same entry ids, same order, same
other fields. Streams cannot be edited in place, so the stream is rebuilt inside the script,
where no other write can come between.

A value that cannot be opened (a key no longer in the ring, failed authentication) is left
as it is and reported, and the others are re-sealed: the same rules as for checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.redis_ledger import FINISHED, RESULT_FIELD
from agent_host.durable.sealed_fields import FieldSealer
from agent_host.durable.sealed_records import REQUEST_CLEAR, RUN_CLEAR
from agent_host.errors import SealedFieldError

__all__ = ["RESEAL", "Resealed", "reseal_run"]


@dataclass
class Resealed:
    fields: int = 0  # values swapped for their re-sealed copy
    damaged: list[str] = field(default_factory=list)  # what could not be opened, and why


# KEYS: run audit, then the hashes the updates name
# ARGV: n updates, then per update: key index, field, old, new; then m audit swaps, then per
#       swap: scope (an entry's request id, "" for the run's own), old detail, new detail
# Returns {hash fields swapped, audit entries swapped}.
RESEAL = """
local n = tonumber(ARGV[1])
local at = 2
local swapped = 0
for _ = 1, n do
  local key = KEYS[tonumber(ARGV[at])]
  if redis.call('HGET', key, ARGV[at + 1]) == ARGV[at + 2] then
    redis.call('HSET', key, ARGV[at + 1], ARGV[at + 3])
    swapped = swapped + 1
  end
  at = at + 4
end
local m = tonumber(ARGV[at])
at = at + 1
local news = {}
for _ = 1, m do
  news[ARGV[at] .. '\\0' .. ARGV[at + 1]] = ARGV[at + 2]
  at = at + 3
end
local entries_swapped = 0
if m > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  local entries = redis.call('XRANGE', KEYS[1], '-', '+')
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local scope, repeats = '', {}
    for i = 1, #fields, 2 do
      if fields[i] == 'request_id' then scope = fields[i + 1] end
      -- `detail` repeats a decision, output or error; a quorum vote's `decision` its own
      if fields[i] == 'detail' or fields[i] == 'decision' then repeats[#repeats + 1] = i + 1 end
    end
    local changed = false
    for _, at_value in ipairs(repeats) do
      local new = news[scope .. '\\0' .. fields[at_value]]
      if new then
        fields[at_value] = new
        changed = true
      end
    end
    if changed then entries_swapped = entries_swapped + 1 end
  end
  if entries_swapped > 0 then
    redis.call('DEL', KEYS[1])
    for _, entry in ipairs(entries) do
      redis.call('XADD', KEYS[1], entry[1], unpack(entry[2]))
    end
  end
end
return {swapped, entries_swapped}
"""


class _Plan:
    """The updates and audit swaps of one run, and what could not be opened."""

    def __init__(self, sealer: FieldSealer, run_id: str) -> None:
        self.sealer, self.run_id = sealer, run_id
        self.updates: list[tuple[str, str, str, str]] = []  # key, field, old, new
        self.swaps: list[tuple[str, str, str]] = []  # audit scope, old, new
        self.damaged: list[str] = []

    def value(
        self,
        key: str,
        name: str,
        stored: str,
        *,
        where: str,
        record_id: str,
        sealed_as: str,
        prefix: str = "",
    ) -> str | None:
        """Plan the swap of `stored` (`prefix` + a sealed value) if it needs re-sealing;
        the new stored value, or None."""
        value = stored[len(prefix) :]
        if not self.sealer.needs_resealing(value):
            return None
        try:
            new = prefix + self.sealer.reseal(
                value, run_id=self.run_id, record_id=record_id, field=sealed_as
            )
        except SealedFieldError as exc:
            self.damaged.append(f"{where} field {name!r} not re-sealed: {exc}")
            return None
        self.updates.append((key, name, stored, new))
        return new

    async def execute(self, script: AsyncScript, audit: str) -> int:
        if not self.updates and not self.swaps:
            return 0
        keys = [audit]
        index: dict[str, int] = {}
        args: list[Any] = [len(self.updates)]
        for key, name, old, new in self.updates:
            if key not in index:
                keys.append(key)
                index[key] = len(keys)
            args += [index[key], name, old, new]
        args.append(len(self.swaps))
        for scope, old, new in self.swaps:
            args += [scope, old, new]
        swapped, _ = await script(keys=keys, args=args)
        return int(swapped)


async def reseal_run(
    redis: Redis, script: AsyncScript, sealer: FieldSealer, run_id: str
) -> Resealed:
    """Re-seal every sealed field of one run (`script` is RESEAL, registered once)."""
    k = K.Keys(run_id)
    plan = _Plan(sealer, run_id)
    try:
        run = _text_map(await redis.hgetall(k.run))
        request_ids = [as_text(r) for r in await redis.lrange(k.requests, 0, -1)]
        async with redis.pipeline(transaction=False) as pipe:
            for request_id in request_ids:
                pipe.hgetall(k.request(request_id))
            requests = [_text_map(r) for r in await pipe.execute()]
        ledger = _text_map(await redis.hgetall(k.ledger))
        entries: Any = await redis.xrange(k.audit)
        audit = [_text_map(fields) for _, fields in entries or []]
        votes = [(e.get("request_id", ""), e.get("decision", "")) for e in audit]
    except ResponseError as exc:  # WRONGTYPE: a key of the run holds something else
        return Resealed(damaged=[f"a key of the run holds another kind of value ({exc})"])
    except UnicodeDecodeError as exc:  # written by something else than countersign
        return Resealed(damaged=[f"a value of the run is not text, so none was re-sealed ({exc})"])

    for name, value in run.items():
        if name in RUN_CLEAR:
            continue
        new = plan.value(k.run, name, value, where="run", record_id=run_id, sealed_as=name)
        if new is not None and name in ("output", "error"):
            plan.swaps.append(("", value, new))  # FINISH repeated it in the audit stream
    for request_id, request in zip(request_ids, requests, strict=True):
        key, where = k.request(request_id), f"request {request_id}"
        for name, value in request.items():
            if name in REQUEST_CLEAR:
                continue
            new = plan.value(key, name, value, where=where, record_id=request_id, sealed_as=name)
            if new is not None and name == "decision":
                plan.swaps.append((request_id, value, new))  # DECIDE / PAUSE repeated it
    planned = {old for _, old, _ in plan.swaps}
    for request_id, vote in votes:  # a quorum vote's decision lives only in its audit entry
        if not request_id or vote in planned or not sealer.needs_resealing(vote):
            continue
        try:
            fresh = sealer.reseal(vote, run_id=run_id, record_id=request_id, field="decision")
        except SealedFieldError as exc:
            plan.damaged.append(f"a vote on request {request_id} not re-sealed: {exc}")
            continue
        plan.swaps.append((request_id, vote, fresh))
        planned.add(vote)
    for call_id, value in ledger.items():
        # `done:` or `failed:` + the sealed result; `started` has none
        prefix = next((p for p in FINISHED if value.startswith(p)), None)
        if prefix is not None:
            plan.value(
                k.ledger,
                call_id,
                value,
                where="ledger",
                record_id=call_id,
                sealed_as=RESULT_FIELD,
                prefix=prefix,
            )
    return Resealed(await plan.execute(script, k.audit), plan.damaged)


def _text_map(raw: Any) -> dict[str, str]:
    return {as_text(name): as_text(value) for name, value in (raw or {}).items()}
