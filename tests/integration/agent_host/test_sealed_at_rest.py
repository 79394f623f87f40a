"""Run content sealed at rest in a real Redis: stored sealed, read back plain by every reader
of the store; a value that cannot be opened is shown as unreadable, and nothing runs on it;
data written before sealing still reads, and `keys rotate` seals it and re-seals the rest."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import redis as redis_sync
from redis.asyncio import Redis

from agent_host.approvals import ApprovalService, Route
from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.redis_ledger import DONE, FAILED, RedisLedger
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.durable.sealed_fields import PREFIX, FieldSealer, is_sealed
from agent_host.durable.sealed_records import SealedRecords
from agent_host.durable.sealed_rotation import RESEAL, reseal_run
from agent_host.errors import SealedFieldError
from agent_host.runtime.decisions import Answer, Approve, Reject
from agent_host.runtime.ledger import Claim
from tests.support.at_rest import files_holding, keys_holding, sealed_kids
from tests.support.host_env import Env, make_env
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.waiting import eventually

KEY_A = generate_key("kA")
KEY_B = generate_key("kB")


def canary() -> str:
    return f"cnry{secrets.token_hex(6)}"


async def approve_all(env: Env, run_id: str, by: str = "bob") -> None:
    for request in await env.pending_requests(run_id):
        assert (await env.store.decide(request.request_id, Approve(decided_by=by))).accepted


async def reject_all(env: Env, run_id: str, message: str) -> None:
    for request in await env.pending_requests(run_id):
        reject = Reject(decided_by="bob", message=message)
        assert (await env.store.decide(request.request_id, reject)).accepted


async def hget(redis: Redis, key: str, name: str) -> str:
    value: Any = await redis.hget(key, name)
    assert value is not None, f"{key} has no {name}"
    return str(value.decode())


async def test_content_is_sealed_in_redis_and_the_store_reads_it_back_plain(redis: Redis) -> None:
    secret, why = canary(), canary()
    env = make_env(redis)
    done = await env.start("cleanup-agent", f"remove /srv/{secret}.docx")
    rejected = await env.start("cleanup-agent", f"remove /srv/{secret}-2.docx")
    [request] = await env.pending_requests(done)
    k = K.Keys(done)
    assert is_sealed(await hget(redis, k.run, "input"))
    for name in ("arguments", "reason"):
        assert is_sealed(await hget(redis, k.request(request.request_id), name))
    assert request.arguments == {"path": f"/srv/{secret}.docx"}  # read back plain
    await approve_all(env, done)
    await reject_all(env, rejected, f"keep it: {why}")
    await env.drain()

    assert await keys_holding(redis, secret) == []
    assert await keys_holding(redis, why) == []
    info = await env.info(done)
    assert info.input == f"remove /srv/{secret}.docx" and info.unreadable == {}
    assert info.output == f"Cleanup finished: Deleted /srv/{secret}.docx"
    assert is_sealed(await hget(redis, k.run, "output"))
    ledger: Any = await redis.hgetall(k.ledger)
    assert ledger and all(v.startswith((DONE + PREFIX).encode()) for v in ledger.values())
    assert why in (await env.info(rejected)).output
    [decided] = await env.requests(rejected)
    assert isinstance(decided.decision, Reject) and decided.decision.message == f"keep it: {why}"
    audit = await env.store.audit(rejected)
    assert why in next(e["detail"] for e in audit if e["event"] == "rejected")
    assert why in next(e["detail"] for e in audit if e["event"] == "succeeded")
    raw_audit = await redis.xrange(K.Keys(rejected).audit)
    assert all(why.encode() not in value for _, entry in raw_audit for value in entry.values())


async def test_a_value_moved_to_another_request_is_unreadable_and_can_only_be_rejected(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx /srv/b.docx")
    first, second = await env.pending_requests(run_id)
    k = K.Keys(run_id)
    a = await hget(redis, k.request(first.request_id), "arguments")
    b = await hget(redis, k.request(second.request_id), "arguments")
    await redis.hset(k.request(first.request_id), "arguments", b)  # swapped
    await redis.hset(k.request(second.request_id), "arguments", a)

    shown = await env.store.get_request(first.request_id)
    assert shown is not None and set(shown.unreadable) == {"arguments"}
    assert shown.arguments == (
        "[unreadable: failed authentication under key 'k1': altered, or copied from another "
        "field, request or run]"
    )
    assert shown.reason == "destructive: deletes a file"  # the rest reads as before
    page = await env.store.list_pending()
    assert {r.request_id for r in page.requests} == {first.request_id, second.request_id}

    service = ApprovalService(env.store)
    refused = await service.decide(first.request_id, Approve(decided_by="bob"), via="api")
    assert refused.outcome == "refused" and "could not be decrypted" in refused.reason
    assert "arguments" in refused.reason
    for request in (first, second):
        reject = Reject(decided_by="bob", message="cannot tell what it is")
        assert (await service.decide(request.request_id, reject, via="api")).accepted
    await env.drain()
    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("delete_file") == 0


async def test_a_decision_that_cannot_be_read_fails_the_run_closed(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx")
    [request] = await env.pending_requests(run_id)
    await approve_all(env, run_id)
    await redis.hset(K.Keys(run_id).request(request.request_id), "decision", PREFIX + "AAAA")

    shown = await env.store.get_request(request.request_id)
    assert shown is not None and shown.status == "approved"
    assert shown.decision is not None and shown.decision.note.startswith("[unreadable: ")
    await env.drain()

    info = await env.info(run_id)
    assert info.status == "failed", info
    assert f"the decision on request {request.request_id} could not be decrypted" in info.error
    assert env.effects.count("delete_file") == 0


async def test_an_input_that_cannot_be_read_fails_the_run_before_it_starts(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.store.create_run("cleanup-agent", "remove /srv/a.docx", "alice")
    other = await env.store.create_run("cleanup-agent", "remove /srv/b.docx", "alice")
    await redis.hset(K.Keys(run_id).run, "input", await hget(redis, K.Keys(other).run, "input"))
    await env.drain()

    info = await env.info(run_id)
    assert info.status == "failed" and "input could not be decrypted" in info.error, info
    assert info.input.startswith("[unreadable: failed authentication")
    assert await env.status(other) == "waiting"


async def test_a_recorded_result_that_cannot_be_read_is_refused_not_rerun(redis: Redis) -> None:
    ledger = RedisLedger(redis, KeyRing.parse(KEY_A))
    run_id = K.new_run_id()
    assert (await ledger.claim(run_id, "call_1_1")).status == "claimed"
    await ledger.finish(run_id, "call_1_1", "Refund issued: $42.50")
    assert (await ledger.claim(run_id, "call_1_1")).result == "Refund issued: $42.50"
    stored = await hget(redis, K.Keys(run_id).ledger, "call_1_1")
    await redis.hset(K.Keys(run_id).ledger, "call_1_2", stored)  # another call's result

    try:
        await ledger.claim(run_id, "call_1_2")
    except SealedFieldError as exc:
        assert "failed authentication" in str(exc)
    else:
        raise AssertionError("a result copied to another call was accepted")


async def test_a_tool_failure_in_the_ledger_is_sealed_read_back_as_a_failure_and_rotated(
    redis: Redis,
) -> None:
    """A call whose tool raised is recorded as a failure: a worker taking over after a crash
    replays it as the error it was, never as a call that executed."""
    secret = canary()
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx")
    ledger = RedisLedger(redis, KeyRing.parse(KEY_A))
    failure = f"Tool issue_refund failed: card {secret} declined"
    assert (await ledger.claim(run_id, "call_7_1")).status == "claimed"
    await ledger.finish(run_id, "call_7_1", failure, "error")
    await ledger.claim(run_id, "call_7_2")
    await ledger.finish(run_id, "call_7_2", "Refund issued")

    stored = await hget(redis, K.Keys(run_id).ledger, "call_7_1")
    assert stored.startswith(FAILED + PREFIX) and await keys_holding(redis, secret) == []
    assert await ledger.claim(run_id, "call_7_1") == Claim("finished", failure, "error")
    assert await ledger.claim(run_id, "call_7_2") == Claim("finished", "Refund issued")
    recorded = await ledger.recorded(run_id)
    assert (recorded["call_7_1"].outcome, recorded["call_7_2"].outcome) == ("error", "executed")

    ring = KeyRing.parse(f"{KEY_B},{KEY_A}")
    await rotate_checkpoints(redis, ring)

    assert (await sealed_kids(redis))[K.Keys(run_id).ledger] == {"kB"}
    rotated = RedisLedger(redis, KeyRing.parse(KEY_B))
    assert await rotated.claim(run_id, "call_7_1") == Claim("finished", failure, "error")


class Plaintext(FieldSealer):
    """The writer as it was before fields were sealed."""

    def seal(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
        return value


def as_before_sealing(env: Env) -> Env:
    env.store.sealed = SealedRecords(Plaintext(env.keyring))
    ledger = env.runner.ledger
    assert isinstance(ledger, RedisLedger)
    ledger.sealer = Plaintext(env.keyring)
    return env


async def test_data_written_before_sealing_reads_and_rotation_seals_all_of_it(
    redis_server_factory: RedisServerFactory,
) -> None:
    # its own Redis, whose append-only file is plain commands (no RDB preamble to compress)
    server = redis_server_factory(appendfsync="always", extra_args=["--aof-use-rdb-preamble", "no"])
    async with Redis.from_url(server.url) as redis:
        await _written_before_sealing_then_rotated(redis, server.data_dir)


async def _written_before_sealing_then_rotated(redis: Redis, data_dir: Path) -> None:
    secret, why = canary(), canary()
    old = as_before_sealing(make_env(redis, keyring=KeyRing.parse(KEY_A)))
    finished = await old.start("cleanup-agent", f"remove /srv/{secret}.docx")
    rejected = await old.start("repo-admin", f"delete repo prod-{secret}")
    waiting = await old.start("support-agent", f"where is {secret}?")
    await approve_all(old, finished)
    await reject_all(old, rejected, f"no: {why}")
    await old.drain()
    assert len(await keys_holding(redis, secret)) >= 8  # run and request hashes, audit, ledger
    assert await keys_holding(redis, why) != []
    assert files_holding(data_dir, secret) != []

    ring = KeyRing.parse(f"{KEY_B},{KEY_A}")
    env = make_env(redis, keyring=ring)
    assert (await env.info(finished)).input == f"remove /srv/{secret}.docx"  # read as it is
    report = await rotate_checkpoints(redis, ring)

    assert report.damaged == {} and report.fields >= 10
    assert report.aof == "append-only file rewritten"
    assert await keys_holding(redis, secret) == []
    assert await keys_holding(redis, why) == []
    assert await eventually(lambda: files_holding(data_dir, secret) == [])
    assert files_holding(data_dir, why) == []
    assert set.union(*(await sealed_kids(redis)).values()) == {"kB"}
    assert (await env.info(finished)).output == f"Cleanup finished: Deleted /srv/{secret}.docx"
    assert why in (await env.info(rejected)).output
    details = [e.get("detail", "") for e in await env.store.audit(rejected)]
    assert any(why in d for d in details) and not any("[unreadable" in d for d in details)
    [question] = await env.pending_requests(waiting)
    assert secret in question.question

    again = await rotate_checkpoints(redis, ring)
    assert (again.fields, again.damaged, again.aof) == (0, {}, "")
    # the old key can go: the waiting run is answered and finishes under the new key alone
    fresh = make_env(redis, keyring=KeyRing.parse(KEY_B))
    service = ApprovalService(fresh.store)
    answer = Answer(decided_by="bob", text="Monday")
    assert (await service.decide(question.request_id, answer, via="api")).accepted
    await fresh.drain()
    assert "Monday" in (await fresh.info(waiting)).output


async def test_rotation_reports_a_damaged_field_and_re_seals_the_others(redis: Redis) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx")
    [request] = await env.pending_requests(run_id)
    gone = FieldSealer(KeyRing.parse(generate_key("kGone")))
    k = K.Keys(run_id)
    lost = gone.seal("lost", run_id=run_id, record_id=request.request_id, field="reason")
    await redis.hset(k.request(request.request_id), "reason", lost)

    report = await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))

    assert report.rotated == 1 and report.fields == 2  # the run's input, the arguments
    assert f"request {request.request_id} field 'reason' not re-sealed" in report.damaged[run_id]
    assert "'kGone'" in report.damaged[run_id]
    assert await hget(redis, k.request(request.request_id), "reason") == lost  # left as it was
    assert (await sealed_kids(redis))[k.request(request.request_id)] == {"kB", "kGone"}


async def test_rotation_leaves_a_field_rewritten_meanwhile_as_it_is(
    redis: Redis, redis_url: str
) -> None:
    env = make_env(redis, keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("cleanup-agent", "remove /srv/a.docx")
    ring = KeyRing.parse(f"{KEY_B},{KEY_A}")
    k = K.Keys(run_id)
    meanwhile = FieldSealer(ring).seal("rewritten", run_id=run_id, record_id=run_id, field="input")

    class Racing(FieldSealer):
        def reseal(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
            fresh = super().reseal(value, run_id=run_id, record_id=record_id, field=field)
            if field == "input":
                with redis_sync.Redis.from_url(redis_url) as other:
                    other.hset(k.run, "input", meanwhile)
            return fresh

    done = await reseal_run(redis, redis.register_script(RESEAL), Racing(ring), run_id)

    assert done.damaged == [] and done.fields == 2  # the arguments and the reason, not input
    assert await hget(redis, k.run, "input") == meanwhile


async def test_a_quorum_votes_comment_is_sealed_and_re_sealed_by_rotation(redis: Redis) -> None:
    """A vote short of the quorum keeps its decision only in its audit entry: sealed there,
    and rotated there, so retiring the old key loses no comment."""

    class Quorum2:
        async def route(self, agent: str, tool: str, severity: str) -> Route:
            return Route(route_id="q2", quorum=2)

    words = canary()
    env = make_env(redis, router=Quorum2(), keyring=KeyRing.parse(KEY_A))
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.pending_requests(run_id)
    vote = Approve(decided_by="U-alice", comment=f"first look {words}")
    assert (await env.store.decide(request.request_id, vote)).outcome == "progress"
    assert not await keys_holding(redis, words)  # sealed in the audit entry too

    await rotate_checkpoints(redis, KeyRing.parse(f"{KEY_B},{KEY_A}"))

    assert (await sealed_kids(redis))[K.Keys(run_id).audit] == {"kB"}
    fresh = make_env(redis, router=Quorum2(), keyring=KeyRing.parse(KEY_B))
    votes = [e for e in await fresh.store.audit(run_id) if e["event"] == "approval"]
    assert [words in e["decision"] for e in votes] == [True]
