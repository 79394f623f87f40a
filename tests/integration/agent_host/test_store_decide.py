"""The decide compare-and-set: one terminal decision per request, quorum, whole-turn resume."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.runtime.decisions import Approve, Reject, RequestChanges
from tests.support.host_env import make_env, resume_entries
from tests.support.keyspace import metric, xlen_all
from tests.support.routers import QuorumRouter


async def test_same_approval_delivered_20_times_decides_once_and_runs_once(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    assert await xlen_all(redis, "resume") == 1  # the start entry

    results = await asyncio.gather(
        *(env.store.decide(request.request_id, Approve(decided_by="bob")) for _ in range(20))
    )

    outcomes = [r.outcome for r in results]
    assert outcomes.count("decided") == 1
    assert set(outcomes) <= {"decided", "already_decided"}
    assert sum(r.resume_queued for r in results) == 1
    assert await xlen_all(redis, "resume") - 1 == 1
    assert len(await resume_entries(redis, run_id)) == 1
    for r in results:
        assert r.request is not None and r.request.decided_by == "bob"
    assert int(await metric(redis, "decisions_approved")) == 1

    w1, w2 = env.worker("w1"), env.worker("w2")
    await asyncio.gather(env.drain(w1), env.drain(w2))
    assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == 1
    assert "Refund issued" in (await env.info(run_id)).output


async def test_approve_racing_reject_gives_exactly_one_terminal_status(redis: Redis) -> None:
    env = make_env(redis)
    runs = [await env.start("refund-agent", f"refund order {n}") for n in ("123", "124", "200")]
    for run_id in runs:
        (request,) = await env.requests(run_id)
        decisions = [Approve(decided_by="bob"), Reject(decided_by="carol")] * 5
        results = await asyncio.gather(
            *(env.store.decide(request.request_id, d) for d in decisions)
        )
        winners = [r for r in results if r.outcome == "decided"]
        assert len(winners) == 1
        assert all(r.outcome == "already_decided" for r in results if r not in winners)
        stored = await env.store.get_request(request.request_id)
        assert stored is not None and stored.status in ("approved", "rejected")
        assert stored.decided_by == ("bob" if stored.status == "approved" else "carol")
        assert all(r.request is not None and r.request.status == stored.status for r in results)
        assert len(await resume_entries(redis, run_id)) == 1

    await env.drain()
    approved = 0
    for run_id in runs:
        (request,) = await env.requests(run_id)
        approved += request.status == "approved"
        assert await env.status(run_id) == "succeeded"
    assert env.effects.count("refund") == approved
    statuses = ("approved", "rejected", "changes_requested", "answered", "expired")
    total = sum([await metric(redis, f"decisions_{status}") for status in statuses])
    assert total == 3


async def test_late_deciders_are_told_who_decided(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    first = await env.store.decide(request.request_id, Reject(decided_by="carol", message="no"))
    assert first.outcome == "decided" and first.resume_queued
    late = await env.store.decide(request.request_id, Approve(decided_by="bob"))
    assert late.outcome == "already_decided" and not late.accepted and not late.resume_queued
    assert late.request is not None
    assert late.request.decided_by == "carol" and late.request.status == "rejected"
    assert (
        late.request.decision is not None
        and getattr(late.request.decision, "message", None) == "no"
    )
    assert len(await resume_entries(redis, run_id)) == 1


async def test_unknown_and_malformed_request_ids_are_not_found(redis: Redis) -> None:
    env = make_env(redis)
    for rid in ("req_0123456789abcdef_1", "nonsense", "run_0123456789abcdef"):
        assert (await env.store.decide(rid, Approve(decided_by="x"))).outcome == "not_found"
    assert await redis.dbsize() == 0


async def test_quorum_of_two_needs_two_distinct_approvers(redis: Redis) -> None:
    env = make_env(redis, router=QuorumRouter(2))
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    rid = request.request_id
    assert request.route.quorum == 2

    first = await env.store.decide(rid, Approve(decided_by="bob"))
    assert first.outcome == "progress" and first.accepted and not first.resume_queued
    assert first.request is not None and first.request.status == "pending"
    assert first.request.approvals == ["bob"]

    again = await env.store.decide(rid, Approve(decided_by="bob"))
    assert again.outcome == "duplicate_vote" and not again.accepted
    assert again.request is not None and again.request.approvals == ["bob"]
    assert await resume_entries(redis, run_id) == []
    await env.drain()
    assert env.effects.count("refund") == 0 and await env.status(run_id) == "waiting"

    second = await env.store.decide(rid, Approve(decided_by="dave"))
    assert second.outcome == "decided" and second.resume_queued
    assert second.request is not None and second.request.status == "approved"
    assert second.request.approvals == ["bob", "dave"]
    assert second.request.decided_by == "dave"
    assert len(await resume_entries(redis, run_id)) == 1

    await env.drain()
    assert await env.status(run_id) == "succeeded" and env.effects.count("refund") == 1


async def test_quorum_any_reject_rejects(redis: Redis) -> None:
    env = make_env(redis, router=QuorumRouter(2))
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    assert (await env.store.decide(request.request_id, Approve(decided_by="bob"))).outcome == (
        "progress"
    )
    reject = await env.store.decide(request.request_id, Reject(decided_by="eve", message="no"))
    assert reject.outcome == "decided" and reject.resume_queued
    late = await env.store.decide(request.request_id, Approve(decided_by="dave"))
    assert late.outcome == "already_decided"
    assert late.request is not None and late.request.decided_by == "eve"
    await env.drain()
    assert env.effects.count("refund") == 0
    assert "not approved" in (await env.info(run_id)).output


async def test_quorum_concurrent_distinct_approvers_decide_once(redis: Redis) -> None:
    env = make_env(redis, router=QuorumRouter(2))
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    voters = [f"user{n}" for n in range(8)] * 2
    results = await asyncio.gather(
        *(env.store.decide(request.request_id, Approve(decided_by=v)) for v in voters)
    )
    outcomes = [r.outcome for r in results]
    assert outcomes.count("progress") == 1
    assert outcomes.count("decided") == 1
    assert sum(r.resume_queued for r in results) == 1
    stored = await env.store.get_request(request.request_id)
    assert stored is not None and stored.status == "approved" and len(stored.approvals) == 2
    assert len(await resume_entries(redis, run_id)) == 1


async def test_a_turn_resumes_only_when_every_gated_call_is_decided(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /tmp/a.docx and /tmp/b.docx")
    first, second = await env.requests(run_id)

    one = await env.store.decide(first.request_id, Approve(decided_by="bob"))
    assert one.outcome == "decided" and not one.resume_queued
    assert await resume_entries(redis, run_id) == []
    assert await env.store.redis.hget(K.Keys(run_id).run, "undecided") == b"1"
    await env.drain()
    assert await env.status(run_id) == "waiting"
    assert env.effects.count("delete_file") == 0  # nothing of the turn ran yet

    two = await env.store.decide(second.request_id, RequestChanges(decided_by="carol"))
    assert two.outcome == "decided" and two.resume_queued
    assert len(await resume_entries(redis, run_id)) == 1
    again = await env.store.decide(second.request_id, Approve(decided_by="carol"))
    assert again.outcome == "already_decided" and not again.resume_queued
    assert len(await resume_entries(redis, run_id)) == 1

    await env.drain()
    assert await env.status(run_id) == "succeeded"
    assert [e["path"] for e in env.effects.all_events()] == ["/tmp/a.docx"]


async def test_both_calls_of_a_turn_decided_concurrently_queue_one_resume(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("cleanup-agent", "remove /tmp/a /tmp/b /tmp/c")
    requests = await env.requests(run_id)
    assert len(requests) == 3
    results = await asyncio.gather(
        *(
            env.store.decide(r.request_id, Approve(decided_by=f"u{n}"))
            for r in requests
            for n in range(4)
        )
    )
    assert [r.outcome for r in results].count("decided") == 3
    assert sum(r.resume_queued for r in results) == 1
    assert len(await resume_entries(redis, run_id)) == 1
    await env.drain()
    assert env.effects.count("delete_file") == 3
    assert await env.status(run_id) == "succeeded"


async def test_decision_on_a_different_call_hash_is_refused(redis: Redis) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    wrong = await env.store.decide(
        request.request_id, Approve(decided_by="bob", call_hash="0" * 64)
    )
    assert wrong.outcome == "hash_mismatch" and not wrong.accepted
    assert wrong.request is not None and wrong.request.status == "pending"
    assert await resume_entries(redis, run_id) == []
    right = await env.store.decide(
        request.request_id, Approve(decided_by="bob", call_hash=request.call_hash)
    )
    assert right.outcome == "decided" and right.resume_queued
