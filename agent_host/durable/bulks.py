"""Bulk messages in Redis: the record PAUSE writes for one message of many calls, and what
happens to it after (`approvals.bulk` says what a bulk is).

PAUSE writes the record (its calls and their hashes, the digest) and one
`requests_posted_bulk` outbox entry in the same step as the requests. Once the message is
posted, `record_posted` keeps its channel and ts on the record and on each call, in one
script: a redelivered entry finds them and posts nothing again. `split` ("Review one by
one") is taken once: it queues a `request_posted` entry for each call still waiting (posted
in the message's thread) and a `bulk_updated` one, with an audit entry. Every key is the
run's, so each script runs on one Redis Cluster slot.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from redis.asyncio import Redis

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.bulk import Bulk
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors
from agent_host.durable.store import RunStore

__all__ = ["BULK_POSTED", "BULK_UPDATED", "BulkBook"]

log = logging.getLogger(__name__)

BULK_POSTED = "requests_posted_bulk"  # outbox entry types
BULK_UPDATED = "bulk_updated"

# KEYS: bulk, then each member's request hash
# ARGV: channel, ts
# A member posted on its own already (its message_ts is not empty) keeps its message.
RECORD_POSTED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (redis.call('HGET', KEYS[1], 'ts') or '') ~= '' then return 0 end
redis.call('HSET', KEYS[1], 'channel', ARGV[1], 'ts', ARGV[2])
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('HSET', KEYS[i], 'bulk_ts', ARGV[2])
    if (redis.call('HGET', KEYS[i], 'message_ts') or '') == '' then
      redis.call('HSET', KEYS[i], 'message_channel', ARGV[1], 'message_ts', ARGV[2])
    end
  end
end
return 1
"""

# KEYS: bulk, run audit, OUTBOX, then each member's request hash
# ARGV: who, now, then each member's request id
# Taken once ('taken' after): every member still pending and shown only in the bulk
# message is queued to be posted on its own, and the message to be updated.
SPLIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone', 0} end
if redis.call('HSETNX', KEYS[1], 'split_by', ARGV[1]) == 0 then
  return {'taken', 0}
end
local queued = 0
for i = 4, #KEYS do
  local f = redis.call('HMGET', KEYS[i], 'status', 'message_ts', 'bulk_ts')
  if f[1] == 'pending' and (f[2] or '') == (f[3] or '') then
    redis.call('XADD', KEYS[3], '*', 'type', 'request_posted', 'request_id', ARGV[i - 1])
    queued = queued + 1
  end
end
redis.call('XADD', KEYS[2], '*', 'at', ARGV[2], 'actor', ARGV[1], 'event', 'bulk_split',
  'request_id', redis.call('HGET', KEYS[1], 'bulk_id'), 'detail', tostring(queued))
redis.call('XADD', KEYS[3], '*', 'type', 'bulk_updated', 'bulk_id',
  redis.call('HGET', KEYS[1], 'bulk_id'))
return {'split', queued}
"""

# KEYS: bulk
# ARGV: the step's field (reminder_by:<route id>, escalation_by:<route id>), request id
# The first member of a route whose step comes due claims the one reminder (or escalation)
# of that route's calls in the bulk; a redelivery of its own entry finds it its own.
CLAIM_STEP = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local by = redis.call('HGET', KEYS[1], ARGV[1])
if not by or by == '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
if by == ARGV[2] then return 1 end
return 0
"""
ESCALATED_TO = "escalated:"  # + route id|destination: the note posted there (its ts)

Split = Literal["split", "taken", "gone"]


@unavailable_on_redis_errors
class BulkBook:
    def __init__(self, store: RunStore) -> None:
        self.store = store
        redis: Redis = store.redis
        self.redis = redis
        self._record_posted = redis.register_script(RECORD_POSTED)
        self._split = redis.register_script(SPLIT)
        self._claim_step = redis.register_script(CLAIM_STEP)

    async def get(self, bulk_id: str) -> Bulk | None:
        try:
            k = K.Keys(bulk_id)
        except ValueError:
            return None
        raw: Any = await self.redis.hgetall(k.bulk(bulk_id))
        if not raw:
            return None
        return Bulk.from_hash({as_text(key): as_text(value) for key, value in raw.items()})

    async def requests(self, bulk: Bulk) -> list[ApprovalRequest]:
        """Its calls as they are now, in its order."""
        return await self.store.get_requests(bulk.run_id, bulk.request_ids)

    async def record_posted(self, bulk: Bulk, channel: str, ts: str) -> bool:
        """The message is posted: on the record, and on each call that has no message of
        its own (its `message_ts` is the bulk's until it is posted on its own)."""
        k = K.Keys(bulk.bulk_id)
        done: Any = await self._record_posted(
            keys=[k.bulk(bulk.bulk_id), *(k.request(rid) for rid in bulk.request_ids)],
            args=[channel, ts],
        )
        return bool(done)

    async def record_fallback(self, bulk: Bulk) -> None:
        """The channel refused the message for good: each call is posted on its own."""
        await self.redis.hset(K.Keys(bulk.bulk_id).bulk(bulk.bulk_id), "fallback", "1")

    async def split(self, bulk: Bulk, user_id: str) -> tuple[Split, int]:
        """ "Review one by one", once: (what happened, how many calls were queued)."""
        k = K.Keys(bulk.bulk_id)
        outcome, queued = await self._split(
            keys=[
                k.bulk(bulk.bulk_id),
                k.audit,
                k.shard.outbox,
                *(k.request(rid) for rid in bulk.request_ids),
            ],
            args=[user_id, repr(self.store.clock()), *bulk.request_ids],
        )
        return as_text(outcome), int(queued)  # type: ignore[return-value]

    # A bulk message may hold calls of several routes (one channel, other reviewers or
    # ladders): each route's calls share one reminder and one escalation.
    async def claim_reminder(self, request: ApprovalRequest) -> bool:
        """Whether `request`'s reminder is the one for its route's calls in its bulk."""
        return await self._claim(request, "reminder_by")

    async def claim_escalation(self, request: ApprovalRequest) -> bool:
        """Whether `request`'s escalation is the one for its route's calls in its bulk."""
        return await self._claim(request, "escalation_by")

    async def _claim(self, request: ApprovalRequest, step: str) -> bool:
        bulk_id, route_id = request.bulk_id, request.route.route_id
        field = f"{step}:{route_id}"
        mine: Any = await self._claim_step(
            keys=[K.Keys(bulk_id).bulk(bulk_id)], args=[field, request.request_id]
        )
        return bool(mine)

    async def escalated_to(self, bulk_id: str, route_id: str) -> set[str]:
        """Where the escalation note of the bulk's calls of `route_id` was posted already."""
        fields: Any = await self.redis.hkeys(K.Keys(bulk_id).bulk(bulk_id))
        names = (as_text(f) for f in fields)
        prefix = f"{ESCALATED_TO}{route_id}|"
        return {n.removeprefix(prefix) for n in names if n.startswith(prefix)}

    async def record_escalation(self, bulk_id: str, route_id: str, target: str, ts: str) -> None:
        """The note is posted at `target`: a redelivered entry posts it there no more."""
        field = f"{ESCALATED_TO}{route_id}|{target}"
        await self.redis.hset(K.Keys(bulk_id).bulk(bulk_id), field, ts)
