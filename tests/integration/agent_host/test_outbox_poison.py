"""An outbox entry that fails with an error of countersign's own is given up after
POISON_AFTER attempts, never retried for ever in silence: a post's request is marked
undeliverable and dead-lettered, and the administrators are told. Slack's "not now" and
Redis being away are retried as long as they last. Real Redis, the real consumer loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import SlotNotCoveredError

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.bulk import Bulk
from agent_host.approvals.notifier import LoggingNotifier, MessageRef
from agent_host.durable import keys as K
from agent_host.durable.outbox import POISON_AFTER, Outbox
from agent_host.durable.poison import SUSPECT_AFTER
from agent_host.errors import DeliveryFailed, RetryLater
from tests.support.host_env import killed_while_polling, make_env, pending_entries
from tests.support.waiting import eventually


class FailingNotifier(LoggingNotifier):
    """Posts fail with `error` for the first `failing` attempts (for ever: None), then go."""

    def __init__(self, error: Exception, failing: int | None = None) -> None:
        self.error, self.failing = error, failing
        self.attempts = 0
        self.told: list[tuple[str, str]] = []  # (request id, failure code) the admins heard
        self.details: list[str] = []  # and what they read of it

    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None:
        self.attempts += 1
        if self.failing is None or self.attempts <= self.failing:
            raise self.error
        return MessageRef("C-ops", f"1.{self.attempts}")

    async def request_undeliverable(
        self,
        request: ApprovalRequest,
        failure: DeliveryFailed,
        rerouted: MessageRef | None,
        fallback_failure: DeliveryFailed | None = None,
    ) -> None:
        self.told.append((request.request_id, failure.code))
        self.details.append(failure.detail)


async def deliver_until(redis: Redis, outbox: Outbox, done: Any) -> None:
    """The outbox's own loop (reclaiming after 100 ms) until `done()` holds."""
    await outbox.consumer.ensure_groups()
    stop = asyncio.Event()
    running = asyncio.create_task(outbox.consumer.run(stop))
    try:
        await eventually(done, within=20)
    finally:
        stop.set()
        await running


async def test_a_post_failing_with_our_own_error_is_given_up_and_the_admins_told(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.requests(run_id)
    notifier = FailingNotifier(ValueError("a bug rendering this request"))
    outbox = Outbox(env.store, notifier, "poisoned", idle_ms=100)

    async def given_up() -> bool | None:
        return True if notifier.told else None

    await deliver_until(redis, outbox, given_up)

    assert notifier.attempts == POISON_AFTER
    assert notifier.told == [(request.request_id, "countersign_error")]
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.delivery == "undeliverable"
    assert current.status == "pending"  # still decidable from /approvals and the API
    letters: Any = await redis.xrange(K.Keys(request.request_id).shard.deadletter)
    assert [fields[b"request_id"].decode() for _, fields in letters] == [request.request_id]
    assert letters[0][1][b"error"] == b"countersign_error"
    audit = [e for e in await env.store.audit(run_id) if e["event"] == "undeliverable"]
    assert [e["error"] for e in audit] == ["countersign_error"]
    assert await pending_entries(redis, "outbox") == 0  # acknowledged: not retried again


class KilledWhilePosting(FailingNotifier):
    """The post never returns: the process is killed meanwhile (no error is ever caught)."""

    def __init__(self) -> None:
        super().__init__(RuntimeError("never raised"))
        self.taken = asyncio.Event()

    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None:
        self.taken.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_post_that_kills_every_process_taking_it_is_given_up_and_the_admins_told(
    redis: Redis,
) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.requests(run_id)
    for attempt in range(SUSPECT_AFTER + POISON_AFTER):  # then a suspect, alone
        doomed = KilledWhilePosting()
        outbox = Outbox(env.store, doomed, f"killed-{attempt}", idle_ms=100)
        await outbox.consumer.ensure_groups()
        await killed_while_polling(outbox.consumer, doomed.taken)
    assert await pending_entries(redis, "outbox") == 1

    survivor = FailingNotifier(RuntimeError("not reached"), failing=0)
    outbox = Outbox(env.store, survivor, "survivor", idle_ms=100)

    async def given_up() -> bool | None:
        return True if survivor.told else None

    await deliver_until(redis, outbox, given_up)

    assert survivor.attempts == 0  # not taken again
    assert survivor.told == [(request.request_id, "countersign_stopped")]
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.delivery == "undeliverable"
    assert current.status == "pending"  # still decidable from /approvals and the API
    audit = [e for e in await env.store.audit(run_id) if e["event"] == "undeliverable"]
    assert [e["error"] for e in audit] == ["countersign_stopped"]
    assert f"handled alone {POISON_AFTER} times and never finished" in survivor.details[0]
    letters: Any = await redis.xrange(K.Keys(request.request_id).shard.deadletter)
    assert [fields[b"request_id"].decode() for _, fields in letters] == [request.request_id]
    assert await pending_entries(redis, "outbox") == 0


class FailingBulkNotifier(FailingNotifier):
    """A bulk's message fails with an error of ours every time; single posts go."""

    def __init__(self) -> None:
        super().__init__(ValueError("a bug rendering the bulk"), failing=0)
        self.bulk_attempts = 0

    async def bulk_posted(self, bulk: Bulk, requests: list[ApprovalRequest]) -> MessageRef | None:
        self.bulk_attempts += 1
        raise self.error


async def test_a_bulk_message_given_up_posts_each_of_its_calls_on_its_own(redis: Redis) -> None:
    env = make_env(redis)
    env.store.bulk_threshold = 2
    run_id = await env.start("cleanup-agent", "delete /tmp/a /tmp/b /tmp/c")
    requests = await env.requests(run_id)
    assert len(requests) == 3 and len({r.bulk_id for r in requests}) == 1
    notifier = FailingBulkNotifier()
    outbox = Outbox(env.store, notifier, "bulk-poisoned", idle_ms=100)

    async def each_posted() -> bool | None:
        current = await env.store.run_requests(run_id)
        return True if all(r.message_ts for r in current) else None

    await deliver_until(redis, outbox, each_posted)

    assert notifier.bulk_attempts == POISON_AFTER and notifier.attempts == 3
    failed = [e for e in await env.store.audit(run_id) if e["event"] == "delivery_failed"]
    assert [(e["notification"], e["error"]) for e in failed] == [
        ("requests_posted_bulk", "countersign_error")
    ]
    assert await pending_entries(redis, "outbox") == 0


@pytest.mark.parametrize(
    "not_now",
    [RetryLater("Slack unreachable"), SlotNotCoveredError("a cluster slot is moving")],
    ids=["slack", "redis-cluster"],
)
async def test_slack_or_redis_saying_not_now_is_retried_as_long_as_it_lasts(
    redis: Redis, not_now: Exception
) -> None:
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.requests(run_id)
    notifier = FailingNotifier(not_now, failing=POISON_AFTER + 2)
    outbox = Outbox(env.store, notifier, "patient", idle_ms=100)

    async def posted() -> bool | None:
        current = await env.store.get_request(request.request_id)
        return True if current is not None and current.message_ts else None

    await deliver_until(redis, outbox, posted)

    assert notifier.attempts == POISON_AFTER + 3 and notifier.told == []
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.delivery != "undeliverable"


class StoppedBeforeTelling(FailingNotifier):
    """Slack refuses the post for good; the fallback takes it; the process stops (an error
    of its own here) before the administrators are told, once."""

    def __init__(self) -> None:
        super().__init__(DeliveryFailed("not_in_channel", "C-secret"))
        self.fallbacks = 0

    async def request_rerouted(
        self, request: ApprovalRequest, failure: DeliveryFailed
    ) -> MessageRef | None:
        self.fallbacks += 1
        return MessageRef("C-fallback", f"2.{self.fallbacks}")

    async def request_undeliverable(
        self,
        request: ApprovalRequest,
        failure: DeliveryFailed,
        rerouted: MessageRef | None,
        fallback_failure: DeliveryFailed | None = None,
    ) -> None:
        if self.fallbacks == 1:
            raise RuntimeError("stopped before the administrators were told")
        await super().request_undeliverable(request, failure, rerouted, fallback_failure)


async def test_a_fallback_post_is_not_taken_as_delivered_before_the_admins_are_told(
    redis: Redis,
) -> None:
    """Stopped between the fallback post and telling the administrators: the retry did
    not post again, took the request as delivered, and nobody was ever told. Now it posts
    again and tells them; the message recorded is the one they were told of."""
    env = make_env(redis)
    run_id = await env.start("refund-agent", "refund order 123")
    [request] = await env.requests(run_id)
    notifier = StoppedBeforeTelling()
    outbox = Outbox(env.store, notifier, "stopping", idle_ms=100)

    async def told() -> bool | None:
        return True if notifier.told else None

    await deliver_until(redis, outbox, told)

    assert notifier.told == [(request.request_id, "not_in_channel")]
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.delivery == "undeliverable"
    assert (current.message_channel, current.message_ts) == ("C-fallback", "2.2")
