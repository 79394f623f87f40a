"""The escalation ladder: a pending request's reminder and escalation, each exactly once.

PAUSE and CREATE_EXTERNAL put a request's steps in its shard's ladder, a sorted set whose
members are `<step>|<request id>` scored by when the step is due (Redis's clock, as the
deadlines); DECIDE takes them out with the decision. The sweeper claims due steps with
LADDER_STEP, one script that removes the member (of several sweepers, only one removes
it), checks that the request still waits (decided, or past its deadline, it gets no step),
and writes the step's audit entry and its outbox entry in the same step: a claimed step is
never lost, never repeated, and never taken for a decided request. The outbox then does
the step's Slack side (`escalations`), at least once; what it posted is recorded here, so
a redelivered entry posts nothing again (invariant 18, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any, Literal

from redis.asyncio import Redis

from agent_host.approvals import EscalatedCopy
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors
from agent_host.durable.due import due_now

__all__ = ["ESCALATED", "LADDER_ACTOR", "REMINDED", "STEPS", "Claim", "Ladder"]

log = logging.getLogger(__name__)

STEPS = ("remind", "escalate")
REMINDED, ESCALATED = "request_reminded", "request_escalated"  # their outbox entries' types
_OUTBOX_TYPE = {"remind": REMINDED, "escalate": ESCALATED}
_EVENT = {"remind": "reminded", "escalate": "escalated"}  # their audit events
LADDER_ACTOR = "countersign (escalation)"

Claim = Literal["claimed", "taken", "decided", "past_deadline", "gone"]

# KEYS: ladder, request, run audit, OUTBOX
# ARGV: member, request id, step, audit event, outbox type, actor
# 'taken': another sweeper claimed it first; 'decided': the request no longer waits, and
# 'past_deadline': it is only left to expire (the sweeper had not reached it yet), so its
# step is dropped; 'gone': no such request.
LADDER_STEP = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 'taken' end
local f = redis.call('HMGET', KEYS[2], 'status', 'call_hash', 'route', 'expires_at')
if not f[1] then return 'gone' end
if f[1] ~= 'pending' then return 'decided' end
local t = redis.call('TIME')
local now_n = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = tonumber(f[4] or '')
if deadline and now_n > deadline then return 'past_deadline' end
local detail = ''
local ok, route = pcall(cjson.decode, f[3] or '')
if ok and type(route) == 'table' then
  if ARGV[3] == 'escalate' then
    detail = tostring(route['escalate_to'] or '')
  elseif type(route['reviewers']) == 'table' then
    detail = table.concat(route['reviewers'], ',')
  end
end
local now = string.format('%.6f', now_n)
redis.call('XADD', KEYS[3], '*', 'at', now, 'actor', ARGV[6], 'event', ARGV[4],
  'request_id', ARGV[2], 'call_hash', f[2] or '', 'detail', detail)
redis.call('XADD', KEYS[4], '*', 'type', ARGV[5], 'request_id', ARGV[2])
return 'claimed'
"""

# A copy posted by an escalation (or a bulk message's note), recorded once per destination
# (a redelivered entry that posted again is not recorded twice), with an audit entry saying
# where it went.
# KEYS: request, run audit
# ARGV: copy JSON, now, actor, field (escalations or escalation_notes)
RECORD_COPY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local raw = redis.call('HGET', KEYS[1], ARGV[4])
local copies = {}
if raw and raw ~= '' then copies = cjson.decode(raw) end
local copy = cjson.decode(ARGV[1])
for _, seen in ipairs(copies) do
  if seen['to'] == copy['to'] then return 0 end
end
copies[#copies + 1] = copy
redis.call('HSET', KEYS[1], ARGV[4], cjson.encode(copies))
local rid = redis.call('HGET', KEYS[1], 'request_id')
redis.call('XADD', KEYS[2], '*', 'at', ARGV[2], 'actor', ARGV[3], 'event', 'escalation_posted',
  'request_id', rid, 'detail', copy['channel'])
return 1
"""


@unavailable_on_redis_errors
class Ladder:
    def __init__(self, redis: Redis, *, batch: int = 100) -> None:
        self.redis, self.batch = redis, batch
        self._step = redis.register_script(LADDER_STEP)
        self._record_copy = redis.register_script(RECORD_COPY)

    async def climb(self) -> int:
        """Claim every step that is due by Redis's clock; returns how many this caller
        claimed (the others were claimed elsewhere, or their request was decided)."""
        shards = K.shards()
        claimed = 0
        due = await due_now(self.redis, [shard.ladder for shard in shards], self.batch)
        for shard, members in zip(shards, due, strict=True):
            for member in members:
                claimed += await self.claim(shard, as_text(member)) == "claimed"
        return claimed

    async def claim(self, shard: K.Shard, member: str) -> Claim:
        step, _, request_id = member.partition("|")
        try:
            k = K.Keys(request_id)
        except ValueError:
            k = None
        if step not in STEPS or k is None or k.shard != shard:
            log.warning("dropped a malformed ladder entry %r", member)
            await self.redis.zrem(shard.ladder, member)
            return "gone"
        outcome: Any = await self._step(
            keys=[shard.ladder, k.request(request_id), k.audit, shard.outbox],
            args=[member, request_id, step, _EVENT[step], _OUTBOX_TYPE[step], LADDER_ACTOR],
        )
        return as_text(outcome)  # type: ignore[return-value]

    async def record_reminder(self, request_id: str, ts: str) -> None:
        """The reminder is in the thread: a redelivered entry must not post it again."""
        await self.redis.hset(K.Keys(request_id).request(request_id), "reminder_ts", ts)

    async def record_copy(self, request_id: str, copy: EscalatedCopy, now: float) -> bool:
        """Keep an escalated copy's message with its request, so every later update of the
        request reaches it; False if one for this destination was recorded already."""
        return await self._record(request_id, copy, now, "escalations")

    async def record_note(self, request_id: str, note: EscalatedCopy, now: float) -> bool:
        """Keep the escalation note of the bulk message the request waits in with it (not
        updated with it: the right to decide it that a copy would give); False if one for
        this destination was recorded already."""
        return await self._record(request_id, note, now, "escalation_notes")

    async def _record(self, request_id: str, copy: EscalatedCopy, now: float, field: str) -> bool:
        k = K.Keys(request_id)
        done: Any = await self._record_copy(
            keys=[k.request(request_id), k.audit],
            args=[json.dumps(asdict(copy)), repr(now), LADDER_ACTOR, field],
        )
        return bool(done)
