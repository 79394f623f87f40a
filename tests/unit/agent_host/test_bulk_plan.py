"""Which calls of a pause share one message, what that message binds, and how its updates
are coalesced (agent_host.approvals.bulk, agent_host.durable.bulk_delivery)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from agent_host.approvals import ApprovalRequest, RequestStatus, Route
from agent_host.approvals.bulk import Bulk, bulk_digest, plan_bulks
from agent_host.durable.bulk_delivery import Coalesced
from agent_host.runtime.decisions import Approve

NOW = 1_700_000_000.0


def request(n: int, destination: str = "C1", **changes: Any) -> ApprovalRequest:
    base = ApprovalRequest(
        request_id=f"req_abcdef12_{n:04d}",
        run_id="run_abcdef12",
        call_id=f"call_{n}",
        agent="cleanup-agent",
        tool="delete_file",
        arguments={"path": f"/tmp/{n}"},
        call_hash=f"{n:064x}",
        kind="approval",
        reason="destructive",
        severity="high",
        requested_by="U0REQ",
        created_at=NOW,
        expires_at=NOW + 60,
        route=Route(route_id="r1", destination=destination),
        pause_id="req_abcdef12_0001",
    )
    return replace(base, **changes)


def test_more_calls_than_the_threshold_to_one_channel_make_one_bulk() -> None:
    calls = [request(n) for n in range(1, 7)]
    [bulk] = plan_bulks(calls, 5)
    assert bulk.bulk_id == calls[0].request_id
    assert bulk.members == tuple((c.request_id, c.call_hash) for c in calls)
    assert bulk.destination == "C1" and bulk.pause_id == "req_abcdef12_0001"
    assert all(c.bulk_id == bulk.bulk_id for c in calls)
    assert bulk.intact()


def test_the_threshold_itself_and_zero_post_each_call_alone() -> None:
    five = [request(n) for n in range(1, 6)]
    assert plan_bulks(five, 5) == []
    assert all(c.bulk_id == "" for c in five)
    seven = [request(n) for n in range(1, 8)]
    assert plan_bulks(seven, 0) == []
    assert all(c.bulk_id == "" for c in seven)


def test_calls_are_grouped_by_channel_whatever_their_route() -> None:
    here = [request(n, route=Route(route_id=f"r{n % 2}", destination="C1")) for n in range(1, 7)]
    there = [request(n, "C2") for n in range(7, 10)]
    [bulk] = plan_bulks(here + there, 5)
    assert bulk.request_ids == [c.request_id for c in here]
    assert all(c.bulk_id == "" for c in there)


def test_questions_and_calls_a_standing_approval_covered_are_posted_alone() -> None:
    calls = [request(n) for n in range(1, 7)]
    calls[0] = replace(calls[0], kind="question")
    calls[1] = replace(
        calls[1], status=RequestStatus.APPROVED, decision=Approve(decided_by="U1", via="standing")
    )
    assert plan_bulks(calls, 5) == []  # four left: not more than five
    [bulk] = plan_bulks([*calls, request(7), request(8)], 5)
    assert calls[0].request_id not in bulk.request_ids
    assert calls[1].request_id not in bulk.request_ids
    assert bulk.bulk_id == calls[2].request_id


def test_the_digest_binds_every_call_and_hash_in_order() -> None:
    [bulk] = plan_bulks([request(n) for n in range(1, 8)], 5)
    members = list(bulk.members)
    assert bulk_digest(members) == bulk.digest
    assert bulk_digest(members[::-1]) != bulk.digest
    assert bulk_digest([*members, ("req_abcdef12_0099", "0" * 64)]) != bulk.digest
    changed = [(members[0][0], "f" * 64), *members[1:]]
    assert bulk_digest(changed) != bulk.digest
    assert not replace(bulk, members=tuple(changed)).intact()


def test_a_bulk_round_trips_through_its_stored_fields() -> None:
    [bulk] = plan_bulks([request(n) for n in range(1, 8)], 5)
    stored = bulk.to_hash() | {"channel": "C1", "ts": "1.2", "split_by": "U9", "fallback": "1"}
    again = Bulk.from_hash(stored)
    assert again.members == bulk.members and again.digest == bulk.digest
    assert (again.channel, again.ts, again.split_by, again.fallback) == ("C1", "1.2", "U9", True)
    assert again.intact() and again.posted


async def test_a_burst_of_updates_costs_one_run_at_a_time_and_one_after() -> None:
    runs = 0
    gate = asyncio.Event()

    async def job() -> None:
        nonlocal runs
        runs += 1
        await gate.wait()

    coalesced = Coalesced()
    first = asyncio.create_task(coalesced.run("b", job))
    await asyncio.sleep(0)  # the first run has started and waits at the gate
    burst = [asyncio.create_task(coalesced.run("b", job)) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *burst)
    assert runs == 2  # the one in flight, and one for everything that came meanwhile
    assert coalesced._locks == {} and coalesced._next == {}


async def test_callers_that_joined_a_failed_run_fail_too() -> None:
    gate = asyncio.Event()
    calls = 0

    async def job() -> None:
        nonlocal calls
        calls += 1
        await gate.wait()
        if calls == 2:
            raise RuntimeError("Slack said no")

    coalesced = Coalesced()
    first = asyncio.create_task(coalesced.run("b", job))
    await asyncio.sleep(0)
    joined = [asyncio.create_task(coalesced.run("b", job)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    await first
    results = await asyncio.gather(*joined, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)  # their entries are retried
