"""`countersign keys rotate`: re-encrypt every stored checkpoint, the sealed context each
request of a run keeps (`approvals.context`) and the progress a run saved mid-turn
(`progress`: a turn a worker was running when it stopped, kept until a worker replays it),
and re-seal every sealed field (`sealed_rotation`), under the active key.

Runs are walked through each shard's runs index (never SCAN) in creation order; the
position is saved after each batch, so an interrupted rotation resumes where it stopped.
Each blob is swapped by a compare-and-set, only if it is unchanged since it was read; a run
that moved on meanwhile was written under the new key anyway.

A damaged checkpoint (truncated or garbage envelope, a key that is not in the ring, failed
authentication, not even a string in Redis) is left as it is and reported with its run id,
and the rotation goes on with the others: one bad blob must not keep all the rest under the
old key. A worker that tries to resume such a run fails it with the reason when the
checkpoint is damaged, and leaves it waiting, decided, when only its key is missing (a
worker with the key resumes it); rotation itself changes no run's state, since a missing
key can still be added back and the rotation run again. Sealed fields are treated alike.

When anything was rewritten, Redis is asked to rewrite its append-only file (BGREWRITEAOF),
which otherwise keeps every old value — ciphertexts under the old key, and the plaintext of
fields written before they were sealed — until its next rewrite.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing
from agent_host.durable.progress import progress_aad
from agent_host.durable.sealed_fields import FieldSealer
from agent_host.durable.sealed_rotation import RESEAL, reseal_run
from agent_host.durable.store import context_aad
from agent_host.errors import CheckpointError

__all__ = ["RotationReport", "rotate_checkpoints"]

log = logging.getLogger(__name__)


@dataclass
class RotationReport:
    examined: int = 0
    rotated: int = 0
    skipped: int = 0  # already under the active key, no checkpoint, or moved on meanwhile
    damaged: dict[str, str] = field(default_factory=dict)  # run id -> what is wrong
    fields: int = 0  # sealed fields re-sealed (or sealed for the first time)
    progress: int = 0  # saved turns (a run's progress mid-turn) re-encrypted
    aof: str = ""  # what became of Redis's append-only file


class _Damaged(Exception):
    """This run's checkpoint cannot be rotated; the message says why."""


# Swap a checkpoint only if it and its pause are still what was read and re-encrypted.
_SWAP = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'pause_id') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""

# Swap a hash's field (a request's sealed context, a run's saved progress) only if it is
# still what was read and re-encrypted. ARGV: what was read, what replaces it, the field.
_SWAP_FIELD = """
if redis.call('HGET', KEYS[1], ARGV[3]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[2])
return 1
"""


_TO_KEY = "key"  # K.ROTATION's field naming the key the positions are of


async def rotate_checkpoints(
    redis: Redis, keyring: KeyRing, batch: int = 200, aof_wait: float = 120.0
) -> RotationReport:
    report = RotationReport()
    swap = redis.register_script(_SWAP)
    reseal = redis.register_script(RESEAL)
    sealer = FieldSealer(keyring)
    swap_field = redis.register_script(_SWAP_FIELD)
    # The position of a rotation cut short is kept with the key it rotated to: one to
    # another key starts over, or the runs the first one passed would stay under old keys.
    if as_text(await redis.hget(K.ROTATION, _TO_KEY) or "") != keyring.active_kid:
        await redis.delete(K.ROTATION)
        await redis.hset(K.ROTATION, _TO_KEY, keyring.active_kid)
    for shard in K.shards():
        field = str(shard.number)
        start = int(await redis.hget(K.ROTATION, field) or 0)
        while run_ids := await redis.zrange(shard.runs, start, start + batch - 1):
            for raw in run_ids:
                run_id = as_text(raw)
                report.examined += 1
                problems = []
                try:
                    await _rotate_contexts(redis, swap_field, keyring, run_id)
                except _Damaged as exc:  # the checkpoint is still rotated
                    log.warning("run %s: a request's context not rotated: %s", run_id, exc)
                    problems.append(str(exc))
                try:
                    report.progress += await _rotate_progress(redis, swap_field, keyring, run_id)
                except _Damaged as exc:
                    log.warning("run %s: its saved progress not rotated: %s", run_id, exc)
                    problems.append(str(exc))
                try:
                    rotated = await _rotate_one(redis, swap, keyring, run_id)
                except _Damaged as exc:
                    log.warning("run %s: checkpoint not rotated: %s", run_id, exc)
                    problems.append(str(exc))
                else:
                    if rotated:
                        report.rotated += 1
                    else:
                        report.skipped += 1
                fields = await reseal_run(redis, reseal, sealer, run_id)
                report.fields += fields.fields
                for problem in fields.damaged:
                    log.warning("run %s: %s", run_id, problem)
                if problems or fields.damaged:
                    report.damaged[run_id] = "; ".join(problems + fields.damaged)
            start += len(run_ids)
            await redis.hset(K.ROTATION, field, start)
    await redis.delete(K.ROTATION)
    if report.rotated or report.fields or report.progress:
        report.aof = await compact_aof(redis, aof_wait)
    return report


async def compact_aof(redis: Redis, wait: float) -> str:
    """Ask Redis to rewrite its append-only file and wait for it (within `wait` seconds):
    until then the file still holds the values that were replaced. Says what happened."""
    if isinstance(redis, RedisCluster):
        return "append-only files not rewritten: run BGREWRITEAOF on every primary of the cluster"
    try:
        info: Any = await redis.info("persistence")
        if not int(info["aof_enabled"]):
            return "append-only file off: nothing to rewrite"
        await redis.bgrewriteaof()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            info = await redis.info("persistence")
            if not int(info["aof_rewrite_in_progress"]) and not int(info["aof_rewrite_scheduled"]):
                if info.get("aof_last_bgrewrite_status") != "ok":
                    return "append-only file rewrite failed: see the Redis log, run BGREWRITEAOF"
                return "append-only file rewritten"
        return f"append-only file rewrite still running after {wait:g}s"
    except (RedisError, RedisClusterException) as exc:  # e.g. a managed Redis refuses it
        log.warning("could not rewrite Redis's append-only file: %s", exc)
        return f"append-only file not rewritten ({exc}): run BGREWRITEAOF on the Redis server"


async def _rotate_one(redis: Redis, swap: AsyncScript, keyring: KeyRing, run_id: str) -> bool:
    """True when rotated, False when there was nothing to do; _Damaged when it cannot be."""
    k = K.Keys(run_id)
    try:  # at one moment: a pause between two reads would pair its id with the old blob
        async with redis.pipeline(transaction=True) as pipe:
            pipe.get(k.checkpoint)
            pipe.hget(k.run, "pause_id")
            blob, pause_id = await pipe.execute()
    except ResponseError as exc:  # WRONGTYPE: the key holds something else than a blob
        raise _Damaged(f"the checkpoint key {k.checkpoint} is not a string ({exc})") from None
    if blob is None or pause_id is None:
        return False
    try:
        pause = as_text(pause_id)
        if not keyring.needs_rotation(blob):
            return False
        fresh = keyring.reencrypt(blob, run_id=run_id, request_id=pause)
    except UnicodeDecodeError as exc:
        raise _Damaged(f"its pause id is not text ({exc})") from None
    except CheckpointError as exc:  # unreadable under every key, or sealed to another run
        raise _Damaged(str(exc)) from None
    if await swap(keys=[k.checkpoint, k.run], args=[blob, fresh, pause]):
        return True
    log.info("run %s moved on during rotation; its new checkpoint uses the new key", run_id)
    return False


async def _rotate_contexts(redis: Redis, swap: AsyncScript, keyring: KeyRing, run_id: str) -> None:
    """Each request's sealed context under the active key. One that cannot be read is
    reported like a damaged checkpoint (its message is shown without it meanwhile); the
    run's other requests are rotated all the same."""
    k = K.Keys(run_id)
    try:
        request_ids = [as_text(r) for r in await redis.lrange(k.requests, 0, -1)]
    except ResponseError as exc:
        raise _Damaged(f"the request list {k.requests} is not a list ({exc})") from None
    damaged = []
    for request_id in request_ids:
        try:
            await _rotate_context(redis, swap, keyring, run_id, request_id)
        except _Damaged as exc:
            damaged.append(str(exc))
    if damaged:
        raise _Damaged("; ".join(damaged))


async def _rotate_context(
    redis: Redis, swap: AsyncScript, keyring: KeyRing, run_id: str, request_id: str
) -> None:
    key = K.Keys(run_id).request(request_id)
    try:
        sealed: Any = await redis.hget(key, "sealed_context")
    except ResponseError as exc:
        raise _Damaged(f"request {request_id} is not a hash ({exc})") from None
    if not sealed:
        return
    try:
        text = as_text(sealed)
        blob = base64.b64decode(text, validate=True)
        if not keyring.needs_rotation(blob):
            return
        aad = context_aad(request_id)
        plain = keyring.decrypt(blob, run_id=run_id, request_id=aad)
        fresh = keyring.encrypt(plain, run_id=run_id, request_id=aad)
    except (binascii.Error, ValueError, CheckpointError) as exc:
        raise _Damaged(f"request {request_id}'s context: {exc}") from None
    await swap(keys=[key], args=[text, base64.b64encode(fresh).decode("ascii"), "sealed_context"])


async def _rotate_progress(redis: Redis, swap: AsyncScript, keyring: KeyRing, run_id: str) -> bool:
    """The run's saved progress under the active key: True when rotated. Saved progress is
    bound to the pause it resumes (`progress_aad`), which its hash records beside it."""
    key = K.Keys(run_id).progress
    try:
        saved: Any = await redis.hmget(key, ["pause_id", "blob"])
    except ResponseError as exc:  # WRONGTYPE
        raise _Damaged(f"the saved progress {key} is not a hash ({exc})") from None
    pause_id, blob = saved
    if pause_id is None or blob is None:
        return False
    try:
        if not keyring.needs_rotation(blob):
            return False
        aad = progress_aad(as_text(pause_id))
        fresh = keyring.reencrypt(blob, run_id=run_id, request_id=aad)
    except (UnicodeDecodeError, CheckpointError) as exc:
        raise _Damaged(f"its saved progress: {exc}") from None
    return bool(await swap(keys=[key], args=[blob, fresh, "blob"]))
