"""Resume workers: start queued runs and resume fully decided ones, in any process.

A resume entry is acknowledged only after the run's new state is saved. Saving is fenced by
the pause id, so a redelivered or reclaimed entry whose run already moved on changes
nothing, and the ledger keeps every tool call at most once across such retries.
"""

from __future__ import annotations

import logging

from . import keys as K
from .approvals import RunRecord, RunStatus
from .crashpoints import NEVER, CrashPoints
from .errors import CheckpointDecryptError, CheckpointError, CountersignError
from .runner import Runner
from .store import RunStore
from .streams import ShardedConsumer, StreamConsumer

__all__ = ["ResumeWorker"]

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
    ):
        self.store, self.crash = store, crash
        self.runner = runner
        self.consumer = ShardedConsumer(
            [
                StreamConsumer(
                    store.redis,
                    shard.resume,
                    K.RESUME_GROUP,
                    consumer,
                    self.handle,
                    idle_ms=idle_ms,
                )
                for shard in K.shards()
            ]
        )

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        run_id, pause_id = fields.get("run_id", ""), fields.get("pause_id", "")
        info = await self.store.run_info(run_id)
        if info is None or info.status.terminal or info.pause_id != pause_id:
            log.info("resume entry %s for run %s is stale; skipped", entry_id, run_id)
            return
        if fields.get("type") == "start":
            if info.status != RunStatus.RUNNING:
                return
            try:
                outcome = await self.runner.run(
                    info.agent,
                    info.input,
                    run_id=run_id,
                    requested_by=info.requested_by or None,
                )
            except CountersignError as exc:
                await self.store.finish(run_id, "", "failed", "", str(exc), "worker")
                return
            await self.store.save_outcome(outcome, "", "worker")
            return
        await self._resume(run_id, pause_id, info)

    async def _resume(self, run_id: str, pause_id: str, info: RunRecord) -> None:
        await self.store.record_resume_latency(info)
        try:
            state = await self.store.load_checkpoint(run_id, pause_id)
        except CheckpointDecryptError as exc:
            reason = f"checkpoint could not be decrypted or verified, so it was not resumed: {exc}"
            await self.store.finish(run_id, pause_id, "failed", "", reason, "worker")
            return
        except CheckpointError as exc:
            await self.store.finish(run_id, pause_id, "failed", "", str(exc), "worker")
            return
        decisions = await self.store.decisions_for(run_id, pause_id)
        try:
            outcome = await self.runner.resume(state, decisions)
        except CountersignError as exc:
            await self.store.finish(run_id, pause_id, "failed", "", str(exc), "worker")
            return
        self.crash.reached("after_tool_ran")
        await self.store.save_outcome(outcome, pause_id, "worker")
