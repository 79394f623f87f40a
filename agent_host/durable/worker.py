"""Resume workers: start queued runs and resume fully decided ones, in any process.

A resume entry is acknowledged only after the run's new state is saved. Saving is fenced by
the pause id, so a redelivered or reclaimed entry whose run already moved on changes
nothing, and the ledger keeps every tool call at most once across such retries.

Every model response is saved (as the run's progress, bound to the pause being resumed)
before any of its calls runs. A redelivered or reclaimed entry whose run has progress
continues from it and never asks the model that turn again: a model asked twice may
answer with other calls or fresh call ids, which the ledger could not tell apart.

An entry whose resume fails POISON_AFTER times with an error of countersign's own fails
its run, saying so (the requester reads it in the thread), instead of leaving the run
"resuming" for ever; Redis being away is waited out however long it lasts.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from redis.asyncio.client import Pipeline

from agent_host.approvals import RunRecord, RunStatus
from agent_host.durable import keys as K
from agent_host.durable.crashpoints import NEVER, CrashPoints
from agent_host.durable.foreground import Foreground
from agent_host.durable.poison import POISON_AFTER, TRANSIENT, NeverFinished
from agent_host.durable.progress import ProgressStore, RedisTurnJournal
from agent_host.durable.redis_ledger import RedisLedger
from agent_host.durable.store import (
    FINAL_PAUSE,
    ResumeReads,
    RunStore,
    pause_decisions,
    with_quorum_comments,
)
from agent_host.durable.streams import (
    ShardedConsumer,
    StreamConsumer,
    WithAck,
    send_now,
    together,
)
from agent_host.durable.suspects import SuspectGate
from agent_host.errors import (
    CheckpointDecryptError,
    CheckpointError,
    CountersignError,
    MissingFieldKeyError,
    MissingKeyError,
    RetryLater,
    SealedFieldError,
    StoreError,
)
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.journal import RunMovedOn
from agent_host.runtime.ledger import with_recorded
from agent_host.runtime.runner import Paused, Runner, RunOutcome

__all__ = ["ResumeWorker"]

RAN = ("executed", "unknown_outcome")  # outcomes of calls that ran, or may have
RAN_BEFORE = (
    ". The calls it made before it stopped are in its final state (GET /api/v1/runs/{run_id}):"
    " check them before starting it again, as a new run makes its calls anew"
)

log = logging.getLogger(__name__)


class ResumeWorker:
    def __init__(
        self,
        store: RunStore,
        runner: Runner,
        consumer: str,
        *,
        idle_ms: int = 30_000,
        crash: CrashPoints = NEVER,
        foreground: Foreground | None = None,
        gate: SuspectGate | None = None,
    ):
        self.store, self.crash = store, crash
        self.runner = runner
        self.progress = ProgressStore(store.redis, store.keyring)
        self.ledger = RedisLedger(store.redis, store.keyring)  # read when a run is given up
        shared_gate = gate if gate is not None else SuspectGate()  # its shards share it
        self.consumer = ShardedConsumer(
            [
                StreamConsumer(
                    store.redis,
                    shard.resume,
                    K.RESUME_GROUP,
                    consumer,
                    self.handle_entry,
                    idle_ms=idle_ms,
                    # Only the run it is about to resume: the next one of the shard stays in
                    # the stream for another worker, instead of waiting behind a slow tool.
                    count=1,
                    foreground=foreground,
                    give_up=self._give_up,
                    gate=shared_gate,
                )
                for shard in K.shards()
            ]
        )

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        """Handle one entry to its end (the consumer acknowledges it; called directly, it is
        not acknowledged)."""
        await send_now(self.store.redis, await self.handle_entry(entry_id, fields))

    async def handle_entry(self, entry_id: str, fields: dict[str, str]) -> WithAck | None:
        """`handle`, but what is written last after a new pause (dropping the saved progress)
        is handed back to be sent with the entry's acknowledgement, in one round trip. A
        finished run's progress went with its outcome, so only the acknowledgement is left."""
        run_id, pause_id = fields.get("run_id", ""), fields.get("pause_id", "")
        named = _named_requests(fields)
        info, saved, rows = await self.progress.with_run(self.store, run_id, pause_id, named)
        if (
            info is None
            or info.status.terminal
            or info.pause_id != pause_id
            or pause_id.startswith(FINAL_PAUSE)  # a finished run's state: nothing resumes it
        ):
            log.info("resume entry %s for run %s is stale; skipped", entry_id, run_id)
            return None
        read: ResumeReads | None = None  # read with the run, when the entry named them all
        if rows is not None and named == list(info.pause_requests):
            read = self.store.resume_reads_from(rows)
        start = fields.get("type") == "start"
        if start and info.status != RunStatus.RUNNING:
            return None

        def before_outcome() -> None:  # the resumed run's next state is about to be saved
            if not start:
                self.crash.reached("after_tool_ran")

        # A final answer is saved by the journal as the run's outcome, in one step.
        journal = self.progress.journal(run_id, pause_id, self.store, before_outcome)
        try:
            if (progress := self._progress(run_id, pause_id, saved)) is not None:
                log.info("run %s: replaying its saved turn %d", run_id, progress.turns)
                outcome = await self.runner.replay(progress, journal=journal)
            elif start:
                if reason := info.unreadable.get("input"):
                    missing = "input" in info.keys_missing  # then it waits for the key
                    raise (MissingFieldKeyError if missing else SealedFieldError)(
                        f"the run's input could not be decrypted ({reason}), so it was not started"
                    )
                outcome = await self.runner.run(
                    info.agent,
                    info.input,
                    run_id=run_id,
                    requested_by=info.requested_by or None,
                    journal=journal,
                )
            else:
                resumed = await self._resume(run_id, pause_id, info, journal, read)
                if resumed is None:
                    return None
                outcome = resumed
            # An outcome the runner came to on its own (a model or framework failure, a
            # hosted agent's answer) is that of the turn after its state's: a worker behind
            # another on this pause gives way to a turn that one saved first, as for a
            # response (so a call that worker ran is never left out), and goes on from it.
            while not journal.finished and not isinstance(outcome, Paused):
                before_outcome()
                turn = outcome.state.turns + 1
                kind, taken = await self.store.finish_at_turn(outcome, pause_id, "worker", turn)
                if kind != "taken":
                    break
                state = self.progress.went_on(run_id, pause_id, outcome.state, kind, taken)
                outcome = await self.runner.replay(state, journal=journal)
        except RunMovedOn as exc:
            log.info("resume entry %s: %s", entry_id, exc)
            return None
        except StoreError:
            raise  # Redis-side: the entry stays pending and is retried
        except MissingKeyError as exc:
            # This process lacks a key another has (a deploy with a ring missing one): the
            # run is not damaged, so it waits, pending, for a worker that holds the key.
            log.error("run %s waits, not resumed: %s", run_id, exc)
            raise RetryLater(f"run {run_id} waits for its key") from exc
        except CountersignError as exc:
            await self._fail(
                run_id, pause_id, str(exc), await self._as_far_as_known(run_id, pause_id)
            )
            return None
        counted = self._resume_latency(info) if read is not None else None
        if not isinstance(outcome, Paused):
            return counted  # FINISH dropped the saved turn with the outcome
        before_outcome()
        await self.store.save_outcome(outcome, pause_id, "worker")
        return together(self.progress.clear_with_ack(run_id, pause_id), counted)

    def _resume_latency(self, info: RunRecord) -> WithAck:
        """The time since the decision, counted for /metrics with the acknowledgement (a
        resume that read its requests with the run; `resume_reads` counts it otherwise)."""

        async def count(pipe: Pipeline) -> None:
            self.store.queue_resume_latency(pipe, info)

        return count

    def _progress(self, run_id: str, pause_id: str, saved: Any) -> RunState | None:
        try:
            return self.progress.open_saved(run_id, pause_id, saved)
        except MissingKeyError:
            raise  # not damage: it waits for the key
        except CheckpointDecryptError as exc:
            raise CheckpointDecryptError(
                f"the run's saved progress could not be decrypted or verified, so it was not "
                f"replayed: {exc}"
            ) from exc

    async def _resume(
        self,
        run_id: str,
        pause_id: str,
        info: RunRecord,
        journal: RedisTurnJournal,
        read: ResumeReads | None,
    ) -> RunOutcome | None:
        reads = read or await self.store.resume_reads(info)  # one round trip
        try:
            state = self.store.open_checkpoint(run_id, pause_id, reads.checkpoint)
        except MissingKeyError:
            raise  # not damage: it waits for the key
        except CheckpointDecryptError as exc:
            reason = f"checkpoint could not be decrypted or verified, so it was not resumed: {exc}"
            await self._fail(run_id, pause_id, reason)
            return None
        except CheckpointError as exc:
            await self._fail(run_id, pause_id, str(exc))
            return None
        decisions = pause_decisions(pause_id, reads.requests)
        if any(r.route.quorum > 1 for r in reads.requests if r.pause_id == pause_id):
            audit = await self.store.audit(run_id)  # the votes' comments: the model reads them
            decisions = with_quorum_comments(decisions, reads.requests, audit)
        # The state was just read for this resume: nobody else holds it, so no copy.
        return await self.runner.resume(state, decisions, journal=journal, copy=False)

    async def _give_up(self, entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        """The entry failed POISON_AFTER times with an error of countersign's own, or every
        worker that took it stopped before it was done (`NeverFinished`): its run fails,
        saying so (a run that moved on meanwhile is left as it is)."""
        run_id = fields.get("run_id", "")
        if not K.is_run_id(run_id):  # nothing to fail: written by hand, not by countersign
            log.error("resume entry %s names no run (%r); dropped", entry_id, run_id)
            return
        # Only the error's type: its text may quote arguments, and the run's error is
        # shown in the thread. The worker's log has it whole.
        if isinstance(exc, NeverFinished):
            what = (
                f"stopped the worker handling it {exc.attempts} times (each was killed or "
                "crashed before it was done)"
            )
        else:
            what = (
                f"failed {POISON_AFTER} times with an error of countersign's own "
                f"({type(exc).__name__})"
            )
        reason = (
            f"resuming the run {what}, so it was stopped rather than retried for ever; "
            "nothing more of it runs. The worker's log has the details"
        )
        pause_id = fields.get("pause_id", "")
        await self._fail(run_id, pause_id, reason, await self._as_far_as_known(run_id, pause_id))

    async def _as_far_as_known(self, run_id: str, pause_id: str) -> RunState | None:
        """The run's last saved state (its progress, else the checkpoint of `pause_id` with
        the pause's decisions, a reviewer's edit included) with what the ledger recorded of
        its calls since; None when it cannot be read."""
        try:
            state = await self.progress.load(run_id, pause_id)
            if state is None:
                state = await self.store.load_checkpoint(run_id, pause_id)
                try:
                    decisions = await self.store.decisions_for(run_id, pause_id)
                except SealedFieldError:  # shown as the checkpoint has them
                    decisions = {}
                for record in state.calls:  # the checkpoint was taken before they came
                    if record.decision is None and record.outcome is None:
                        record.decision = decisions.get(record.call_id)
            return with_recorded(state, await self.ledger.recorded(run_id))
        except TRANSIENT:
            raise
        except Exception as exc:  # the run fails all the same, without a final state
            log.warning("run %s: its state could not be read to fail it (%r)", run_id, exc)
            return None

    async def _fail(
        self, run_id: str, pause_id: str, reason: str, state: RunState | None = None
    ) -> None:
        """The run fails saying why, with `state` as its final state when known, itself
        failed (its calls' decisions, unchecked, are never applied); when calls of it ran,
        the reason says where to see them (a new run would make them anew)."""
        if state is not None and any(c.outcome in RAN for c in state.calls):
            reason = reason.rstrip(". ") + RAN_BEFORE.format(run_id=run_id)
        if state is not None:
            state.status, state.error = "failed", reason
        await self.store.finish(run_id, pause_id, "failed", "", reason, "worker", state)  # and
        # the saved turn goes with it (a run that moved on keeps its own)


def _named_requests(fields: dict[str, str]) -> list[str] | None:
    """The request ids a resume entry names (DECIDE and PAUSE write them), or None."""
    try:
        ids = json.loads(fields["requests"])
    except (KeyError, ValueError):
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return None
    return ids
