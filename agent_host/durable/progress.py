"""The turn journal in Redis: a run's progress within one pause, encrypted like checkpoints.

The progress is bound to the pause being resumed (`""` for a run's start): its blob's
associated data names the run and `<pause id or "start">#progress`, and the hash records
the pause id, so progress of one pause is never taken for another's. It is saved by
SAVE_PROGRESS (fenced by the run's current pause id), replayed by a worker that takes the
same resume entry over, and dropped once the pause's outcome is saved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline

from agent_host.approvals import RunRecord
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing
from agent_host.durable.keys import Keys
from agent_host.durable.scripts import CLEAR_PROGRESS, SAVE_PROGRESS
from agent_host.durable.store import RunStore
from agent_host.durable.streams import WithAck
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.journal import RunMovedOn

__all__ = ["ProgressStore", "RedisTurnJournal", "progress_aad"]

log = logging.getLogger(__name__)


def progress_aad(pause_id: str) -> str:
    """What a run's saved progress is sealed to besides the run: the pause it resumes."""
    return f"{pause_id or 'start'}#progress"


class ProgressStore:
    """Saved progress of runs; built once per worker process."""

    def __init__(self, redis: Redis, keyring: KeyRing) -> None:
        self.redis, self.keyring = redis, keyring
        self._save = redis.register_script(SAVE_PROGRESS)
        self._clear = redis.register_script(CLEAR_PROGRESS)

    def journal(
        self,
        run_id: str,
        pause_id: str,
        outcomes: RunStore | None = None,
        before_outcome: Callable[[], None] = lambda: None,
    ) -> RedisTurnJournal:
        return RedisTurnJournal(self, run_id, pause_id, outcomes, before_outcome)

    async def load(self, run_id: str, pause_id: str) -> RunState | None:
        """The progress saved while resuming `pause_id`, if any (CheckpointError if damaged)."""
        saved: Any = await self.redis.hmget(Keys(run_id).progress, ["pause_id", "blob"])
        return self.open_saved(run_id, pause_id, saved)

    async def with_run(
        self, store: RunStore, run_id: str, pause_id: str, request_ids: list[str] | None = None
    ) -> tuple[RunRecord | None, Any, list[Any] | None]:
        """The run's record and its saved progress as stored (`open_saved` opens it), in
        one round trip: what a worker reads first for each resume entry. Given the pause's
        request ids (its entry names them), `RunStore.resume_reads`' rows come in the same
        trip (`resume_reads_from` reads them); else None."""
        k = Keys(run_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.run)
            pipe.hmget(k.progress, ["pause_id", "blob"])
            if request_ids is not None:
                store.queue_resume_reads(pipe, run_id, request_ids)
            rows = await pipe.execute(raise_on_error=False)
        raw, saved, *resume_rows = rows
        for row in (raw, saved):
            if isinstance(row, Exception):
                raise row
        return store.run_from(raw), saved, resume_rows if request_ids is not None else None

    def open_saved(self, run_id: str, pause_id: str, saved: Any) -> RunState | None:
        """The progress in `saved` (HMGET of pause_id and blob) if it is `pause_id`'s."""
        owner, blob = saved
        if owner is None or blob is None or as_text(owner) != pause_id:
            return None
        return self._open(run_id, pause_id, blob)

    async def save(self, run_id: str, pause_id: str, state: RunState) -> RunState:
        blob = self.keyring.encrypt(
            state.to_json().encode(), run_id=run_id, request_id=progress_aad(pause_id)
        )
        k = Keys(run_id)
        kind, taken = await self._save(keys=[k.run, k.progress], args=[pause_id, state.turns, blob])
        return self.went_on(run_id, pause_id, state, as_text(kind), taken)

    def went_on(
        self, run_id: str, pause_id: str, state: RunState, outcome: str, taken: Any
    ) -> RunState:
        """The state to go on from after saving `state` came back as `outcome` ("saved",
        "taken" with the blob saved first, or "moved_on": RunMovedOn)."""
        if outcome == "saved":
            return state
        if outcome == "taken":
            log.info(
                "run %s turn %d: continuing from the response saved first", run_id, state.turns
            )
            return self._open(run_id, pause_id, taken)
        raise RunMovedOn(
            f"run {run_id} is no longer at pause {pause_id or 'start'!r}; another worker "
            "advanced it, so this one stops without running anything more"
        )

    async def clear(self, run_id: str, pause_id: str) -> None:
        await self._clear(keys=[Keys(run_id).progress], args=[pause_id])

    def clear_with_ack(self, run_id: str, pause_id: str) -> WithAck:
        """`clear`, sent with the resume entry's acknowledgement (after the outcome was
        saved, as before; one round trip for both)."""

        async def clear(pipe: Pipeline) -> None:
            if isinstance(pipe, ClusterPipeline):  # which runs no script: on its own, first
                await self.clear(run_id, pause_id)
            else:
                await self._clear(keys=[Keys(run_id).progress], args=[pause_id], client=pipe)

        return clear

    def _open(self, run_id: str, pause_id: str, blob: Any) -> RunState:
        plain = self.keyring.decrypt(blob, run_id=run_id, request_id=progress_aad(pause_id))
        return RunState.from_json(plain)


class RedisTurnJournal:
    """The journal of one resume (or start) entry: saves progress under its pause id.

    Given the run store, it saves a final answer (a response with no call) as the run's
    outcome instead, in the one step that would have followed: `finished` says it did,
    and `before_outcome` is called first. A worker that dies before that step asks the
    model again for the answer, as it would for any response it had not saved; once the
    step is taken the run is over and nothing asks again."""

    def __init__(
        self,
        progress: ProgressStore,
        run_id: str,
        pause_id: str,
        outcomes: RunStore | None = None,
        before_outcome: Callable[[], None] = lambda: None,
    ) -> None:
        self.progress, self.run_id, self.pause_id = progress, run_id, pause_id
        self.outcomes, self.before_outcome = outcomes, before_outcome
        self.finished = False

    async def planned(self, state: RunState) -> RunState:
        if self.outcomes is None or state.status != "succeeded":
            return await self.progress.save(self.run_id, self.pause_id, state)
        self.before_outcome()
        outcome, taken = await self.outcomes.finish_answer(state, self.pause_id, "worker")
        self.finished = outcome == "saved"
        return self.progress.went_on(self.run_id, self.pause_id, state, outcome, taken)
