"""Redis failing under a real `countersign serve`: SIGKILLed and restarted (AOF replay) with
`appendfsync always` and `everysec`, down (refusing) or frozen (SIGSTOP) during a click, and
stalled after a decision was sent.

* always: nothing acknowledged is lost (the pause, the posted ts, a click's decision and the
  resume entry it queued), and the flow completes with the refund run once.
* everysec: only what the README promises: the processes recover, and a decision
  acknowledged more than ~2 s before the kill survives.
* During a click: Slack gets its 200 well under 3 s, the clicker is told their decision
  could not be recorded, nothing is half-written, and the same click works once Redis is back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_host.durable import keys as K
from agent_host.durable.scripts import DECIDE
from agent_host.durable.seen_once import ANSWER_WITHIN
from bot.app import LISTENER_BUDGET

from .harness import (
    REVIEWER,
    Proc,
    RedisProxy,
    World,
    run_concurrently,
    until,
    world,
    write_file,
)

ACK_BUDGET = 2.5  # "well under" Slack's 3 s
UNAVAILABLE = "could not record your decision"


async def posted_run(w: World, serve: Proc, *watch: Proc) -> Any:
    run_id = await w.start_run(serve)
    return await w.only_request(run_id, posted=True, watch=[serve, *watch])


async def ephemerals(w: World, user: str, count: int, within: float = 10.0) -> list[str]:
    async def arrived() -> list[str] | None:
        texts = w.ephemerals(user)
        return texts if len(texts) >= count else None

    return await until(f"{count} ephemeral(s) for {user}", arrived, within=within)


async def completes(w: World, request: Any, *watch: Proc) -> None:
    info = await w.run_reaches(request.run_id, "succeeded", "failed", within=25.0, watch=watch)
    assert info.status == "succeeded", info
    assert info.output.startswith("Done. Refund issued"), info
    final = await w.request(request.request_id)
    assert final.status == "approved" and final.decided_by == REVIEWER
    assert len(await w.terminal_events(request.request_id)) == 1
    assert len(w.refunds()) == 1, w.refunds()
    # one resume per decided turn (the sweeper trims acknowledged entries, hence <=)
    assert len(await w.resume_entries(request.run_id)) <= 1


async def nothing_written(w: World, request: Any) -> None:
    """The request is exactly as before the click: pending, no vote, no resume queued."""
    current = await w.request(request.request_id)
    assert current.status == "pending", current
    assert current.decision is None and not current.decided_by and not current.approvals
    assert not await w.redis.exists(K.Keys(request.request_id).approvers(request.request_id))
    assert await w.indexed(request.request_id) == (True, True)
    assert await w.resume_entries(request.run_id) == []
    assert await w.terminal_events(request.request_id) == []
    assert (await w.run_info(request.run_id)).status == "waiting"


# -- scenarios ------------------------------------------------------------------------------


async def always_sigkill_mid_flow(tmp: Path) -> None:
    async with world(tmp, appendfsync="always") as w:
        # resume workers in their own process, so the test decides when a resume may run
        serve, worker = w.serve(workers=0), w.worker()
        await w.ready(serve, worker)
        request = await posted_run(w, serve, worker)
        checkpoint = await w.redis.get(K.Keys(request.run_id).checkpoint)

        # 1. killed while waiting: the pause, its indexes, checkpoint and posted ts survive
        await w.kill_redis()
        await w.start_redis()
        await w.ready(serve, within=20.0)
        after = await w.request(request.request_id)
        assert after.status == "pending" and after.message_ts == request.message_ts
        assert (await w.run_info(request.run_id)).status == "waiting"
        assert await w.indexed(request.request_id) == (True, True)
        assert await w.redis.get(K.Keys(request.run_id).checkpoint) == checkpoint

        # 2. killed right after a click was acknowledged, before any worker resumed it
        worker.stop()
        reply, took = await w.click(REVIEWER, after, via=serve)
        assert reply.status == 200 and took < ACK_BUDGET, (reply, took)
        await w.kill_redis()
        await w.start_redis()
        decided = await w.request(request.request_id)
        assert decided.status == "approved" and decided.decided_by == REVIEWER
        assert len(await w.resume_entries(request.run_id)) == 1, "the queued resume survives"
        assert not any(UNAVAILABLE in t for t in w.ephemerals(REVIEWER))

        # 3. the flow completes, the refund once
        resumer = w.worker()
        await w.ready(serve, resumer, within=20.0)
        await completes(w, request, serve, resumer)


async def everysec_sigkill_keeps_older_decision(tmp: Path) -> None:
    async with world(tmp, appendfsync="everysec") as w:
        serve = w.serve()
        await w.ready(serve)
        request = await posted_run(w, serve)
        status, body = await w.webhook(serve, request.request_id, "approved", REVIEWER)
        assert status == 200 and body["status"] == "processed", body
        await asyncio.sleep(2.2)  # everysec may lose up to ~1 s of acknowledged writes
        await w.kill_redis()
        await w.start_redis()
        await w.ready(serve, within=20.0)  # the process recovers
        kept = await w.request(request.request_id)
        assert kept.status == "approved" and kept.decided_by == "webhook"
        info = await w.run_reaches(
            request.run_id, "succeeded", "failed", within=25.0, watch=[serve]
        )
        assert info.status == "succeeded", info


async def click_while_redis_down(tmp: Path, how: str) -> None:
    async with world(tmp, appendfsync="always") as w:
        serve = w.serve()
        await w.ready(serve)
        request = await posted_run(w, serve)
        server = w.redis_server
        frozen = how == "frozen"
        pid = server.pid
        assert pid is not None
        if frozen:
            os.kill(pid, signal.SIGSTOP)  # accepts nothing, answers nothing: a hung Redis
        else:
            await w.kill_redis()  # connections refused
        try:
            reply, took = await w.click(REVIEWER, request, via=serve)
            assert reply.status == 200, reply
            assert took < ACK_BUDGET, f"Slack's ack took {took:.2f}s with Redis {how}"
            if frozen:  # told once the replay guard gave up, before the listener's budget
                assert took >= ANSWER_WITHIN * 0.9, "answered before the guard gave up?"
            texts = await ephemerals(w, REVIEWER, 1)
            assert UNAVAILABLE in texts[0], texts
        finally:
            if frozen:
                os.kill(pid, signal.SIGCONT)
        if not frozen:
            await w.start_redis()
        await w.ready(serve, within=20.0)
        await nothing_written(w, request)

        reply, took = await w.click(REVIEWER, request, via=serve)  # the same click, again
        assert reply.status == 200 and took < ACK_BUDGET, (reply, took)
        await completes(w, request, serve)
        assert len(w.ephemerals(REVIEWER)) == 1, "no second 'could not record'"


async def decide_reply_lost_after_redis_applied_it(tmp: Path) -> None:
    async with world(tmp, appendfsync="always") as w:
        proxy = await RedisProxy(w.redis_server.host, w.redis_server.port).start()
        try:
            serve = w.serve(REDIS_URL=proxy.url)
            await w.ready(serve)
            request = await posted_run(w, serve)
            sha = hashlib.sha1(DECIDE.encode()).hexdigest()
            await w.redis.script_load(DECIDE)  # so the click's first EVALSHA is the decide
            proxy.hold_reply_to(sha.encode(), LISTENER_BUDGET + 1.0)

            reply, took = await w.click(REVIEWER, request, via=serve)
            assert reply.status == 200 and took < ACK_BUDGET, (reply, took)
            assert proxy.held == 1, "the decide did not go through the stalled connection"
            await asyncio.sleep(LISTENER_BUDGET + 1.5)  # the stall is over; anything sent ran
            current = await w.request(request.request_id)
            assert current.decided and current.decided_by == REVIEWER  # Redis ran the script
            # The click's answer came late: the bot looks again rather than guessing, so the
            # reviewer is never told "nothing was changed" about a recorded decision.
            texts = w.ephemerals(REVIEWER)
            told_unchanged = any("Nothing was changed" in t for t in texts)
            assert not told_unchanged, (
                f"the clicker was told {texts!r} but the request is {current.status} "
                f"by {current.decided_by}; refunds run: {len(w.refunds())}"
            )
        finally:
            await proxy.stop()


async def slow_redis_and_slow_slack_share_one_budget(tmp: Path) -> None:
    """A reviewer-group lookup that takes 1.5 s and a DECIDE whose reply takes 1.2 s: each
    under its own timeout, together over Slack's 3 s unless one budget bounds the click."""
    routes = write_file(
        tmp / "routes.yml",
        "routes:\n  - tool: issue_refund\n    channel: C0APPROVALS\n    reviewers: [S0REVIEWERS]\n",
    )
    async with world(tmp, appendfsync="always", COUNTERSIGN_ROUTES_FILE=str(routes)) as w:
        proxy = await RedisProxy(w.redis_server.host, w.redis_server.port).start()
        try:
            serve = w.serve(REDIS_URL=proxy.url)
            await w.ready(serve)
            request = await posted_run(w, serve)
            sha = hashlib.sha1(DECIDE.encode()).hexdigest()
            await w.redis.script_load(DECIDE)
            proxy.hold_reply_to(sha.encode(), 1.2)
            w.standin.inject("usergroups.users.list", status=200, delay=1.5)

            reply, took = await w.click(REVIEWER, request, via=serve)
            assert reply.status == 200 and took < ACK_BUDGET, (reply, took)
            texts = await ephemerals(w, REVIEWER, 1)
            assert "could not confirm" in texts[0] or "recorded" in texts[0], texts
            await asyncio.sleep(2.0)  # whatever was sent has run by now
            current = await w.request(request.request_id)
            # Nothing half-done: either decided whole (and resumed) or untouched.
            if current.decided:
                assert current.decided_by == REVIEWER and current.approvals == [REVIEWER]
                await completes(w, request, serve)
            else:
                assert not current.approvals
        finally:
            await proxy.stop()


SCENARIOS: dict[str, tuple[Any, float, Any]] = {
    "always/sigkill-mid-flow": (always_sigkill_mid_flow, 14, ()),
    "everysec/sigkill-keeps-2s-old-decision": (everysec_sigkill_keeps_older_decision, 10, ()),
    "click/redis-refusing": (lambda tmp: click_while_redis_down(tmp, "refusing"), 8, ()),
    "click/redis-frozen": (lambda tmp: click_while_redis_down(tmp, "frozen"), 8, ()),
    "click/decide-applied-reply-lost": (decide_reply_lost_after_redis_applied_it, 8, ()),
    "click/slow-redis-and-slow-slack": (slow_redis_and_slow_slack_share_one_budget, 10, ()),
}


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    jobs = {key: (fn, seconds) for key, (fn, seconds, _) in SCENARIOS.items()}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=3) as futures:
        yield futures


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(key, id=key, marks=marks) for key, (_, _, marks) in SCENARIOS.items()],
)
def test_redis_fault_loses_nothing_acknowledged(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    scenarios[scenario].result(timeout=110)
