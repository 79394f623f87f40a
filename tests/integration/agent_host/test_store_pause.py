"""RunStore pauses: one atomic write of checkpoint + requests + indexes + outbox, fenced by the
pause id, every key of a run under one hash tag, checkpoints encrypted at rest."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.crc import key_slot

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, FixedRouter
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import kid_of
from agent_host.runtime.decisions import Approve
from agent_host.runtime.runner import Paused
from tests.support.host_env import FakeClock, make_env, scan_keys
from tests.support.keyspace import xlen_all, xrange_all, zcard_all, zrange_all


async def test_pause_writes_checkpoint_requests_indexes_and_outbox_together(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /tmp/a.docx and /tmp/b.docx")
    k = K.Keys(run_id)
    info = await env.info(run_id)
    ids = list(info.pause_requests)

    assert info.status == "waiting"
    assert await env.store.redis.hget(K.Keys(run_id).run, "undecided") == b"2"
    assert ids == [K.request_id(run_id, 1), K.request_id(run_id, 2)]
    assert info.pause_id == ids[0]
    assert [as_text(i) for i in await redis.lrange(k.requests, 0, -1)] == ids

    state = await env.store.load_checkpoint(run_id, info.pause_id)
    assert state.status == "paused" and len(state.pending) == 2
    assert {c.call_id for c in state.pending} == {r.call_id for r in await env.requests(run_id)}

    pending = await zrange_all(redis, "pending")
    by_dest = {as_text(m) for m in await redis.zrange(k.shard.pending_in("C-ops"), 0, -1)}
    deadlines = await zrange_all(redis, "deadlines")
    outbox = [
        {as_text(a): as_text(b) for a, b in fields.items()}
        for _, fields in await xrange_all(redis, "outbox")
    ]
    assert set(pending) == set(ids) == by_dest == set(deadlines)
    assert [e["request_id"] for e in outbox if e["type"] == "request_posted"] == ids

    for rid in ids:
        raw = {as_text(a): as_text(b) for a, b in (await redis.hgetall(k.request(rid))).items()}
        assert raw["status"] == "pending"
        assert raw["pause_id"] == info.pause_id
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
    # The deadline runs from Redis's clock when PAUSE runs, a moment after the request was
    # built: 72 hours from its creation, plus that moment (a busy machine's milliseconds).
    assert -1e-3 <= (request.expires_at - request.created_at) - 72 * 3600 < 5
    assert request.route.destination == ""
    assert await redis.zcard(K.Keys(run_id).shard.pending_in("")) == 1


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
        k = K.Keys(run_id)
        mine = {key for key in run_keys if f":run:{k.token}" in key}
        assert {k.run, k.checkpoint, k.audit} <= mine
        # the run's keys and its shard's indexes and streams share one cluster slot
        shard_keys = {k.shard.pending, k.shard.deadlines, k.shard.resume, k.shard.outbox}
        slots = {key_slot(key.encode()) for key in mine | shard_keys}
        assert len(slots) == 1, slots
    done = K.Keys(runs[1])
    assert done.ledger in run_keys
    assert done.approvers(K.request_id(runs[1], 1)) in run_keys
    # nothing lives outside a shard's tag or the global one
    tags = {f"s{n:02d}" for n in range(K.SHARDS)}
    assert all(key.split("{", 1)[1].split("}", 1)[0] in tags for key in run_keys)


async def test_a_stale_save_writes_nothing(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.store.create_run("refund-agent", "refund order 123", "alice")
    outcome = await env.runner.run("refund-agent", "refund order 123", run_id=run_id)
    assert isinstance(outcome, Paused)

    before_keys = await scan_keys(redis)
    before_run = await env.info(run_id)
    outbox_len = await xlen_all(redis, "outbox")

    assert await env.store.save_outcome(outcome, "req_deadbeef_9", "worker") is False

    assert await scan_keys(redis) == before_keys
    assert await env.info(run_id) == before_run
    k = K.Keys(run_id)
    assert not await redis.exists(k.checkpoint)
    assert not await redis.exists(k.request(K.request_id(run_id, 2)))
    assert await zcard_all(redis, "pending") == 0
    assert await zcard_all(redis, "deadlines") == 0
    assert await xlen_all(redis, "outbox") == outbox_len

    # the right fence writes; the same save again (now stale) is refused and changes nothing
    assert await env.store.save_outcome(outcome, "", "worker") is True
    snapshot = await scan_keys(redis), await env.info(run_id), await xlen_all(redis, "outbox")
    assert await env.store.save_outcome(outcome, "", "worker") is False
    assert (
        await scan_keys(redis),
        await env.info(run_id),
        await xlen_all(redis, "outbox"),
    ) == snapshot
    assert await zcard_all(redis, "pending") == 1


async def test_stale_finish_writes_nothing(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    before = await env.info(run_id), await redis.get(K.Keys(run_id).checkpoint)
    assert not await env.store.finish(run_id, "", "failed", "", "stale worker", "worker")
    assert (await env.info(run_id), await redis.get(K.Keys(run_id).checkpoint)) == before


async def test_a_run_failed_without_its_state_is_neither_finished_nor_paused_again(
    redis: Redis,
) -> None:
    """A run failed with no final state keeps its pause id; a worker still resuming that
    pause cannot finish it a second time, nor pause it again (a tool's question, a hosted
    agent's next interruption), so nothing more of it runs and no second outcome is posted."""
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    pause_id = (await env.info(run_id)).pause_id
    state = await env.store.load_checkpoint(run_id, pause_id)
    assert await env.store.finish(run_id, pause_id, "failed", "", "could not read it", "worker")
    before = await scan_keys(redis), await env.info(run_id), await xlen_all(redis, "outbox")
    assert before[1].pause_id == pause_id

    assert not await env.store.finish(run_id, pause_id, "succeeded", "late", "", "worker")
    assert not await env.store.save_outcome(Paused(state, state.pending), pause_id, "worker")
    assert (await scan_keys(redis), await env.info(run_id), await xlen_all(redis, "outbox")) == (
        before
    )


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
    state = await env.store.load_checkpoint(run_id, info.pause_id)
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
    assert (await env.final_state(run_id)).output == (await env.info(run_id)).output
