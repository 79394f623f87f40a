"""`countersign keys rotate`: re-encrypt every stored checkpoint under the active key.

Runs are walked through each shard's runs index (never SCAN) in creation order; the
position is saved after each batch, so an interrupted rotation resumes where it stopped.
Each checkpoint is swapped by a compare-and-set, only if it is unchanged since it was read;
a run that moved on meanwhile was written under the new key anyway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from . import keys as K
from .connections import as_text
from .crypto import KeyRing
from .errors import CheckpointError

__all__ = ["RotationReport", "rotate_checkpoints"]

log = logging.getLogger(__name__)


@dataclass
class RotationReport:
    examined: int = 0
    rotated: int = 0
    skipped: int = 0


# Swap a checkpoint only if it and its pause are still what was read and re-encrypted.
_SWAP = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'pause_id') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


async def rotate_checkpoints(redis: Redis, keyring: KeyRing, batch: int = 200) -> RotationReport:
    report = RotationReport()
    swap = redis.register_script(_SWAP)
    for shard in K.shards():
        field = str(shard.number)
        start = int(await redis.hget(K.ROTATION, field) or 0)
        while run_ids := await redis.zrange(shard.runs, start, start + batch - 1):
            for raw in run_ids:
                run_id = as_text(raw)
                report.examined += 1
                if await _rotate_one(redis, swap, keyring, run_id):
                    report.rotated += 1
                else:
                    report.skipped += 1
            start += len(run_ids)
            await redis.hset(K.ROTATION, field, start)
    await redis.delete(K.ROTATION)
    return report


async def _rotate_one(redis: Redis, swap: AsyncScript, keyring: KeyRing, run_id: str) -> bool:
    k = K.Keys(run_id)
    blob: Any = await redis.get(k.checkpoint)
    pause_id: Any = await redis.hget(k.run, "pause_id")
    if blob is None or pause_id is None or not keyring.needs_rotation(blob):
        return False
    pause = as_text(pause_id)
    try:
        fresh = keyring.reencrypt(blob, run_id=run_id, request_id=pause)
    except CheckpointError as exc:
        # Unreadable under every key (or sealed to something else): leave it, say so, and
        # go on; one bad checkpoint must not stop the rotation of all the others.
        log.warning("run %s: checkpoint not rotated: %s", run_id, exc)
        return False
    if await swap(keys=[k.checkpoint, k.run], args=[blob, fresh, pause]):
        return True
    log.info("run %s moved on during rotation; its new checkpoint uses the new key", run_id)
    return False
