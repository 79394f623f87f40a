"""The Redis store: runs, encrypted checkpoints, approval requests, decisions.

Each state change is one Lua script (see `scripts`), so a crash leaves either all of it or
none. The checkpoint of a pause is written in the same step as its requests, the pending
index and the outbox entries that will post them: nothing can be clicked before it exists.

The content of runs and requests (input, output, arguments, reasons, decisions...) is
sealed before it is handed to a script and opened as it is read (`sealed_records`): the
store takes and returns plain domain objects.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ResponseError

from agent_host.approvals import (
    ApprovalRequest,
    DecideResult,
    RequestStatus,
    Route,
    Router,
    RunRecord,
)
from agent_host.approvals.bulk import plan_bulks
from agent_host.approvals.context import CallContext, context_for
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors
from agent_host.durable.crypto import KeyRing
from agent_host.durable.scripts import CREATE, DECIDE, FINISH, PAUSE
from agent_host.durable.sealed_fields import FieldSealer
from agent_host.durable.sealed_records import SealedRecords
from agent_host.durable.streams import WithAck
from agent_host.errors import (
    CheckpointError,
    DeliveryFailed,
    MissingFieldKeyError,
    SealedFieldError,
)
from agent_host.runtime.checkpoint import CallRecord, RunState
from agent_host.runtime.decisions import Approve, Decision, decision_adapter
from agent_host.runtime.policy import Severity
from agent_host.runtime.runner import Failed, Paused, RunOutcome, Succeeded

__all__ = [
    "DELIVERED",
    "FINAL_PAUSE",
    "PendingPage",
    "ResumeReads",
    "RunStore",
    "decide_keys",
    "parse_cursor",
    "pause_decisions",
]

log = logging.getLogger(__name__)

FINAL_PAUSE = "final_"  # a finished run's pause id: this, then its token (its final state's)

TERMINAL_STATUS = {
    "approve": "approved",
    "reject": "rejected",
    "request_changes": "changes_requested",
    "answer": "answered",
    "expired": "expired",
}


@dataclass(frozen=True)
class PendingPage:
    requests: list[ApprovalRequest]
    next_cursor: str | None


@unavailable_on_redis_errors
class RunStore:
    def __init__(
        self,
        redis: Redis,
        keyring: KeyRing,
        router: Router,
        clock: Callable[[], float] = time.time,
        *,
        bulk_threshold: int = 0,
    ) -> None:
        """`bulk_threshold`: a pause with more approval calls than this to one channel posts
        them as one message (`approvals.bulk`); 0, the default here, posts each on its own
        (the `Host` passes COUNTERSIGN_BULK_THRESHOLD)."""
        self.redis = redis
        self.bulk_threshold = bulk_threshold
        self.keyring = keyring
        self.router = router
        self.clock = clock
        self.sealed = SealedRecords(FieldSealer(keyring))
        self._pause = redis.register_script(PAUSE)
        self._decide = redis.register_script(DECIDE)
        self._finish = redis.register_script(FINISH)
        self._create = redis.register_script(CREATE)

    # -- runs ---------------------------------------------------------------------------
    async def create_run(
        self, agent: str, input: str, requested_by: str | None, run_id: str | None = None
    ) -> str:
        """Record a new run and queue its start for a worker."""
        run_id = run_id or K.new_run_id()
        k, now = K.Keys(run_id), self.clock()
        fields = {
            "run_id": run_id,
            "agent": agent,
            "input": input,
            "requested_by": requested_by or "",
            "status": "running",
            "pause_id": "",
            "created_at": repr(now),
            "updated_at": repr(now),
        }
        await self._create(
            keys=[k.run, k.audit, k.shard.runs, k.shard.resume],
            args=[
                run_id,
                json.dumps(self.sealed.seal_run(fields)),
                int(now * 1000),
                repr(now),
                requested_by or "api",
            ],
        )
        return run_id

    async def run_info(self, run_id: str) -> RunRecord | None:
        return self.run_from(await self.redis.hgetall(K.Keys(run_id).run))

    def run_from(self, raw: dict[Any, Any]) -> RunRecord | None:
        """A run's record from its hash as read (HGETALL); None for a missing run."""
        return self._run_from(_decode_map(raw)) if raw else None

    async def save_outcome(self, outcome: RunOutcome, expected_pause_id: str, actor: str) -> bool:
        """Persist a run's outcome if nobody else did first (fenced by the pause id)."""
        if isinstance(outcome, Paused):
            return await self._save_pause(outcome, expected_pause_id, actor)
        error = outcome.error if isinstance(outcome, Failed) else ""
        output = "" if isinstance(outcome, Failed) else outcome.output
        return await self.finish(
            outcome.state.run_id,
            expected_pause_id,
            outcome.kind,
            output,
            error,
            actor,
            outcome.state,
        )

    async def finish(
        self,
        run_id: str,
        expected_pause_id: str,
        status: str,
        output: str,
        error: str,
        actor: str,
        state: RunState | None = None,
    ) -> bool:
        done = await self._finished(run_id, expected_pause_id, status, output, error, actor, state)
        return bool(done == 1)

    async def finish_answer(self, state: RunState, pause_id: str, actor: str) -> tuple[str, Any]:
        """Save a model's final answer (the response of turn `state.turns`) as the run's
        outcome, fenced as SAVE_PROGRESS fences a turn (see `finish_at_turn`)."""
        answer = Succeeded(state, state.output or "")
        return await self.finish_at_turn(answer, pause_id, actor, state.turns)

    async def finish_at_turn(
        self, outcome: Succeeded | Failed, pause_id: str, actor: str, turn: int
    ) -> tuple[str, Any]:
        """Save `outcome`, which came of turn `turn` of the pause, if no other worker saved
        that turn or a later one of the pause first: ("saved", None); ("taken", blob) with
        the progress blob to go on from instead; ("moved_on", None) when the run is no
        longer at `pause_id`."""
        error = outcome.error if isinstance(outcome, Failed) else ""
        output = "" if isinstance(outcome, Failed) else outcome.output
        state = outcome.state
        done = await self._finished(
            state.run_id, pause_id, outcome.kind, output, error, actor, state, turn=turn
        )
        if isinstance(done, list):
            return "taken", done[1]
        return ("saved" if done == 1 else "moved_on"), None

    async def _finished(
        self,
        run_id: str,
        expected_pause_id: str,
        status: str,
        output: str,
        error: str,
        actor: str,
        state: RunState | None,
        turn: int | None = None,
    ) -> Any:
        """FINISH's reply (see `scripts`)."""
        k, now = K.Keys(run_id), self.clock()
        final_id = f"{FINAL_PAUSE}{k.token}"
        blob = b""
        if state is not None:
            blob = self.keyring.encrypt(
                state.to_json().encode(), run_id=run_id, request_id=final_id
            )
        output = self.sealed.seal_run_value(run_id, "output", output)
        error = self.sealed.seal_run_value(run_id, "error", error)
        args: list[Any] = [expected_pause_id, status, output, error, blob, repr(now), actor]
        args += [final_id] if turn is None else [final_id, turn]
        return await self._finish(
            keys=[k.run, k.checkpoint, k.audit, k.shard.outbox, k.progress, k.requests],
            args=args,
        )

    async def _save_pause(self, outcome: Paused, expected_pause_id: str, actor: str) -> bool:
        state = outcome.state
        run_id, now = state.run_id, self.clock()
        k = K.Keys(run_id)
        # Request numbers come from a per-run counter, so a request id (and the pause id,
        # its pause's first request id) is never used twice, even when a call that was
        # approved then asks a question. A pause that loses its fence wastes its numbers.
        last = int(await self.redis.hincrby(k.run, "request_seq", len(outcome.pending)))
        requests = []
        for number, record in enumerate(outcome.pending, start=last - len(outcome.pending) + 1):
            route = await self.router.route(state.agent, record.tool, record.severity)
            request = _new_request(state, record, K.request_id(run_id, number), route, now)
            request.sealed_context = self.seal_context(state, record, request.request_id)
            _apply_standing_approval(request, state.standing.get(record.tool), now)
            requests.append(request)
        pause_id = requests[0].request_id
        blob = self.keyring.encrypt(state.to_json().encode(), run_id=run_id, request_id=pause_id)
        shard = k.shard
        script_keys = [
            k.run,
            k.checkpoint,
            k.requests,
            k.audit,
            shard.pending,
            shard.deadlines,
            shard.outbox,
            shard.resume,
        ]
        args: list[Any] = [expected_pause_id, pause_id, blob, repr(now), actor, len(requests)]
        for request in requests:
            request.pause_id = pause_id
        bulks = plan_bulks(requests, self.bulk_threshold)  # sets each member's bulk_id
        for request in requests:
            fields = self.sealed.seal_request(
                _stored(request.to_hash() | {"quorum": str(request.route.quorum)})
            )
            script_keys += [
                k.request(request.request_id),
                shard.pending_in(request.route.destination),
            ]
            args += [
                request.request_id,
                _score(now),
                request.route.expiry_seconds,
                json.dumps(fields),
            ]
        args.append(len(bulks))
        for bulk in bulks:
            script_keys.append(k.bulk(bulk.bulk_id))
            args += [bulk.bulk_id, json.dumps(bulk.to_hash())]
        script_keys.append(shard.ladder)  # last: the per-request keys come before it
        return bool(await self._pause(keys=script_keys, args=args))

    async def load_checkpoint(self, run_id: str, pause_id: str) -> RunState:
        """Decrypt and parse the run's checkpoint; CheckpointError subclasses if it cannot be.

        A missing checkpoint, or a key that holds another kind of value, is a CheckpointError
        too: no retry can mend it, so the worker fails the run and says why, rather than
        retrying its entry for ever."""
        try:
            blob: Any = await self.redis.get(K.Keys(run_id).checkpoint)
        except ResponseError as exc:  # WRONGTYPE: something else was written under the key
            blob = exc
        return self.open_checkpoint(run_id, pause_id, blob)

    def open_checkpoint(self, run_id: str, pause_id: str, blob: Any) -> RunState:
        """`load_checkpoint` of a blob read already (or of the error its GET answered)."""
        if isinstance(blob, ResponseError):
            raise CheckpointError(
                f"run {run_id}'s checkpoint key holds another kind of value ({blob}); the run "
                "cannot be resumed: start it again"
            ) from blob
        if blob is None:
            raise CheckpointError(
                f"run {run_id} has no checkpoint; it cannot be resumed: restore the checkpoint "
                "from a backup or start the run again"
            )
        plaintext = self.keyring.decrypt(blob, run_id=run_id, request_id=pause_id)
        return RunState.from_json(plaintext)

    async def resume_reads(self, info: RunRecord) -> ResumeReads:
        """What resuming the run's current pause reads, in one round trip: its checkpoint
        (as stored: `open_checkpoint` opens it) and the requests of the pause; the time since
        the last decision is counted for /metrics in the same trip."""
        ids = list(info.pause_requests)
        async with self.redis.pipeline(transaction=False) as pipe:
            self.queue_resume_reads(pipe, info.run_id, ids)
            self.queue_resume_latency(pipe, info)
            rows = await pipe.execute(raise_on_error=False)
        reads, counted = rows[: 1 + len(ids)], rows[1 + len(ids) :]
        for row in counted:
            if isinstance(row, Exception):
                raise row
        return self.resume_reads_from(reads)

    def queue_resume_reads(self, pipe: Pipeline, run_id: str, request_ids: list[str]) -> None:
        """`resume_reads`' reads, queued on a pipeline that reads more (the worker's first
        read, when its entry names the pause's requests): `resume_reads_from` their rows."""
        k = K.Keys(run_id)
        pipe.get(k.checkpoint)
        for rid in request_ids:
            pipe.hgetall(k.request(rid))

    def resume_reads_from(self, rows: list[Any]) -> ResumeReads:
        for row in rows[1:]:
            if isinstance(row, Exception):
                raise row  # only the checkpoint's answer is judged by `open_checkpoint`
        return ResumeReads(rows[0], [self._request_from(_decode_map(r)) for r in rows[1:] if r])

    def queue_resume_latency(self, pipe: Pipeline, info: RunRecord) -> None:
        """The time since the run's last decision, counted for /metrics."""
        if info.decided_at is not None:
            metrics = K.Keys(info.run_id).shard.metrics
            latency = max(0.0, self.clock() - info.decided_at)
            pipe.hincrbyfloat(metrics, "resume_latency_seconds_sum", latency)
            pipe.hincrby(metrics, "resume_latency_seconds_count", 1)

    async def decisions_for(self, run_id: str, pause_id: str) -> dict[str, Decision]:
        """The recorded decision of every request of a pause, by call id; SealedFieldError
        if one cannot be decrypted (a run never resumes on a decision nobody can read)."""
        info = await self.run_info(run_id)
        ids = list(info.pause_requests) if info is not None else []
        return pause_decisions(pause_id, await self.get_requests(run_id, ids))

    # -- requests -----------------------------------------------------------------------
    async def get_request(self, request_id: str) -> ApprovalRequest | None:
        try:
            k = K.Keys(request_id)
        except ValueError:
            return None
        raw = _decode_map(await self.redis.hgetall(k.request(request_id)))
        return self._request_from(raw) if raw else None

    async def get_requests(self, run_id: str, request_ids: list[str]) -> list[ApprovalRequest]:
        k = K.Keys(run_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            for rid in request_ids:
                pipe.hgetall(k.request(rid))
            rows = await pipe.execute()
        return [self._request_from(_decode_map(r)) for r in rows if r]

    async def run_with_requests(
        self, run_id: str
    ) -> tuple[RunRecord | None, list[ApprovalRequest]]:
        """`run_info` and `run_requests` in two round trips instead of three."""
        k = K.Keys(run_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.run)
            pipe.lrange(k.requests, 0, -1)
            raw, ids = await pipe.execute()
        info = self._run_from(_decode_map(raw)) if raw else None
        return info, await self.get_requests(run_id, [as_text(i) for i in ids])

    async def run_and_requests(
        self, run_id: str, request_ids: list[str]
    ) -> tuple[RunRecord | None, list[ApprovalRequest]]:
        """`run_with_requests` when the request ids are known already: one round trip."""
        k = K.Keys(run_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.run)
            for rid in request_ids:
                pipe.hgetall(k.request(rid))
            raw, *rows = await pipe.execute()
        info = self._run_from(_decode_map(raw)) if raw else None
        return info, [self._request_from(_decode_map(r)) for r in rows if r]

    async def run_requests(self, run_id: str) -> list[ApprovalRequest]:
        ids = [as_text(i) for i in await self.redis.lrange(K.Keys(run_id).requests, 0, -1)]
        return await self.get_requests(run_id, ids)

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        current: ApprovalRequest | None = None,
        completes_quorum: bool = False,
        counts_as: str = "",
    ) -> DecideResult:
        """The compare-and-set: the first valid decision (or the quorum) wins, atomically.

        Only the approval service calls this (`approvals.service`): it decides who may
        decide. `current`, when the caller has just read the request, saves a round trip;
        the script checks the request's state itself, so a stale copy changes nothing.
        `counts_as`: someone else whose vote an approval also is (a webhook caller's
        claim, case-folded): refused if theirs is in, and theirs from then on.
        """
        if not _is_request_id(request_id):
            return DecideResult("not_found")
        if current is None or current.request_id != request_id:
            current = await self.get_request(request_id)
        if current is None:
            return DecideResult("not_found")
        reply = await self._decide(
            keys=decide_keys(request_id, current.route.destination),
            args=[
                request_id,
                decision.kind,
                TERMINAL_STATUS[decision.kind],
                self.sealed.seal_decision(
                    current.run_id, request_id, decision_adapter.dump_json(decision).decode()
                ),
                decision.decided_by,
                decision.call_hash or "",
                "1" if completes_quorum else "0",
                counts_as,
            ],
        )
        kind, extra = as_text(reply[0]), reply[1]
        # The script's second value: resume queued (decided) or approvals so far (progress);
        # a decision or vote recorded also returns the request's hash as it now is.
        if len(reply) > 2:
            updated: ApprovalRequest | None = self._request_from(_decode_pairs(reply[2]))
        else:
            updated = await self.get_request(request_id)
        return DecideResult(
            kind,  # type: ignore[arg-type]
            updated,
            resume_queued=kind == "decided" and bool(extra),
            approvals=int(extra) if kind == "progress" else 0,
        )

    async def set_message_ref(self, request_id: str, channel: str, ts: str) -> None:
        k = K.Keys(request_id)
        await self.redis.hset(
            k.request(request_id), mapping={"message_channel": channel, "message_ts": ts}
        )

    async def list_pending(
        self, destination: str | None = None, cursor: str | None = None, limit: int = 20
    ) -> PendingPage:
        """Newest first, from the shards' indexes (never SCAN), merged.

        The cursor is `<score>:<request id>` of the last request shown. Requests of one pause
        share a score, and Redis orders equal scores by member (reversed, here), so the next
        page is: members tied at that score that sort before the cursor's id, then everything
        with a lower score. This holds even if the cursor's request was decided meanwhile.
        """
        indexes = [
            s.pending if destination is None else s.pending_in(destination) for s in K.shards()
        ]
        after = parse_cursor(cursor) if cursor else None
        rows: list[tuple[int, str]] = []
        for index in indexes:
            rows += await self._page_of(index, after, limit)
        rows.sort(reverse=True)  # newest first; ties by member, as Redis orders them
        page = rows[:limit]
        found = [r for r in await self._requests_by_id([rid for _, rid in page]) if r is not None]
        next_cursor = f"{page[-1][0]}:{page[-1][1]}" if len(rows) > limit else None
        return PendingPage(found, next_cursor)

    async def _page_of(
        self, index: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str]]:
        """Up to limit+1 entries of one shard's index that come after the cursor."""
        rows: list[tuple[int, str]] = []
        top = "+inf"
        if after is not None:
            score, member = after
            tied: list[Any] = await self.redis.zrange(index, score, score, desc=True, byscore=True)
            rows = [(score, as_text(m)) for m in tied if as_text(m) < member]
            top = f"({score}"
        if len(rows) <= limit:
            more: list[Any] = await self.redis.zrange(
                index,
                top,
                "-inf",
                desc=True,
                byscore=True,
                offset=0,
                num=limit + 1,
                withscores=True,
            )
            rows += [(int(s), as_text(m)) for m, s in more]
        return rows

    async def requests_by_id(self, request_ids: list[str]) -> list[ApprovalRequest | None]:
        """Requests of any runs, in one round trip (None for an id not found)."""
        valid = [rid for rid in request_ids if _is_request_id(rid)]
        found = dict(zip(valid, await self._requests_by_id(valid), strict=True))
        return [found.get(rid) for rid in request_ids]

    async def _requests_by_id(self, request_ids: list[str]) -> list[ApprovalRequest | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for rid in request_ids:
                pipe.hgetall(K.Keys(rid).request(rid))
            rows = await pipe.execute()
        return [self._request_from(_decode_map(r)) if r else None for r in rows]

    async def pending_count(self) -> int:
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in K.shards():
                pipe.zcard(shard.pending)
            counts = await pipe.execute()
        return sum(int(c) for c in counts)

    async def audit(self, run_id: str) -> list[dict[str, str]]:
        entries: Any = await self.redis.xrange(K.Keys(run_id).audit)
        return [
            self.sealed.open_audit_entry(run_id, _decode_map(fields)) | {"id": as_text(entry_id)}
            for entry_id, fields in entries
        ]

    def _run_from(self, raw: dict[str, str]) -> RunRecord:
        opened, unreadable, keys_missing = self.sealed.open_run(raw)
        record = RunRecord.from_hash(opened)
        if not unreadable:
            return record
        return replace(record, unreadable=unreadable, keys_missing=keys_missing)

    def _request_from(self, raw: dict[str, str]) -> ApprovalRequest:
        opened, unreadable, keys_missing = self.sealed.open_request(raw)
        request = ApprovalRequest.from_hash(opened)
        request.unreadable, request.keys_missing = unreadable, keys_missing
        return request

    @staticmethod
    def pending_cursor(request: ApprovalRequest) -> str:
        """The `list_pending` cursor that continues right after `request` (a pending index
        scores a request by the time it was created, as PAUSE writes it)."""
        return f"{_score(request.created_at)}:{request.request_id}"

    # -- delivery to chat ---------------------------------------------------------------
    async def count_delivered(self, run_or_request_id: str) -> None:
        """One notification the chat side accepted, for /metrics."""
        await self.redis.hincrby(K.Keys(run_or_request_id).shard.metrics, f"{DELIVERED}ok", 1)

    def delivered_with_ack(self, run_or_request_id: str) -> WithAck:
        """`count_delivered`, sent with the outbox entry's acknowledgement."""

        async def count(pipe: Pipeline) -> None:
            pipe.hincrby(K.Keys(run_or_request_id).shard.metrics, f"{DELIVERED}ok", 1)

        return count

    async def record_delivery_failure(
        self,
        run_or_request_id: str,
        failure: DeliveryFailed,
        notification: str,
        *,
        undeliverable: bool = False,
        dead_letter: dict[str, str] | None = None,
    ) -> None:
        """A notification the chat side refused for good, in one MULTI on the run's hash tag:
        an audit entry (`undeliverable` for a request that could not be posted, else
        `delivery_failed`), the failure counter, and, for a post, the request's
        `undeliverable` mark and the outbox entry copied to the shard's dead-letter stream."""
        k = K.Keys(run_or_request_id)
        request_id = run_or_request_id if run_or_request_id.startswith("req_") else ""
        at = repr(self.clock())
        entry = {
            "at": at,
            "actor": "countersign",
            "event": "undeliverable" if undeliverable else "delivery_failed",
            "notification": notification,
            "channel": failure.channel,
            "error": failure.code,
        } | ({"request_id": request_id} if request_id else {})
        async with self.redis.pipeline(transaction=True) as pipe:
            if undeliverable and request_id:
                pipe.hset(
                    k.request(request_id),
                    mapping={"delivery": "undeliverable", "delivery_error": failure.code},
                )
            pipe.xadd(k.audit, entry)  # type: ignore[arg-type]
            if dead_letter is not None:
                letter = dead_letter | {"error": failure.code, "channel": failure.channel, "at": at}
                pipe.xadd(
                    k.shard.deadletter,
                    letter,  # type: ignore[arg-type]
                    maxlen=DEAD_LETTERS_KEPT,
                    approximate=True,
                )
            pipe.hincrby(k.shard.metrics, f"{DELIVERED}{delivery_result(failure.code)}", 1)
            await pipe.execute()

    # -- what a reviewer decides with --------------------------------------------------
    def seal_context(self, state: RunState, record: CallRecord, request_id: str) -> str:
        """The request's context (`approvals.context`), encrypted like the checkpoint it is
        taken from and bound to its run and request: a Redis dump shows no transcript."""
        plain = context_for(state, record).to_json().encode()
        blob = self.keyring.encrypt(plain, run_id=state.run_id, request_id=context_aad(request_id))
        return base64.b64encode(blob).decode("ascii")

    def open_context(self, request: ApprovalRequest) -> ApprovalRequest:
        """`request` with its context opened (None when it has none or it cannot be read:
        the message is then shown without it, never withheld)."""
        context = None
        if request.sealed_context:
            try:
                blob = base64.b64decode(request.sealed_context, validate=True)
                plain = self.keyring.decrypt(
                    blob, run_id=request.run_id, request_id=context_aad(request.request_id)
                )
                context = CallContext.from_json(plain)
            except (binascii.Error, ValueError, CheckpointError) as exc:
                log.warning("request %s: its context cannot be read: %s", request.request_id, exc)
        request.context = context
        return request

    # -- oldest first, for a reviewer's list ---------------------------------------------
    async def oldest_pending(self, after: str | None, limit: int) -> PendingPage:
        """Pending requests of every channel, oldest first: up to `limit` after the cursor
        `after` (`<score>:<request id>`, as `pending_cursor` makes), and the next cursor."""
        start = parse_cursor(after) if after else None
        rows: list[tuple[int, str]] = []
        for shard in K.shards():
            rows += await self._oldest_of(shard.pending, start, limit)
        rows.sort()
        page = rows[:limit]
        found = [r for r in await self._requests_by_id([rid for _, rid in page]) if r is not None]
        next_cursor = f"{page[-1][0]}:{page[-1][1]}" if len(rows) > limit else None
        return PendingPage(found, next_cursor)

    async def _oldest_of(
        self, index: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str]]:
        """Up to limit+1 entries of one shard's index after the cursor, ascending."""
        rows: list[tuple[int, str]] = []
        bottom = "-inf"
        if after is not None:
            score, member = after
            tied: list[Any] = await self.redis.zrange(index, score, score, byscore=True)
            rows = [(score, as_text(m)) for m in tied if as_text(m) > member]
            bottom = f"({score}"
        if len(rows) <= limit:
            more: list[Any] = await self.redis.zrange(
                index, bottom, "+inf", byscore=True, offset=0, num=limit + 1, withscores=True
            )
            rows += [(int(s), as_text(m)) for m, s in more]
        return rows


@dataclass(frozen=True)
class ResumeReads:
    """What `RunStore.resume_reads` read: the checkpoint as stored (bytes, None when
    missing, or the error its GET answered) and the pause's requests."""

    checkpoint: Any
    requests: list[ApprovalRequest]


def pause_decisions(pause_id: str, requests: list[ApprovalRequest]) -> dict[str, Decision]:
    """The recorded decision of each of `requests` that belongs to the pause, by call id;
    SealedFieldError if one cannot be decrypted (a run never resumes on a decision nobody
    can read), MissingFieldKeyError when only its key is missing here."""
    decisions: dict[str, Decision] = {}
    for request in requests:
        if request.pause_id != pause_id:
            continue
        if reason := request.unreadable.get("decision"):
            # Only its key missing: the run waits for a worker that has it.
            error = MissingFieldKeyError if "decision" in request.keys_missing else SealedFieldError
            raise error(
                f"the decision on request {request.request_id} could not be decrypted "
                f"({reason}), so the run was not resumed on it"
            )
        if request.decision is not None:
            decisions[request.call_id] = request.decision
    return decisions


def with_quorum_comments(
    decisions: dict[str, Decision],
    requests: list[ApprovalRequest],
    audit: list[dict[str, str]],
) -> dict[str, Decision]:
    """`decisions`, each approval that completed a quorum carrying the comments of the
    approvals before it (their audit entries repeat each vote's decision), so that the
    model reads every approver's words, not only the last one's."""
    by_request = {r.request_id: r.call_id for r in requests if r.route.quorum > 1}
    earlier: dict[str, list[tuple[str, str]]] = {}
    for entry in audit:
        call_id = by_request.get(entry.get("request_id", ""))
        if call_id is None or entry.get("event") != "approval":
            continue
        try:
            vote = decision_adapter.validate_json(entry.get("decision", ""))
        except ValueError:  # unreadable (its mark): said so, not left out
            vote = Approve(comment="[this approver's comment could not be read]")
        if isinstance(vote, Approve) and vote.comment.strip():
            earlier.setdefault(call_id, []).append((entry.get("actor", ""), vote.comment))
    return {
        call_id: decision.model_copy(update={"earlier_comments": earlier[call_id]})
        if isinstance(decision, Approve) and call_id in earlier
        else decision
        for call_id, decision in decisions.items()
    }


# Fields of a new request's hash left out while they hold what reading them absent gives
# (`ApprovalRequest.from_hash`, and the scripts: DECIDE counts missing approvals as none,
# the ladder missing escalations as none). In Redis's hash encoding for values this size
# each field costs some 50 bytes besides its name and value; these are 15 of its 33.
_ABSENT_MEANS = {
    "question": "",
    "decision": "",
    "decided_by": "",
    "decided_at": "",
    "message_channel": "",
    "message_ts": "",
    "delivery": "",
    "delivery_error": "",
    "origin": "",
    "callback_url": "",
    "reminder_ts": "",
    "sealed_context": "",
    "approvals": "[]",
    "escalations": "[]",
    "escalation_notes": "[]",
    "editable": "[]",
}


def _stored(fields: dict[str, str]) -> dict[str, str]:
    """A new request's hash without the fields that would only repeat their default."""
    return {k: v for k, v in fields.items() if _ABSENT_MEANS.get(k) != v}


def _new_request(
    state: RunState, record: CallRecord, request_id: str, route: Route, now: float
) -> ApprovalRequest:
    """The request that asks about one gated call (its deadline is set again by PAUSE, from
    Redis's clock)."""
    return ApprovalRequest(
        request_id=request_id,
        run_id=state.run_id,
        call_id=record.call_id,
        agent=state.agent,
        tool=record.tool,
        arguments=record.arguments,
        call_hash=record.call_hash,
        kind="question" if record.gate == "question" else "approval",
        reason=record.reason,
        severity=record.severity,
        requested_by=state.requested_by or "",
        created_at=now,
        expires_at=now + route.expiry_seconds,
        route=route,
        allow_always=record.allow_always and route.allows_standing_approval,
        question=record.question or "",
        editable=tuple(record.editable),
    )


def _apply_standing_approval(
    request: ApprovalRequest, standing: Approve | None, now: float
) -> None:
    """Record `request` as approved if a standing approval ("approve for this run") covers
    it: the same route, still to the same channel (its members are who may decide), the
    same or a lower severity, and a route where one person may decide alone. Anything else
    is asked again (invariant 14, docs/ARCHITECTURE.md)."""
    if standing is None or request.kind != "approval" or not request.allow_always:
        return  # (allow_always: the call's policy, and its route, allow approving for the run)
    route = request.route
    if not route.allows_standing_approval or route.route_id != standing.route_id:
        return
    if route.destination != standing.destination:  # the route moved to another channel
        return
    if standing.severity.lower() not in list(Severity):
        return  # a scope of unknown severity covers nothing
    if _rank(request.severity) > _rank(standing.severity):
        return
    request.status = RequestStatus.APPROVED
    request.decision = Approve(
        decided_by=standing.decided_by,
        call_hash=request.call_hash,
        via="standing",
        standing_of=standing.standing_of,
    )
    request.decided_by = standing.decided_by
    request.decided_at = now
    request.approvals = [standing.decided_by]


def _rank(severity: str) -> int:
    # unknown: above every known severity, so never covered
    return Severity.rank_of(severity, unknown=len(Severity))


# Counters of chat deliveries in the shards' metrics hashes: `deliveries:ok`, and
# `deliveries:failed:<error>` for notifications the chat side refused for good.
DELIVERED = "deliveries:"
DEAD_LETTERS_KEPT = 10_000  # per shard; older dead letters are trimmed, newest kept


def delivery_result(error: str) -> str:
    """`failed:<error>`, the error reduced to what a Prometheus label value may safely hold."""
    return "failed:" + (re.sub(r"[^a-z0-9_]", "_", error.lower())[:64] or "unknown")


def context_aad(request_id: str) -> str:
    """What a request's sealed context is bound to besides its run: never the same as a
    checkpoint's (a pause id is its first request id), so neither opens as the other."""
    return f"{request_id}/context"


def _is_request_id(value: str) -> bool:
    try:
        K.token_of(value)
    except ValueError:
        return False
    return True


def decide_keys(request_id: str, destination: str) -> list[str]:
    """The keys of the DECIDE script for one request, in its order."""
    k = K.Keys(request_id)
    return [
        k.request(request_id),
        k.approvers(request_id),
        k.run,
        k.audit,
        k.shard.pending,
        k.shard.deadlines,
        k.shard.resume,
        k.shard.outbox,
        k.shard.metrics,
        k.shard.pending_in(destination),
        k.shard.callbacks,
        k.shard.ladder,
    ]


_CURSOR = re.compile(r"^([0-9]{1,18}):(req_[0-9a-f]{8,64}_[0-9]{1,6})$")


def parse_cursor(cursor: str) -> tuple[int, str]:
    """`<score>:<request id>`; ValueError (with what to do) for anything else."""
    match = _CURSOR.fullmatch(cursor)
    if not match:
        raise ValueError("the cursor is malformed; pass back next_cursor from the previous page")
    return int(match.group(1)), match.group(2)


def _score(at: float) -> int:
    return int(at * 1000)


def _decode_map(raw: dict[Any, Any]) -> dict[str, str]:
    return {as_text(k): as_text(v) for k, v in raw.items()}


def _decode_pairs(flat: list[Any]) -> dict[str, str]:
    """A hash as a script returns it (HGETALL's flat list of names and values)."""
    return {as_text(flat[i]): as_text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
