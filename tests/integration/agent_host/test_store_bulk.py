"""A pause of many calls for one channel: PAUSE writes the bulk's record and one outbox entry
for it in the same step as the requests; its message is recorded once; "one by one" is
taken once. Real Redis, no chat side (agent_host.durable.bulks)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.crc import key_slot

from agent_host.approvals.bulk import bulk_digest
from agent_host.durable import keys as K
from agent_host.durable.bulks import BulkBook
from agent_host.durable.connections import as_text
from agent_host.runtime.decisions import Approve
from tests.support.host_env import Env, make_env
from tests.support.keyspace import xrange_all

SEVEN = "remove " + " ".join(f"/tmp/f{n}" for n in range(7))


def bulk_env(redis: Redis, threshold: int = 5) -> Env:
    env = make_env(redis)
    env.store.bulk_threshold = threshold  # what the Host passes from the settings
    return env


async def outbox(redis: Redis) -> list[dict[str, str]]:
    return [
        {as_text(a): as_text(b) for a, b in fields.items()}
        for _, fields in await xrange_all(redis, "outbox")
    ]


async def test_pause_writes_the_bulk_and_one_entry_for_it_with_the_requests(
    redis: Redis,
) -> None:
    env = bulk_env(redis)
    run_id = await env.start("cleanup-agent", SEVEN)
    requests = await env.requests(run_id)
    assert len(requests) == 7
    bulk_id = requests[0].request_id
    assert all(r.bulk_id == bulk_id and r.bulk_ts == "" for r in requests)

    entries = await outbox(redis)
    assert [e for e in entries if e["type"] == "request_posted"] == []
    assert [e for e in entries if e["type"] == "requests_posted_bulk"] == [
        {"type": "requests_posted_bulk", "bulk_id": bulk_id}
    ]
    bulk = await BulkBook(env.store).get(bulk_id)
    assert bulk is not None and bulk.intact() and not bulk.posted
    assert bulk.members == tuple((r.request_id, r.call_hash) for r in requests)
    assert bulk.digest == bulk_digest(bulk.members)
    assert (bulk.run_id, bulk.pause_id, bulk.destination) == (run_id, bulk_id, "C-ops")
    k = K.Keys(run_id)
    key = k.bulk(bulk_id)
    assert key_slot(key.encode()) == key_slot(k.run.encode())  # one cluster slot


async def test_the_threshold_and_off(redis: Redis) -> None:
    env = bulk_env(redis, threshold=7)
    run_id = await env.start("cleanup-agent", SEVEN)  # 7 is not more than 7
    assert all(not r.bulk_id for r in await env.requests(run_id))
    assert [e["type"] for e in await outbox(redis)] == ["request_posted"] * 7


async def test_the_message_is_recorded_once_and_a_call_posted_alone_keeps_its_own(
    redis: Redis,
) -> None:
    env = bulk_env(redis)
    run_id = await env.start("cleanup-agent", SEVEN)
    requests = await env.requests(run_id)
    book = BulkBook(env.store)
    bulk = await book.get(requests[0].bulk_id)
    assert bulk is not None
    alone = requests[2]  # e.g. rerouted on its own before the message was recorded
    await env.store.set_message_ref(alone.request_id, "C-other", "9.9")

    assert await book.record_posted(bulk, "C-ops", "1.5")
    assert not await book.record_posted(bulk, "C-ops", "2.5")  # a second post is not kept
    for request in await env.requests(run_id):
        assert request.bulk_ts == "1.5"
        if request.request_id == alone.request_id:
            assert (request.message_channel, request.message_ts) == ("C-other", "9.9")
            assert not request.only_in_bulk
        else:
            assert (request.message_channel, request.message_ts) == ("C-ops", "1.5")
            assert request.only_in_bulk
    again = await book.get(bulk.bulk_id)
    assert again is not None and (again.channel, again.ts) == ("C-ops", "1.5")


async def test_one_by_one_is_taken_once_and_queues_only_the_calls_still_waiting(
    redis: Redis,
) -> None:
    env = bulk_env(redis)
    run_id = await env.start("cleanup-agent", SEVEN)
    requests = await env.requests(run_id)
    book = BulkBook(env.store)
    bulk = await book.get(requests[0].bulk_id)
    assert bulk is not None
    await book.record_posted(bulk, "C-ops", "1.5")
    decided = requests[1]
    result = await env.store.decide(
        decided.request_id, Approve(decided_by="u", call_hash=decided.call_hash)
    )
    assert result.outcome == "decided"
    before = len(await outbox(redis))

    assert await book.split(bulk, "U1") == ("split", 6)
    assert await book.split(bulk, "U2") == ("taken", 0)
    added: list[Any] = (await outbox(redis))[before:]
    posted = [e["request_id"] for e in added if e["type"] == "request_posted"]
    assert posted == [r.request_id for r in requests if r.request_id != decided.request_id]
    assert [e for e in added if e["type"] == "bulk_updated"] == [
        {"type": "bulk_updated", "bulk_id": bulk.bulk_id}
    ]
    current = await book.get(bulk.bulk_id)
    assert current is not None and current.split_by == "U1"
    events = [e for e in await env.store.audit(run_id) if e["event"] == "bulk_split"]
    assert len(events) == 1 and events[0]["actor"] == "U1" and events[0]["detail"] == "6"
