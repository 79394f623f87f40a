"""RunStore pauses: one atomic write of checkpoint + requests + indexes + outbox, fenced by the
pause id, every key of a run under one hash tag, checkpoints encrypted at rest."""

from __future__ import annotations

import json

from redis.asyncio import Redis
from redis.crc import key_slot

from agent_host import keys as K
from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, FixedRouter
from agent_host.crypto import kid_of
from agent_host.decisions import Approve
from agent_host.runner import Paused

from .host_helpers import FakeClock, make_env, scan_keys, text

BY_DEST = f"{K.PENDING}:C-ops"


async def test_pause_writes_checkpoint_requests_indexes_and_outbox_together(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /tmp/a.docx and /tmp/b.docx")
    k = K.Keys(run_id)
    info = await env.info(run_id)
    ids = json.loads(info["pause_requests"])

    assert info["status"] == "waiting"
    assert info["undecided"] == "2"
    assert ids == [K.request_id(run_id, 1), K.request_id(run_id, 2)]
    assert info["pause_id"] == ids[0]
    assert [text(i) for i in await redis.lrange(k.requests, 0, -1)] == ids

    state = await env.store.load_checkpoint(run_id, info["pause_id"])
    assert state.status == "paused" and len(state.pending) == 2
    assert {c.call_id for c in state.pending} == {r.call_id for r in await env.requests(run_id)}

    pending = {text(m): s for m, s in await redis.zrange(K.PENDING, 0, -1, withscores=True)}
    by_dest = {text(m) for m in await redis.zrange(BY_DEST, 0, -1)}
    deadlines = {text(m): s for m, s in await redis.zrange(K.DEADLINES, 0, -1, withscores=True)}
    outbox = [
        {text(a): text(b) for a, b in fields.items()} for _, fields in await redis.xrange(K.OUTBOX)
    ]
    assert set(pending) == set(ids) == by_dest == set(deadlines)
    assert [e["request_id"] for e in outbox if e["type"] == "request_posted"] == ids

    for rid in ids:
        raw = {text(a): text(b) for a, b in (await redis.hgetall(k.request(rid))).items()}
        assert raw["status"] == "pending"
        assert raw["pause_id"] == info["pause_id"]
        assert raw["run_id"] == run_id and raw["tool"] == "delete_file"
        assert raw["quorum"] == "1"
        request = await env.store.get_request(rid)
        assert request is not None
        assert deadlines[rid] == int(request.expires_at * 1000)
        assert pending[rid] == int(request.created_at * 1000)

    audit = await env.store.audit(run_id)
    assert [a["event"] for a in audit] == ["started", "paused"]


async def test_default_expiry_is_72_hours(redis: Redis) -> None:
    env = make_env(redis, router=FixedRouter())
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    assert DEFAULT_EXPIRY_SECONDS == 72 * 3600
    assert abs((request.expires_at - request.created_at) - 72 * 3600) < 1e-3
    assert request.route.destination == ""
    assert await redis.zcard(f"{K.PENDING}:-") == 1


async def test_every_key_of_a_run_carries_its_hash_tag(redis: Redis) -> None:
    env = make_env(redis)
    runs = [
        await env.start("cleanup-agent", "remove /tmp/a and /tmp/b"),
        await env.start("refund-agent", "refund order 123"),
    ]
    # decide and resume one run so that its ledger, approvers and audit keys exist too
    for request in await env.requests(runs[1]):
        assert (await env.store.decide(request.request_id, Approve(decided_by="u"))).accepted
    await env.drain()
    assert await env.status(runs[1]) == "succeeded"

    keys = await scan_keys(redis)
    global_keys = {key for key in keys if key.startswith("cs:{global}")}
    run_keys = keys - global_keys
    assert all(key.startswith("cs:{") for key in keys), keys
    for run_id in runs:
        token = K.token_of(run_id)
        mine = {key for key in run_keys if f"{{{token}}}" in key}
        assert {K.Keys(run_id).run, K.Keys(run_id).checkpoint, K.Keys(run_id).audit} <= mine
        assert {key_slot(key.encode()) for key in mine} == {key_slot(token.encode())}
    done = K.Keys(runs[1])
    assert done.ledger in run_keys
    assert done.approvers(K.request_id(runs[1], 2)) in run_keys
    # nothing of a run lives outside its tag: every non-global key belongs to one of the runs
    tokens = {K.token_of(r) for r in runs}
    assert all(key.split("{", 1)[1].split("}", 1)[0] in tokens for key in run_keys)


async def test_a_stale_save_writes_nothing(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.store.create_run("refund-agent", "refund order 123", "alice")
    outcome = await env.runner.run("refund-agent", "refund order 123", run_id=run_id)
    assert isinstance(outcome, Paused)

    before_keys = await scan_keys(redis)
    before_run = await env.info(run_id)
    outbox_len = await redis.xlen(K.OUTBOX) if await redis.exists(K.OUTBOX) else 0

    assert await env.store.save_outcome(outcome, "req_deadbeef_9", "worker") is False

    assert await scan_keys(redis) == before_keys
    assert await env.info(run_id) == before_run
    k = K.Keys(run_id)
    assert not await redis.exists(k.checkpoint)
    assert not await redis.exists(k.request(K.request_id(run_id, 2)))
    assert await redis.zcard(K.PENDING) == 0
    assert await redis.zcard(K.DEADLINES) == 0
    assert (await redis.xlen(K.OUTBOX) if await redis.exists(K.OUTBOX) else 0) == outbox_len

    # the right fence writes; the same save again (now stale) is refused and changes nothing
    assert await env.store.save_outcome(outcome, "", "worker") is True
    snapshot = await scan_keys(redis), await env.info(run_id), await redis.xlen(K.OUTBOX)
    assert await env.store.save_outcome(outcome, "", "worker") is False
    assert (await scan_keys(redis), await env.info(run_id), await redis.xlen(K.OUTBOX)) == snapshot
    assert await redis.zcard(K.PENDING) == 1


async def test_stale_finish_writes_nothing(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    before = await env.info(run_id), await redis.get(K.Keys(run_id).checkpoint)
    assert not await env.store.finish(run_id, "", "failed", "", "stale worker", "worker")
    assert (await env.info(run_id), await redis.get(K.Keys(run_id).checkpoint)) == before


async def test_checkpoint_is_encrypted_at_rest(redis: Redis) -> None:
    env = make_env(redis, clock=FakeClock())
    run_id = await env.start("refund-agent", "refund order 123 for customer Zebulon")
    blob = await redis.get(K.Keys(run_id).checkpoint)
    assert blob is not None
    assert kid_of(blob) == "k1"
    for secret in (b"refund order 123", b"Zebulon", b"issue_refund", b"lookup_order", b"42.5"):
        assert secret not in blob
    # it is the real checkpoint: it decrypts under the run's pause id only
    info = await env.info(run_id)
    state = await env.store.load_checkpoint(run_id, info["pause_id"])
    assert state.input == "refund order 123 for customer Zebulon"

    # the final checkpoint written at the end is encrypted too
    (request,) = await env.requests(run_id)
    await env.store.decide(request.request_id, Approve(decided_by="bob"))
    await env.drain()
    assert await env.status(run_id) == "succeeded"
    final = await redis.get(K.Keys(run_id).checkpoint)
    assert final is not None and final != blob
    for secret in (b"refund order 123", b"Zebulon", b"Refund issued"):
        assert secret not in final
    assert (await env.final_state(run_id)).output == (await env.info(run_id))["output"]
