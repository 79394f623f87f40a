"""Key rotation: `rotate_checkpoints` re-encrypts every stored checkpoint under the new key,
resumably, without clobbering a run that moves on meanwhile; rotated checkpoints resume."""

from __future__ import annotations

import base64
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key, kid_of
from agent_host.durable.reach import keys_gone, waiting_runs_keys
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.examples import ExampleEffects, refund_agent
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.decisions import Approve
from tests.support.host_env import Env, make_env, make_host

KEY_A = generate_key("kA")
KEY_B = generate_key("kB")


async def checkpoint_kids(redis: Redis, runs: list[str]) -> list[str | None]:
    kids = []
    for run_id in runs:
        blob = await redis.get(K.Keys(run_id).checkpoint)
        kids.append(None if blob is None else kid_of(blob))
    return kids


async def approve_all(env: Env, run_id: str) -> None:
    for request in await env.pending_requests(run_id):
        assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).accepted


async def test_rotation_reencrypts_every_checkpoint_and_they_still_resume(redis: Redis) -> None:
    env_a = make_env(redis, keyring=KeyRing.parse(KEY_A))
    paused = [await env_a.start("refund-agent", f"refund order {n}") for n in ("123", "124")]
    paused.append(await env_a.start("cleanup-agent", "remove /tmp/x /tmp/y"))
    finished = await env_a.start("refund-agent", "refund order 200")
    await approve_all(env_a, finished)
    await env_a.drain()
    assert await env_a.status(finished) == "succeeded"
    not_started = await env_a.store.create_run("refund-agent", "refund order 123", "x")
    runs = [*paused, finished]
    assert await checkpoint_kids(redis, runs) == ["kA"] * 4
    before = {r: await redis.get(K.Keys(r).checkpoint) for r in runs}

    ring_b = KeyRing.parse(f"{KEY_B},{KEY_A}")
    report = await rotate_checkpoints(redis, ring_b, batch=2)

    assert (report.examined, report.rotated, report.skipped) == (5, 4, 1)
    assert await checkpoint_kids(redis, runs) == ["kB"] * 4
    assert await redis.get(K.Keys(not_started).checkpoint) is None
    assert not await redis.exists(K.ROTATION)
    for run_id in runs:
        info = await env_a.info(run_id)
        fresh = await redis.get(K.Keys(run_id).checkpoint)
        assert fresh is not None and fresh != before[run_id]
        same = ring_b.decrypt(fresh, run_id=run_id, request_id=info.pause_id)
        old = KeyRing.parse(KEY_A).decrypt(before[run_id], run_id=run_id, request_id=info.pause_id)
        assert same == old

    again = await rotate_checkpoints(redis, ring_b)
    assert (again.examined, again.rotated) == (5, 0)

    # the old key can now be dropped: a ring of B alone resumes every rotated checkpoint
    env_b = make_env(redis, keyring=KeyRing.parse(KEY_B))
    env_b.runner, env_b.effects = env_a.runner, env_a.effects  # same tools, same effects
    for run_id in paused:
        await approve_all(env_b, run_id)
    await env_b.drain()
    for run_id in paused:
        assert await env_b.status(run_id) == "succeeded", await env_b.info(run_id)
    assert env_a.effects.count("refund") == 3
    assert env_a.effects.count("delete_file") == 2
    assert (await env_b.final_state(finished)).status == "succeeded"


async def test_rotation_does_not_clobber_a_checkpoint_written_meanwhile(
    redis: Redis, redis_url: str
) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("refund-agent", "refund order 123")
    pause_id = (await env.info(run_id)).pause_id
    ring_b = KeyRing.parse(f"{KEY_B},{KEY_A}")
    moved_on = ring_b.encrypt(b'{"moved": "on"}', run_id=run_id, request_id=pause_id)

    class Racing(KeyRing):
        def reencrypt(self, blob: bytes, *, run_id: str, request_id: str) -> bytes:
            fresh = super().reencrypt(blob, run_id=run_id, request_id=request_id)
            with redis_sync.Redis.from_url(redis_url) as other:  # the run moves on right now
                other.set(K.Keys(run_id).checkpoint, moved_on)
            return fresh

    racing = Racing.parse(f"{KEY_B},{KEY_A}")
    report = await rotate_checkpoints(redis, racing)
    assert (report.rotated, report.skipped) == (0, 1)
    assert await redis.get(K.Keys(run_id).checkpoint) == moved_on


async def rotation_cut_short(redis: Redis) -> list[str]:
    """Five paused runs under kA, and a rotation to kB killed after three of them (batches
    of two): the runs."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    runs = [await env.start("refund-agent", "refund order 123") for _ in range(5)]
    seen: list[str] = []

    class Crashing(KeyRing):
        def reencrypt(self, blob: bytes, *, run_id: str, request_id: str) -> bytes:
            if len(seen) == 3:
                raise RuntimeError("killed mid-rotation")
            seen.append(run_id)
            return super().reencrypt(blob, run_id=run_id, request_id=request_id)

    with pytest.raises(RuntimeError):
        await rotate_checkpoints(redis, Crashing.parse(f"{KEY_B},{KEY_A}"), batch=2)
    return runs


async def test_interrupted_rotation_resumes_from_its_cursor(redis: Redis) -> None:
    runs = await rotation_cut_short(redis)
    assert await redis.exists(K.ROTATION)  # the batches done before the crash are remembered

    resumed = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"), batch=2)
    assert resumed.rotated == 2  # three were rotated before the crash
    assert resumed.examined < 5  # and the remembered batches are not walked again
    assert await checkpoint_kids(redis, runs) == ["kB"] * 5
    assert not await redis.exists(K.ROTATION)


async def test_a_rotation_to_another_key_than_the_one_cut_short_starts_over(
    redis: Redis,
) -> None:
    """The position kept is that of the key rotated to: a rotation cut short, then one to a
    newer key, would otherwise leave the runs the first passed under old keys, report
    nothing damaged, and make them unreadable once the old keys are dropped."""
    runs = await rotation_cut_short(redis)
    assert await redis.exists(K.ROTATION)

    key_c = generate_key("kC")
    report = await rotate_checkpoints(redis, KeyRing.parse(f"{key_c},{KEY_B},{KEY_A}"))
    assert report.examined == 5 and report.damaged == {}
    assert await checkpoint_kids(redis, runs) == ["kC"] * 5
    assert not await redis.exists(K.ROTATION)


def changed_refund_registry(effects: ExampleEffects) -> AgentRegistry:
    def build() -> Agent:
        agent = refund_agent(effects)
        # the agent definition changed while runs waited: a tool was removed
        agent.tools = [t for t in agent.tools if t.name != "lookup_order"]
        return agent

    return AgentRegistry({"refund-agent": build})


async def test_rotation_survives_a_run_that_failed_at_resume(redis: Redis) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    failed = await env.start("refund-agent", "refund order 123")
    healthy = await env.start("refund-agent", "refund order 124")
    await approve_all(env, failed)
    env.runner.registry = changed_refund_registry(env.effects)
    env.runner.reload_agents()  # as a redeploy with the changed agent would
    await env.drain()
    info = await env.info(failed)
    assert info.status == "failed" and "changed" in info.error
    assert env.effects.count("refund") == 0

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))

    assert report.examined == 2
    assert (await checkpoint_kids(redis, [healthy]))[0] == "kB"


async def test_rotation_reencrypts_each_requests_context_and_it_still_opens(redis: Redis) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.pending_requests(run_id)
    opened = env.store.open_context(request).context
    assert opened is not None and opened.earlier[0].tool == "lookup_order"
    assert kid_of(base64.b64decode(request.sealed_context)) == "kA"

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))
    assert report.damaged == {}

    # The old key dropped: the context opens under the new one alone, unchanged.
    env_b = make_env(redis, keyring=KeyRing.parse(KEY_B))
    rotated = await env_b.store.get_request(request.request_id)
    assert rotated is not None
    assert kid_of(base64.b64decode(rotated.sealed_context)) == "kB"
    assert env_b.store.open_context(rotated).context == opened
    # A context that cannot be opened leaves the request shown without it, never withheld.
    assert make_env(redis).store.open_context(rotated).context is None


@pytest.mark.parametrize("damage", [b"not base64!", b"\xff\xfe not even text"])
async def test_a_damaged_context_is_reported_and_the_run_s_other_contexts_are_rotated(
    redis: Redis, damage: bytes
) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("cleanup-agent", "remove /tmp/x /tmp/y /tmp/z")
    first, *others = await env.pending_requests(run_id)
    assert others, "the run should wait on more than one request"
    listed = [r.decode() for r in await redis.lrange(K.Keys(run_id).requests, 0, -1)]
    assert listed[0] == first.request_id  # the damaged one is the first rotation meets
    await redis.hset(K.Keys(run_id).request(first.request_id), "sealed_context", damage)

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))

    assert first.request_id in report.damaged[run_id]
    env_b = make_env(redis, keyring=KeyRing.parse(KEY_B))
    for request in others:
        rotated = await env_b.store.get_request(request.request_id)
        assert rotated is not None
        assert kid_of(base64.b64decode(rotated.sealed_context)) == "kB", request.request_id
        assert env_b.store.open_context(rotated).context is not None
    assert (await checkpoint_kids(redis, [run_id]))[0] == "kB"


async def test_a_checkpoint_or_progress_whose_pause_id_is_not_text_is_reported_not_a_crash(
    redis: Redis,
) -> None:
    """Damage rotation cannot read is reported per run; it never stops the rotation."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    broken, healthy = [await env.start("refund-agent", f"refund order {n}") for n in (1, 2)]
    await redis.hset(K.Keys(broken).run, "pause_id", b"\xff\xfe")
    await redis.hset(K.Keys(broken).progress, mapping={"pause_id": b"\xff", "blob": b"x"})

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))

    assert "not text" in report.damaged[broken] and "saved progress" in report.damaged[broken]
    assert (await checkpoint_kids(redis, [healthy]))[0] == "kB"


async def test_a_pause_during_rotation_is_not_reported_as_damage(redis: Redis) -> None:
    """The run pauses again just as rotation reads its checkpoint: the checkpoint and the
    pause id it is sealed to are read together, so rotation never pairs the old blob with
    the new pause id and reports a sound run as damaged; the new pause is left as it is."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("refund-agent", "refund order 123")
    k = K.Keys(run_id)
    ring_b = KeyRing.parse(f"{KEY_B},{KEY_A}")
    next_pause = "req_next"
    paused_again = ring_b.encrypt(b'{"paused": "again"}', run_id=run_id, request_id=next_pause)
    paused: list[str] = []

    async def pause_once_read(keys: list[Any]) -> None:
        if k.checkpoint in keys and not paused:  # the run's next pause lands right now
            paused.append(next_pause)
            await redis.set(k.checkpoint, paused_again)
            await redis.hset(k.run, "pause_id", next_pause)

    class PausingAsRead(Redis):  # type: ignore[type-arg]
        async def get(self, name: Any) -> Any:  # type: ignore[override]
            blob = await super().get(name)
            await pause_once_read([name])
            return blob

        def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
            pipe = super().pipeline(transaction, shard_hint)
            execute = pipe.execute

            async def then_pause(raise_on_error: bool = True) -> Any:
                read = [a for args, _ in pipe.command_stack for a in args]
                found = await execute(raise_on_error)
                await pause_once_read(read)
                return found

            pipe.execute = then_pause  # type: ignore[method-assign]
            return pipe

    report = await rotate_checkpoints(PausingAsRead(connection_pool=redis.connection_pool), ring_b)
    assert paused, "the pause never happened: rotation read the checkpoint some other way"
    assert report.damaged == {}
    assert (report.rotated, report.skipped) == (0, 1)
    assert await redis.get(k.checkpoint) == paused_again


async def test_a_worker_without_the_run_s_key_leaves_it_waiting_for_one_that_has_it(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A deploy whose ring lacks a key another process still uses: the decided run is not
    failed (adding the key back could not undo that), it waits, said as an error, and a
    worker holding the key resumes it, once."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("refund-agent", "refund order 123")
    await approve_all(env, run_id)
    lacking = make_env(redis, keyring=KeyRing.parse(KEY_B)).worker("without-a")
    await lacking.consumer.ensure_groups()

    with caplog.at_level("ERROR", logger="agent_host.durable.worker"):
        assert await lacking.consumer.poll(block_ms=1) == 0  # taken, not done

    assert (await env.info(run_id)).status not in ("failed", "succeeded")
    assert env.effects.count("refund") == 0
    [said] = [r.getMessage() for r in caplog.records if run_id in r.getMessage()]
    assert f"run {run_id} waits, not resumed: key 'kA' is not in" in said
    assert "add it back" in said

    await env.drain(env.worker("with-a", idle_ms=1))  # reclaims the entry left pending
    assert (await env.info(run_id)).status == "succeeded"
    assert env.effects.count("refund") == 1


async def test_a_worker_without_the_key_of_a_decision_or_an_input_leaves_the_run_waiting(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A rolling restart that puts a new key first: `serve` already seals decisions and
    new runs' inputs under it, a worker not yet restarted lacks it. The worker leaves
    those runs waiting (it used to fail them for good); once restarted, it goes on."""
    old_ring, new_ring = KeyRing.parse(KEY_A), KeyRing.parse(f"{KEY_B},{KEY_A}")
    before = make_env(redis, keyring=old_ring)
    decided = await before.start("refund-agent", "refund order 123")  # paused under kA
    after = make_env(redis, keyring=new_ring)  # serve, restarted
    await approve_all(after, decided)  # the decision sealed under kB
    started = await after.store.create_run("refund-agent", "refund order 124", "alice")

    not_restarted = before.worker("not-restarted")
    await not_restarted.consumer.ensure_groups()
    with caplog.at_level("ERROR", logger="agent_host.durable.worker"):
        for _ in range(2):
            await not_restarted.consumer.poll(block_ms=1)

    for run_id in (decided, started):
        assert (await after.info(run_id)).status not in ("failed", "succeeded"), run_id
        [said] = [r.getMessage() for r in caplog.records if run_id in r.getMessage()]
        assert f"run {run_id} waits, not resumed:" in said and "'kB'" in said
    assert after.effects.count("refund") == 0

    await after.drain(after.worker("restarted", idle_ms=1))
    assert (await after.info(decided)).status == "succeeded"
    assert after.effects.count("refund") == 1
    assert (await after.info(started)).status == "waiting"  # paused at its own refund


async def test_a_start_with_a_ring_lacking_waiting_runs_keys_says_so(
    redis: Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before any is decided: a worker would leave them waiting, so the start says it (as
    `countersign check` does), naming the key and what to do."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    for order in (123, 124):
        await env.start("refund-agent", f"refund order {order}")
    host, _ = make_host(redis, tmp_path)
    with caplog.at_level(logging.INFO, logger="agent_host.durable.host"):
        host.keyring = KeyRing.parse(KEY_B)  # the key the runs are under left out
        await host.say_keys_gone()
        host.keyring = KeyRing.parse(f"{KEY_B},{KEY_A}")  # put back
        await host.say_keys_gone()

    [said] = [r for r in caplog.records if r.name == "agent_host.durable.host"]
    assert said.levelname == "WARNING"
    assert said.getMessage().startswith(
        "2 under 'kA' of 2 waiting run(s): COUNTERSIGN_ENCRYPTION_KEYS no longer holds that "
        "key, so once decided they wait unresumed for a worker that has it (those decided "
        "already wait now)."
    )


async def test_decided_runs_waiting_for_a_key_are_counted_among_the_waiting(
    redis: Redis,
) -> None:
    """A decided run leaves the pending index; one a worker without its key left waiting
    (its entry read, not acknowledged), or one no worker read yet, still waits for a key.
    `countersign check` and the start count it under its key; a run resumed since, whose
    entry is done, is not counted, nor a stale entry whose run ended."""
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    left, unread = K.new_run_id(), K.new_run_id()
    while K.Keys(unread).shard != K.Keys(left).shard:  # a worker reads one entry a shard
        unread = K.new_run_id()
    for run_id in (left, unread):
        await env.store.create_run("refund-agent", "refund order 123", "alice", run_id)
    await env.drain()
    done = await env.start("refund-agent", "refund order 124")
    await approve_all(env, done)
    await env.drain(env.worker("with-a", idle_ms=1))  # resumed and finished
    assert await waiting_runs_keys(redis) == Counter({"kA": 2})  # pending: counted so
    for run_id in (left, unread):
        await approve_all(env, run_id)
    assert await waiting_runs_keys(redis) == Counter({"kA": 2})  # decided, not read yet

    lacking = make_env(redis, keyring=KeyRing.parse(KEY_B)).worker("without-a")
    await lacking.consumer.ensure_groups()
    await lacking.consumer.poll(block_ms=1)  # takes the shard's first entry, leaves it
    group = K.RESUME_GROUP
    stream = K.Keys(left).shard.resume
    assert (await redis.xpending(stream, group))["pending"] == 1  # `left`'s; `unread` unread
    waiting = await waiting_runs_keys(redis)
    assert waiting == Counter({"kA": 2}), waiting
    assert keys_gone(waiting, ["kB"]) is not None

    # An entry of a run that ended since (a worker finished it and died before its
    # acknowledgement) is stale: not counted, though the run's checkpoint is still there.
    done_stream = K.Keys(done).shard.resume
    await redis.xadd(done_stream, {"type": "resume", "run_id": done, "pause_id": "p_old"})
    assert await waiting_runs_keys(redis) == Counter({"kA": 2})
    # Without the workers' group (not made yet, or lost), every entry is still to be read.
    await redis.xgroup_destroy(stream, group)
    assert await waiting_runs_keys(redis) == Counter({"kA": 2})
    await lacking.consumer.ensure_groups()
    # A damaged pause id (not UTF-8) is a run that does not wait, not a crash of `check`.
    damaged = {"type": "resume", "run_id": done, "pause_id": b"\xff\xfe"}
    entry_id = await redis.xadd(done_stream, damaged)  # type: ignore[arg-type]
    paused_at = await redis.hget(K.Keys(done).run, "pause_id")
    await redis.hset(K.Keys(done).run, "pause_id", b"\xff\xfe")
    assert await waiting_runs_keys(redis) == Counter({"kA": 2})
    await redis.hset(K.Keys(done).run, "pause_id", paused_at)  # (the workers' turn, below)
    await redis.xdel(done_stream, entry_id)

    await env.drain(env.worker("with-a-again", idle_ms=1))
    assert {(await env.info(r)).status for r in (left, unread, done)} == {"succeeded"}
    assert await waiting_runs_keys(redis) == Counter()
