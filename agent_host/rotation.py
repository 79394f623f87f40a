"""`countersign keys rotate`: re-encrypt every stored checkpoint under the active key.

Runs are walked through the runs index (never SCAN) in creation order; the position is
saved after each batch, so an interrupted rotation resumes where it stopped. Each
checkpoint is swapped only if it is unchanged since it was read (WATCH), so a run that
moves on meanwhile is simply re-read on the next pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from . import keys as K
from .crypto import KeyRing
from .errors import CheckpointError

__all__ = ["RotationReport", "rotate_checkpoints"]

log = logging.getLogger(__name__)


@dataclass
class RotationReport:
    examined: int = 0
    rotated: int = 0
    skipped: int = 0


async def rotate_checkpoints(redis: Redis, keyring: KeyRing, batch: int = 200) -> RotationReport:
    report = RotationReport()
    start = int(await redis.get(K.ROTATION) or 0)
    while True:
        run_ids = await redis.zrange(K.RUNS, start, start + batch - 1)
        if not run_ids:
            break
        for raw in run_ids:
            run_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            report.examined += 1
            if await _rotate_one(redis, keyring, run_id):
                report.rotated += 1
            else:
                report.skipped += 1
        start += len(run_ids)
        await redis.set(K.ROTATION, start)
    await redis.delete(K.ROTATION)
    return report


async def _rotate_one(redis: Redis, keyring: KeyRing, run_id: str) -> bool:
    k = K.Keys(run_id)
    async with redis.pipeline(transaction=True) as pipe:
        try:
            await pipe.watch(k.checkpoint, k.run)
            blob: Any = await pipe.get(k.checkpoint)
            pause_id = await pipe.hget(k.run, "pause_id")
            if blob is None or pause_id is None or not keyring.needs_rotation(blob):
                return False
            pause = pause_id.decode() if isinstance(pause_id, bytes) else str(pause_id)
            fresh = keyring.reencrypt(blob, run_id=run_id, request_id=pause)
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set(k.checkpoint, fresh)
            await pipe.execute()
            return True
        except CheckpointError as exc:
            # Unreadable under every key (or sealed to something else): leave it, say so,
            # and go on; one bad checkpoint must not stop the rotation of all the others.
            log.warning("run %s: checkpoint not rotated: %s", run_id, exc)
            return False
        except WatchError:
            log.info(
                "run %s changed during rotation; it is written under the new key anyway", run_id
            )
            return False
