"""End to end on a real 3-master Redis Cluster: two `countersign serve` replicas (A, B) and two
`countersign worker` processes share it, each given a different cluster node as REDIS_URL;
the Slack stand-in runs in the test process and sends each signed interaction to the replica
a step names. Refunds are counted in the examples' journal (COUNTERSIGN_EXAMPLE_JOURNAL).

The replicas run `--workers 0`, so runs are started and resumed by the two workers only (the
replicas' sweepers and outboxes still run: four sweepers in all). That makes the last step
deterministic: a worker armed with COUNTERSIGN_CRASH_AT=after_tool_ran SIGKILLs itself right
after the refund ran, and the other worker, the only resume consumer left, reclaims the entry
(after the host's 30 s idle time) and finishes the run without refunding twice.

One deployment, the steps one after another in a background thread (harness.run_concurrently);
each test collects its own step's result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host.approvals import ApprovalRequest, FixedRouter
from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing
from agent_host.durable.store import RunStore
from agent_host.durable.sweeper import EXPIRED_BY
from bot import blocks
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.replies import flat_body
from tests.system.faults.harness import (
    ADMIN,
    APPROVALS,
    AUTH,
    CLI,
    OPS,
    REVIEWER,
    REVIEWER2,
    Proc,
    World,
    run_concurrently,
    until,
    world,
)
from tests.system.faults.test_replicas import journal_for, one_outcome, view_number

CLUSTER_MODE = "REDIS_URL is a Redis Cluster node: using cluster mode"
MANY = 20
PAGE = 6
RECLAIM_WITHIN = 50.0  # the host reclaims a dead worker's resume entry after 30 s idle


# -- helpers ------------------------------------------------------------------------------


def _has_buttons(message: Any) -> bool:
    return any(b.get("type") == "actions" for b in message.blocks)


async def settled(w: World, channel: str, ts: str, within: float = 20.0) -> tuple[Any, list[Any]]:
    """Wait until the approval message lost its buttons and its thread has the outcome."""

    async def done() -> tuple[Any, list[Any]] | None:
        message = w.message(channel, ts)
        replies = w.thread_replies(channel, ts)
        return (message, replies) if not _has_buttons(message) and replies else None

    return await until(f"message {channel}/{ts} decided and answered", done, within=within)


async def slash(w: World, via: Proc, user: str, channel: str, text: str) -> str:
    """`/approvals text` through the stand-in, signed, to replica `via`; the reply's text."""
    w.standin.events_url = via.events_url
    reply = await w.standin.slash(user, channel, "/approvals", text)
    assert reply.status == 200, reply
    body = reply.json()
    assert body and isinstance(body.get("text"), str), reply
    return flat_body(body)


def listed(text: str) -> list[str]:
    return re.findall(r"^• `([^`]+)`", text, flags=re.M)


async def click(w: World, via: Proc, user: str, request: ApprovalRequest, action: str) -> Any:
    reply, _ = await w.click(user, request, action, via=via)
    assert reply.status == 200, reply
    return reply


def added_route_id(text: str) -> str:
    found = re.search(r"Added route `(r\d+)`", text)
    assert found, text
    return found.group(1)


# -- the steps ----------------------------------------------------------------------------


async def cluster_mode(w: World, procs: list[Proc], urls: dict[str, str]) -> dict[str, str]:
    """Every process was pointed at a cluster node and says it uses cluster mode."""
    for proc in procs:
        text = proc.log.read_text(errors="replace")
        assert CLUSTER_MODE in text, f"{proc.name} is not in cluster mode\n{proc.tail()}"
    assert len(set(urls.values())) == 3, urls  # each master was somebody's REDIS_URL
    return urls


async def approve_a_listed_by_b(w: World, a: Proc, b: Proc, procs: list[Proc]) -> str:
    run_id = await w.start_run(a)
    request = await w.only_request(run_id, posted=True, within=25.0, watch=procs)
    assert request.message_channel == APPROVALS
    # B serves the listing: the stand-in's signed slash command to B
    assert request.request_id in listed(await slash(w, b, REVIEWER, APPROVALS, "pending"))
    # ... and A takes the click
    await click(w, a, REVIEWER, request, blocks.APPROVE)
    final = await one_outcome(w, request, procs)
    assert final.status == "approved" and final.decided_by == REVIEWER
    info = await w.run_info(run_id)
    assert info.output.startswith("Done. Refund issued: $42.50 to order 123"), info
    assert len(journal_for(w, "refund", run_id)) == 1
    message, replies = await settled(w, APPROVALS, request.message_ts)
    assert f"<@{REVIEWER}>" in str(message.blocks)
    assert len(replies) == 1 and "Refund issued" in replies[0].text, replies
    assert request.request_id not in listed(await slash(w, b, REVIEWER, APPROVALS, "pending"))
    return final.status


async def reject_with_reason_via_b(w: World, a: Proc, b: Proc, procs: list[Proc]) -> str:
    reason = "amount looks wrong, check with finance"
    run_id = await w.start_run(a)
    request = await w.only_request(run_id, posted=True, within=25.0, watch=procs)
    views = len(w.standin.workspace.views)
    await click(w, b, REVIEWER, request, blocks.REJECT)  # B opens the modal
    view = await until("the reject modal", view_number(w, views), within=10.0, watch=procs)
    assert view.view.get("private_metadata") == f"{request.request_id}|{request.pause_id}"
    assert (await w.request(request.request_id)).status == "pending"  # opening decides nothing
    w.standin.events_url = b.events_url
    values = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
    submitted = await w.standin.submit_view(REVIEWER, view.id, values)
    assert submitted.status == 200 and submitted.json() is None, submitted  # the modal closed
    final = await one_outcome(w, request, procs)
    assert final.status == "rejected" and final.decided_by == REVIEWER, final
    assert getattr(final.decision, "message", None) == reason
    info = await w.run_info(run_id)
    assert "not approved" in info.output and reason in info.output, info
    assert journal_for(w, "refund", run_id) == []
    message, replies = await settled(w, APPROVALS, request.message_ts)
    shown = str(message.blocks)
    assert f"Rejected by <@{REVIEWER}>" in shown and reason in shown, shown
    assert len(replies) == 1, replies
    assert f"was rejected by <@{REVIEWER}>" in replies[0].text and reason in replies[0].text
    return final.status


async def quorum_across_replicas(w: World, a: Proc, b: Proc, procs: list[Proc]) -> list[str]:
    spec = f"route add agent=refund-agent channel={OPS} quorum=2"
    route = added_route_id(await slash(w, a, ADMIN, OPS, spec))
    try:
        run_id = await w.start_run(b)
        request = await w.only_request(run_id, posted=True, within=25.0, watch=procs)
    finally:  # later refund runs go to the default channel again
        assert f"Removed route `{route}`" in await slash(w, b, ADMIN, OPS, f"route remove {route}")
    assert request.route.quorum == 2 and request.message_channel == OPS

    await click(w, a, REVIEWER, request, blocks.APPROVE)  # the first reviewer, on A
    current = await w.request(request.request_id)
    assert current.status == "pending" and current.approvals == [REVIEWER], current

    async def shows_progress() -> bool:
        message = w.message(OPS, request.message_ts)
        return "1 of 2 approvals" in str(message.blocks) and _has_buttons(message)

    await until("the message to show 1 of 2", shows_progress, within=10.0, watch=procs)
    assert journal_for(w, "refund", run_id) == []

    await click(w, b, REVIEWER2, request, blocks.APPROVE)  # the second, on B
    final = await one_outcome(w, request, procs)
    assert final.status == "approved" and final.decided_by == REVIEWER2, final
    assert final.approvals == [REVIEWER, REVIEWER2]
    assert len(journal_for(w, "refund", run_id)) == 1
    message, replies = await settled(w, OPS, request.message_ts)
    assert "2 of 2 approvals" in str(message.blocks)
    assert len(replies) == 1, replies
    return final.approvals


async def many_runs(
    w: World, a: Proc, b: Proc, procs: list[Proc], probe: AsyncRedisCluster
) -> dict[str, int]:
    # Half of them into each channel (the notifier paces posts per channel): the first half
    # pauses under the default route, the second under a route to OPS added meanwhile.
    half = MANY // 2
    runs = [await w.start_run((a, b)[n % 2]) for n in range(half)]
    for run_id in runs:
        await w.only_request(run_id, within=40.0, watch=procs)
    spec = f"route add agent=refund-agent channel={OPS}"
    route = added_route_id(await slash(w, b, ADMIN, OPS, spec))
    try:
        runs += [await w.start_run((a, b)[n % 2]) for n in range(half, MANY)]
        for run_id in runs[half:]:
            await w.only_request(run_id, within=40.0, watch=procs)
    finally:
        assert f"Removed route `{route}`" in await slash(w, a, ADMIN, OPS, f"route remove {route}")
    shards = {K.Keys(r).shard.number for r in runs}
    assert len(shards) > 1, f"all {MANY} runs in shard {shards}"
    masters = {probe.get_node_from_key(K.Keys(r).run).name for r in runs}
    assert len(masters) > 1, f"all {MANY} runs on one master: {masters}"
    requests = [await w.only_request(r, posted=True, within=40.0, watch=procs) for r in runs]
    channels = [r.message_channel for r in requests]
    assert channels == [APPROVALS] * half + [OPS] * (MANY - half), channels

    # Every pending request listed exactly once over the pages, asked of both replicas
    listed_ids: list[str] = []
    cursor: str | None = None
    for page in range(MANY):
        via = (a, b)[page % 2]
        query = f"status=pending&limit={PAGE}" + (f"&cursor={cursor}" if cursor else "")
        async with w.http.get(f"{via.url}/api/v1/approvals?{query}", headers=AUTH) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
        assert len(body["approvals"]) <= PAGE
        listed_ids += [item["request_id"] for item in body["approvals"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert cursor is None, "the listing never ended"
    assert len(listed_ids) == len(set(listed_ids)), f"listed twice: {listed_ids}"
    assert {r.request_id for r in requests} <= set(listed_ids)
    assert len(listed_ids) == await w.store.pending_count()

    for n, request in enumerate(requests):
        await click(w, (a, b)[n % 2], (REVIEWER, REVIEWER2)[n % 2], request, blocks.APPROVE)
    for request in requests:
        final = await one_outcome(w, request, procs)
        assert final.status == "approved", final
        assert len(journal_for(w, "refund", request.run_id)) == 1, request.run_id
    for request in requests:
        _, replies = await settled(w, request.message_channel, request.message_ts)
        assert len(replies) == 1, replies
    return {"runs": len(runs), "shards": len(shards), "masters": len(masters)}


async def expiry_by_sweepers(w: World, a: Proc, b: Proc, procs: list[Proc]) -> int:
    spec = f"route add agent=cleanup-agent channel={OPS} expiry=1s"
    text = await slash(w, a, ADMIN, OPS, spec)
    added_route_id(text)
    assert "expires after 1s" in text, text
    expired = 0
    for n in range(3):
        # One at a time, and only once every outbox's per-channel pacer (1.05 s) is free: a
        # post held back past the 1 s expiry loses the outcome reply (BUG C, test_in_process).
        await asyncio.sleep(1.1)
        via = (b, a)[n % 2]
        run_id = await w.start_run(via, agent="cleanup-agent", text=f"delete /tmp/x{n}.docx")
        request = await w.only_request(run_id, posted=True, within=25.0, watch=procs)
        assert request.route.expiry_seconds == 1 and request.message_channel == OPS
        final = await one_outcome(w, request, procs)  # exactly one terminal decision
        assert final.status == "expired" and final.decided_by == EXPIRED_BY, final
        assert final.decided_at is not None and final.decided_at >= request.expires_at
        assert "not approved" in (await w.run_info(run_id)).output
        assert journal_for(w, "delete_file", run_id) == []
        assert await w.indexed(request.request_id) == (False, False)
        message, replies = await settled(w, OPS, request.message_ts)
        assert "Expired" in str(message.blocks)
        assert len(replies) == 1 and "expired before anyone decided" in replies[0].text
        expired += 1
    return expired


async def worker_killed_mid_run(
    w: World, a: Proc, b: Proc, workers: list[Proc], urls: dict[str, str]
) -> dict[str, Any]:
    """Worker 1 is replaced by one that SIGKILLs itself after the refund ran; worker 2 is
    paused (SIGSTOP) until then, so the armed worker takes the run; worker 2 finishes it."""
    first, other = workers
    first.stop()
    victim = w.worker("after_tool_ran", cli=CLI, REDIS_URL=urls[first.name])
    workers[0] = victim
    await w.ready(victim)
    assert CLUSTER_MODE in victim.log.read_text(errors="replace")
    os.kill(other.proc.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(1.5)  # its blocked stream reads (BLOCK 1 s) have all returned
        run_id = await w.start_run(a)
        request = await w.only_request(run_id, posted=True, within=25.0, watch=[a, b, victim])
        clicked = time.monotonic()
        await click(w, b, REVIEWER, request, blocks.APPROVE)
        code = await victim.exited(within=20.0)
        assert code == -signal.SIGKILL, f"{victim.name}: exit {code}\n{victim.tail()}"
        assert len(journal_for(w, "refund", run_id)) == 1, "the refund ran before the kill"
        assert (await w.run_info(run_id)).status == "resuming"
    finally:
        os.kill(other.proc.pid, signal.SIGCONT)
    watch = [a, b, other]
    info = await w.run_reaches(run_id, "succeeded", "failed", within=RECLAIM_WITHIN, watch=watch)
    assert info.status == "succeeded", info
    final = await one_outcome(w, request, watch)
    assert final.status == "approved"
    assert len(journal_for(w, "refund", run_id)) == 1, "the refund ran twice"
    _, replies = await settled(w, APPROVALS, request.message_ts)
    assert len(replies) == 1, replies
    return {"exit": code, "seconds": round(time.monotonic() - clicked, 1)}


async def deployment(tmp: Path, cluster: LocalRedisCluster) -> dict[str, Any]:
    """Start everything, run the steps in order; each step's result or its exception."""
    results: dict[str, Any] = {}
    began = time.monotonic()
    async with world(tmp, env={"REDIS_URL": cluster.url}) as w:
        # The world's own probes point at its spare single server: aim them at the cluster.
        probe = AsyncRedisCluster.from_url(cluster.url, socket_timeout=5)
        await probe.initialize()
        w.redis = probe  # type: ignore[assignment]
        w.store = RunStore(probe, KeyRing.parse(w.keys), FixedRouter(APPROVALS))  # type: ignore[arg-type]
        try:
            nodes = cluster.urls
            a = w.serve(workers=0, events=False, cli=CLI, REDIS_URL=nodes[0])
            b = w.serve(workers=0, events=False, cli=CLI, REDIS_URL=nodes[1])
            workers = [
                w.worker(cli=CLI, REDIS_URL=nodes[2]),
                w.worker(cli=CLI, REDIS_URL=nodes[0]),
            ]
            urls = {a.name: nodes[0], b.name: nodes[1]}
            urls |= {workers[0].name: nodes[2], workers[1].name: nodes[0]}
            procs = [a, b, *workers]
            await w.ready(*procs, within=40.0)
            steps: dict[str, Any] = {
                "cluster-mode": lambda: cluster_mode(w, procs, urls),
                "approve": lambda: approve_a_listed_by_b(w, a, b, procs),
                "reject": lambda: reject_with_reason_via_b(w, a, b, procs),
                "quorum": lambda: quorum_across_replicas(w, a, b, procs),
                "many": lambda: many_runs(w, a, b, procs, probe),
                "expiry": lambda: expiry_by_sweepers(w, a, b, procs),
                "killed-worker": lambda: worker_killed_mid_run(w, a, b, workers, urls),
            }
            timings: dict[str, float] = {"start": round(time.monotonic() - began, 1)}
            for name, step in steps.items():
                started = time.monotonic()
                try:
                    results[name] = await step()
                except Exception as exc:  # reported by that step's test
                    results[name] = exc
                timings[name] = round(time.monotonic() - started, 1)
            results["timings"] = timings
            running = [a, b, workers[1]]  # workers[0] is the worker killed on purpose
            results["all-alive"] = [p.name for p in running if not p.alive()]
            posts = [m for ch in (APPROVALS, OPS) for m in w.top_level_posts(ch)]
            results["posts"] = len(posts)
            results["distinct-posts"] = len({(m.channel, m.ts) for m in posts})
        finally:
            await probe.aclose()
    return results


# -- the tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    cluster: LocalRedisCluster,
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    async def scenario(tmp: Path) -> dict[str, Any]:
        return await deployment(tmp, cluster)

    jobs = {"cluster": (scenario, 60.0)}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=1) as futures:
        yield futures


def step(futures: dict[str, concurrent.futures.Future[Any]], name: str) -> Any:
    result = futures["cluster"].result(timeout=110)[name]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("scenario", ["cluster"])
def test_every_process_uses_cluster_mode_on_its_own_node(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert len(step(scenarios, "cluster-mode")) == 4


@pytest.mark.parametrize("scenario", ["cluster"])
def test_approve_on_replica_a_while_replica_b_lists_pending(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert step(scenarios, "approve") == "approved"


@pytest.mark.parametrize("scenario", ["cluster"])
def test_reject_with_a_reason_through_the_modal_on_replica_b(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert step(scenarios, "reject") == "rejected"


@pytest.mark.parametrize("scenario", ["cluster"])
def test_quorum_two_with_the_reviewers_on_different_replicas(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert step(scenarios, "quorum") == [REVIEWER, REVIEWER2]


@pytest.mark.parametrize("scenario", ["cluster"])
def test_many_runs_over_shards_listed_once_and_each_refunded_once(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    report = step(scenarios, "many")
    assert report["runs"] == MANY and report["shards"] > 1 and report["masters"] > 1


@pytest.mark.parametrize("scenario", ["cluster"])
def test_one_second_route_expires_once_by_the_sweepers(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert step(scenarios, "expiry") == 3


@pytest.mark.parametrize("scenario", ["cluster"])
def test_worker_sigkilled_mid_run_and_the_other_worker_finishes(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    report = step(scenarios, "killed-worker")
    assert report["exit"] == -signal.SIGKILL


@pytest.mark.parametrize("scenario", ["cluster"])
def test_no_process_died_and_each_request_posted_once(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    assert step(scenarios, "all-alive") == []
    # approve, reject, quorum, MANY, 3 expiries, the killed worker's run
    assert step(scenarios, "posts") == step(scenarios, "distinct-posts") == 3 + MANY + 3 + 1
