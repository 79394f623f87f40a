"""External approval requests in Redis: create (idempotent by the caller's id) and wait.

Creation is one Lua script (`CREATE_EXTERNAL`) over the keys of a fresh run: the run, its
one request, the indexes, the deadline and the outbox entry that posts it, and, with an
external id, the idempotency key, which lives in the same hash tag (the run is placed in
the shard the external id picks), so the first creation wins on a cluster too.

A long poll waits in the process's `DecisionWatch`: one loop looks at every waited-on
request in one round trip a tick, so waiters hold no Redis connection, however many there
are, and a decision made in any process wakes them. Their reads of the request, when they
begin and once woken, take turns (LONG_POLL_READS at once): a thousand agents polling at
the same moment, or woken by one decision, never take every connection of the client.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from redis.asyncio import Redis

from agent_host.approvals import ApprovalRequest, Router
from agent_host.approvals.external import EXTERNAL, ExternalRequestSpec
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors
from agent_host.durable.decision_watch import DecisionWatch
from agent_host.durable.scripts import CREATE_EXTERNAL
from agent_host.durable.store import RunStore, _score

__all__ = ["Created", "ExternalRequests"]

EXTERNAL_CALL_ID = "call_external"
LONG_POLL_READS = 32  # reads of long-polled requests at once, per process


@dataclass(frozen=True)
class Created:
    outcome: Literal["created", "exists", "conflict"]
    request_id: str


@unavailable_on_redis_errors
class ExternalRequests:
    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.redis: Redis = store.redis
        self.router: Router = store.router
        self._create = self.redis.register_script(CREATE_EXTERNAL)
        self.watch = DecisionWatch(self.redis)
        self._poll_reads = asyncio.Semaphore(LONG_POLL_READS)

    async def create(self, spec: ExternalRequestSpec, actor: str = "api") -> Created:
        shard = K.external_shard(spec.external_id) if spec.external_id else None
        run_id = K.new_run_id_in(shard) if shard is not None else K.new_run_id()
        k, now = K.Keys(run_id), self.store.clock()
        request_id = K.request_id(run_id, 1)
        route = await self.router.route(spec.agent, spec.tool, spec.severity)
        if spec.expires_in_hours is not None:
            route = replace(route, expiry_seconds=spec.expires_in_hours * 3600)
        request = ApprovalRequest(
            request_id=request_id,
            run_id=run_id,
            call_id=EXTERNAL_CALL_ID,
            agent=spec.agent,
            tool=spec.tool,
            arguments=spec.arguments,
            call_hash=spec.call_hash,
            kind="question" if spec.question else "approval",
            reason=spec.reason,
            severity=spec.severity,
            requested_by=spec.requested_by,
            created_at=now,
            expires_at=now + route.expiry_seconds,
            route=route,
            allow_always=False,  # there is no run here for a standing approval to cover
            question=spec.question,
            pause_id=request_id,
            origin=EXTERNAL,
            callback_url=spec.callback_url,
        )
        run = {
            "run_id": run_id,
            "agent": spec.agent,
            "input": "",
            "requested_by": spec.requested_by,
            "status": "waiting",
            "pause_id": request_id,
            "undecided": "1",
            "pause_requests": json.dumps([request_id]),
            "request_seq": "1",
            "origin": EXTERNAL,
            "created_at": repr(now),
            "updated_at": repr(now),
        }
        fields = self.store.sealed.seal_request(request.to_hash() | {"quorum": str(route.quorum)})
        external_key = k.shard.external(spec.external_id) if spec.external_id else k.run
        outcome, rid = await self._create(
            keys=[
                external_key,
                k.run,
                k.requests,
                k.audit,
                k.shard.pending,
                k.shard.deadlines,
                k.shard.outbox,
                k.shard.runs,
                k.request(request_id),
                k.shard.pending_in(route.destination),
                k.shard.ladder,
            ],
            args=[
                "1" if spec.external_id else "0",
                spec.fingerprint,
                run_id,
                request_id,
                json.dumps(self.store.sealed.seal_run(run)),
                json.dumps(fields),
                _score(now),
                route.expiry_seconds,
                repr(now),
                actor,
            ],
        )
        return Created(as_text(outcome), as_text(rid))  # type: ignore[arg-type]

    async def by_external_id(self, external_id: str) -> str | None:
        """The request id an external id created, if any."""
        key = K.external_shard(external_id).external(external_id)
        found: Any = await self.redis.hget(key, "request_id")
        return as_text(found) if found is not None else None

    async def wait(self, request_id: str, seconds: float) -> ApprovalRequest | None:
        """The request once decided, or as it is after `seconds` (None if there is none)."""
        request = await self._poll_read(request_id)
        if request is None or request.decided or seconds <= 0:
            return request
        await self.watch.until_decided(request_id, seconds)
        return await self._poll_read(request_id)

    async def _poll_read(self, request_id: str) -> ApprovalRequest | None:
        async with self._poll_reads:
            return await self.store.get_request(request_id)
