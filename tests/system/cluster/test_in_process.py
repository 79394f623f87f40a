"""In process, on a real 3-master Redis Cluster: a sample of the bot suite
(tests/integration/bot), the stack's cluster mode over several shards and masters, and the bugs
found on the way.

The sampled flows are the bot suite's own test functions, called with a cluster node's URL in
place of their `redis_url` fixture: `running_stack` hands that URL to `build`, whose
`open_redis` detects the cluster and uses `redis.asyncio.cluster.RedisCluster`. They expect a
fresh database, so `flushed_cluster_url` empties every master first (what the `redis_url`
fixture's FLUSHDB does on a single server); nothing else in `running_stack` stands in the way.

Found by this suite (the first two were fixed in the code while it was being written, so
their tests below are plain regression tests now):

A. agent_host/durable/connections.py `open_redis` returned the RedisCluster client
uninitialized, and
its first use is a burst of concurrent commands (every shard's resume and outbox consumer
starts at once). redis-py (8.1.0) then sent some commands to the wrong master (MOVED) and,
after `reinitialize_steps` MOVEDs, `aclose()`d the client from inside a command while other
coroutines used its connections: AttributeError("'NoneType' object has no attribute
'writelines'"). Most flows of this module failed at random because of it, by way of B.

B. agent_host/durable/streams.py `StreamConsumer.run` survived only connection errors and
NOGROUP, so
that AttributeError ended the shard's loop, and through `ShardedConsumer.run`'s gather the
host's `resume-worker-N`/`outbox` task, silently: the process stayed ready but never read that
shard's stream again.

C (fixed; its test below). bot/slack_notifier.py `SlackNotifier.run_finished` (lines 90-93),
called by agent_host/durable/outbox.py `Outbox._run_finished`: when no request of the run had its
message ts saved yet, it returned without posting and without RetryLater, so the outbox
acknowledges the entry and the outcome never reaches the thread. With several outbox
consumers (replicas) a run's `request_posted` and `run_finished` entries are handled by
different processes, so a run decided before its post completed (a 1-second expiry while
the channel's pacer holds the post, a decision through the approval webhook) loses its
outcome reply.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.approvals import ApprovalRequest
from agent_host.approvals.external import ExternalRequestSpec
from agent_host.approvals.notifier import MessageRef, Notifier, RunSummary
from agent_host.durable import keys as K
from agent_host.durable.connections import open_redis
from agent_host.durable.metrics import MetricsPage
from agent_host.durable.outbox import Outbox
from agent_host.durable.streams import StreamConsumer
from agent_host.durable.worker import ResumeWorker
from agent_host.runtime.decisions import Approve, Reject
from bot.slack_settings import load_settings
from bot.wiring import build
from slack_sandbox import SlackStandIn, open_workspace, workspace_to_dict
from tests.integration.bot import (
    test_approve_flow,
    test_bot_commands,
    test_bot_expiry,
    test_bot_modals,
    test_bot_reviewers,
    test_bot_routing,
)
from tests.support.replies import flat_body
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    OPS,
    REQUESTER,
    REVIEWER,
    SECRET,
    TOKEN,
    running_stack,
    stack_settings,
)
from tests.support.waiting import eventually

# -- a sample of the bot suite ------------------------------------------------------------

# (module, test function): approve, refusals, reject with a reason, `/approvals pending [all]`
# with pages, `/approvals route add|remove` by the admin, a 1-second route's expiry, quorum 2,
# routing by rule.
SAMPLE: list[tuple[ModuleType, str]] = [
    (test_approve_flow, "test_approve_updates_message_resumes_run_and_posts_outcome"),
    (test_approve_flow, "test_outsider_and_self_approval_are_refused_and_change_nothing"),
    (test_bot_modals, "test_reject_with_reason_via_modal_reaches_the_model_and_the_message"),
    (test_bot_commands, "test_pending_lists_this_channel_and_pending_all_lists_every_channel"),
    (test_bot_commands, "test_pending_paginates_with_a_next_page_button"),
    (test_bot_commands, "test_routes_and_route_add_remove_by_admin"),
    (test_bot_expiry, "test_request_expires_on_a_short_route_expiry"),
    (test_bot_reviewers, "test_quorum_of_two_needs_two_different_reviewers"),
    (test_bot_routing, "test_requests_land_in_the_first_matching_route_or_the_default_channel"),
]


@pytest.mark.parametrize(
    ("module", "name"),
    [pytest.param(m, n, id=f"{m.__name__.rsplit('.', 1)[-1]}::{n}") for m, n in SAMPLE],
)
async def test_bot_flow_on_the_cluster(
    module: ModuleType, name: str, flushed_cluster_url: str, tmp_path: Path
) -> None:
    flow: Callable[[str, Path], Awaitable[None]] = getattr(module, name)
    await flow(flushed_cluster_url, tmp_path)


# -- the stack in cluster mode, over shards and masters -------------------------------------


def _listed(text: str) -> list[str]:
    return re.findall(r"^• `([^`]+)`", text, flags=re.M)


def _next(text: str) -> str | None:
    """The sealed page marker of a reply's Next page button (`flat_body`)."""
    found = re.search(r"\[Next page:(?:here|all):([^\]]+)\]", text)
    return found.group(1) if found else None


def _spread_run_ids(client: AsyncRedisCluster, count: int) -> list[str]:
    """`count` new run ids in distinct shards that between them live on every master."""
    masters = {node.name for node in client.get_primaries()}
    chosen: dict[int, tuple[str, str]] = {}  # shard -> (run id, master)
    for _ in range(10_000):
        run_id = K.new_run_id()
        shard = K.Keys(run_id).shard.number
        master = client.get_node_from_key(K.Keys(run_id).run).name
        covered = {m for _, m in chosen.values()}
        if shard in chosen or (len(chosen) >= count - len(masters - covered) and master in covered):
            continue
        chosen[shard] = (run_id, master)
        if len(chosen) == count:
            break
    assert len(chosen) == count and {m for _, m in chosen.values()} == masters, chosen
    return [run_id for run_id, _ in chosen.values()]


async def test_stack_uses_cluster_mode_and_pages_pending_over_every_master(
    flushed_cluster_url: str, tmp_path: Path
) -> None:
    async with running_stack(flushed_cluster_url, tmp_path) as stack:
        client = stack.host.redis
        assert isinstance(client, AsyncRedisCluster)
        assert stack.bot.routes.redis is client  # the routes share the cluster client
        slash = stack.standin.slash
        spec = f"route add agent=cleanup-agent channel={OPS}"
        added = await slash(ADMIN, CHANNEL, "/approvals", spec)
        assert "Added route `r1`" in (added.json() or {}).get("text", ""), added

        refunds = _spread_run_ids(client, 6)
        for run_id in refunds:
            await stack.host.store.create_run("refund-agent", "refund order 123", REQUESTER, run_id)
        paths = " ".join(f"/tmp/c{n}.txt" for n in range(8))
        cleanup = await stack.start_run("cleanup-agent", f"delete {paths}")

        async def waiting(run_id: str, count: int) -> list[ApprovalRequest] | None:
            requests = await stack.host.store.run_requests(run_id)
            return requests if len(requests) == count else None

        requests: list[ApprovalRequest] = []
        for run_id, count in [*((r, 1) for r in refunds), (cleanup, 8)]:
            requests += await eventually(partial(waiting, run_id, count))
        assert len(requests) == 14  # more than one page of `/approvals pending all`

        seen: list[str] = []  # `pending all` lists every channel for admins only
        reply: Any = (await slash(ADMIN, CHANNEL, "/approvals", "pending all")).json()
        for _ in range(5):
            seen += _listed(flat_body(reply))
            cursor = _next(flat_body(reply))
            if cursor is None:
                break
            page = await slash(ADMIN, CHANNEL, "/approvals", f"pending all next:{cursor}")
            reply = page.json()
        assert len(seen) == len(set(seen)), seen
        assert sorted(seen) == sorted(r.request_id for r in requests)
        ops = flat_body((await slash(REVIEWER, OPS, "/approvals", "pending")).json())
        assert len(_listed(ops)) == 8 and set(_listed(ops)) <= set(seen)

        # One refund per master approved (as through the API): each resumes, refunds once and
        # leaves the pending index.
        by_master = {client.get_node_from_key(K.Keys(r.run_id).run).name: r for r in requests[:6]}
        assert len(by_master) == 3
        for request in by_master.values():
            result = await stack.host.store.decide(request.request_id, Approve(decided_by=REVIEWER))
            assert result.outcome == "decided", result
        for request in by_master.values():
            await stack.run_status(request.run_id, "succeeded")
        assert stack.effects.count("refund") == 3
        assert await stack.host.store.pending_count() == len(requests) - 3
        left = flat_body((await slash(ADMIN, CHANNEL, "/approvals", "pending all")).json())
        assert not {r.request_id for r in by_master.values()} & set(_listed(left))
        # /metrics reads every shard in one pipeline, over every master
        metrics = await MetricsPage(stack.host).render()
        assert f"countersign_pending_requests {len(requests) - 3}\n" in metrics
        assert 'countersign_decisions_total{status="approved"} 3\n' in metrics


# -- A: the cluster client's concurrent first use -----------------------------------------

TRIALS = 5  # a fresh client each; uninitialized, the race showed in 29 trials of 30


async def test_cluster_client_from_open_redis_survives_concurrent_first_use(
    flushed_cluster_url: str,
) -> None:
    failures: list[str] = []
    for _ in range(TRIALS):
        client, server = await open_redis(load_settings({"REDIS_URL": flushed_cluster_url}))
        assert server is None and isinstance(client, AsyncRedisCluster)

        async def touch(key: str, c: Any = client) -> None:
            await c.hset(key, "probe", "1")

        try:
            keys = [f"{s.tag}:probe:{n}" for s in K.shards() for n in range(2)]
            results = await asyncio.wait_for(
                asyncio.gather(*(touch(k) for k in keys), return_exceptions=True), 20
            )
        finally:
            await client.aclose()
        failures += [repr(r) for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of {TRIALS * 32} first commands failed: {failures[:3]}"


# -- B: a consumer loop outlives an unexpected client error --------------------------------


class _FlakyRedis:
    """Just enough of a client for one StreamConsumer: the first XAUTOCLAIM raises what the
    cluster client raised above, every later call answers "nothing to do". A poll is a
    read of new entries (the consumer looks for entries to reclaim only now and then)."""

    def __init__(self) -> None:
        self.autoclaims = 0
        self.polls = 0
        self.polled_thrice = asyncio.Event()

    async def xgroup_create(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def register_script(self, script: str) -> Any:  # the heartbeat's; no entry is held here
        return None

    async def xautoclaim(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.autoclaims += 1
        if self.autoclaims == 1:
            raise AttributeError("'NoneType' object has no attribute 'writelines'")
        return [b"0-0", [], []]

    async def xreadgroup(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.polls += 1
        if self.polls >= 3:
            self.polled_thrice.set()
        await asyncio.sleep(0.01)
        return []


async def test_stream_consumer_keeps_polling_after_an_unexpected_client_error() -> None:
    redis = _FlakyRedis()

    async def handler(entry_id: str, fields: dict[str, str]) -> None:
        raise AssertionError("no entries in this test")

    consumer = StreamConsumer(
        redis,  # type: ignore[arg-type]
        K.Shard(0).resume,
        K.RESUME_GROUP,
        "consumer",
        handler,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    polled = asyncio.create_task(redis.polled_thrice.wait())
    await asyncio.wait({task, polled}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    polled.cancel()
    ended_by_itself, polls = task.done(), redis.polls
    stop.set()
    error = None
    try:
        await asyncio.wait_for(task, 5)
    except AttributeError as exc:
        error = exc
    assert not ended_by_itself and error is None, f"the consumer loop ended: {error!r}"
    assert polls >= 3 and redis.autoclaims >= 1, "the consumer stopped polling"


# -- BUG C: the outcome reply is lost when the run ends before its post is saved ------------


class _HeldPost:
    """The real Slack notifier, except that posting waits until `release` is set: the post
    of a replica whose channel pacer (or Slack) is slow."""

    def __init__(self, inner: Notifier) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def request_posted(self, request: ApprovalRequest) -> MessageRef | None:
        self.entered.set()
        await self.release.wait()
        return await self.inner.request_posted(request)

    async def request_updated(self, request: ApprovalRequest) -> None:
        await self.inner.request_updated(request)

    async def run_finished(self, run: RunSummary, requests: list[ApprovalRequest]) -> None:
        await self.inner.run_finished(run, requests)


async def test_outcome_reaches_the_thread_when_the_run_ends_before_its_post_is_saved(
    flushed_cluster_url: str, tmp_path: Path
) -> None:
    workspace = open_workspace(tmp_path / "slack")
    standin = SlackStandIn(workspace, token=TOKEN, signing_secret=SECRET)
    await standin.start()
    settings = stack_settings(standin, flushed_cluster_url, tmp_path)
    host, bot = await build(settings)  # nothing in the background: each step by hand
    posting: asyncio.Task[int] | None = None
    try:
        store = host.store
        worker = ResumeWorker(store, host.runner, "worker")
        run_id = await store.create_run("refund-agent", "refund order 123", REQUESTER)
        assert await worker.consumer.poll() == 1  # the first turn pauses at the refund
        [request] = await store.run_requests(run_id)

        # Replica 1's outbox takes the request's post, and its post is slow.
        held = _HeldPost(host.notifier)
        replica1 = Outbox(store, held, "replica-1-outbox", idle_ms=300)
        posting = asyncio.create_task(replica1.consumer.poll())
        await asyncio.wait_for(held.entered.wait(), 10)

        # Meanwhile the request is decided (here: rejected through the approval webhook's
        # store call) and a worker finishes the run.
        decided = await store.decide(request.request_id, Reject(message="no", decided_by="api"))
        assert decided.outcome == "decided", decided
        assert await worker.consumer.poll() == 1
        assert getattr(await store.run_info(run_id), "status", None) == "succeeded"

        # Replica 2's outbox handles the decision and the run's end.
        replica2 = Outbox(store, host.notifier, "replica-2-outbox", idle_ms=300)
        await replica2.consumer.poll()

        held.release.set()  # the post goes through and its ts is saved (behind the poll,
        await asyncio.wait_for(posting, 15)  # if that has moved on: see BATCH_WAIT)

        async def post_saved() -> ApprovalRequest | None:
            [request] = await store.run_requests(run_id)
            return request if request.message_ts else None

        posted = await eventually(post_saved, within=5)

        # Both outboxes retry whatever they deferred, until the thread has the outcome.
        deadline = time.monotonic() + 2
        replies: list[Any] = []
        while time.monotonic() < deadline and not replies:
            await asyncio.sleep(0.35)  # past idle_ms: deferred entries are reclaimed
            await replica2.consumer.poll()
            await replica1.consumer.poll()
            state = workspace_to_dict(standin.workspace)
            replies = [
                m
                for m in state["messages"]
                if m.get("thread_ts") == posted.message_ts and m["ts"] != posted.message_ts
            ]
        message = standin.workspace.message(CHANNEL, posted.message_ts)
        assert message is not None
        assert not any(b.get("type") == "actions" for b in message.blocks), "not updated"
        assert replies, "the run's outcome never reached the message's thread"
        assert "was rejected" in replies[0]["text"]
    finally:
        if posting is not None and not posting.done():
            posting.cancel()
        await bot.close()
        await host.stop()
        await standin.stop()


async def test_long_polls_over_every_master_wake_on_their_own_decisions(
    flushed_cluster_url: str, tmp_path: Path
) -> None:
    """The long polls' one watch reads requests of every shard in one cluster pipeline:
    each poll wakes on its own request's decision, wherever that request lives."""
    async with running_stack(flushed_cluster_url, tmp_path) as stack:
        external = stack.host.external
        ids = [
            (
                await external.create(ExternalRequestSpec(agent="a", tool="t", arguments={"n": n}))
            ).request_id
            for n in range(12)
        ]
        assert len({K.Keys(i).shard.number for i in ids}) > 3  # spread over shards, so masters
        polls = {i: asyncio.create_task(external.wait(i, 30)) for i in ids}
        await eventually(lambda: all(external.watch.waiting(i) for i in ids) or None)
        decided = ids[::2]
        for request_id in decided:
            await stack.host.store.decide(request_id, Approve(decided_by=REVIEWER))
        woken = await asyncio.wait_for(asyncio.gather(*(polls[i] for i in decided)), 10)
        assert all(r is not None and r.status == "approved" for r in woken)
        assert not any(polls[i].done() for i in ids[1::2])  # nothing woke the others
        for task in polls.values():
            task.cancel()
        await asyncio.gather(*polls.values(), return_exceptions=True)
        assert not any(external.watch.waiting(i) for i in ids)
