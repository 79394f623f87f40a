"""Slack misbehaving: the stand-in answers 429 (Retry-After), 500s, or too late, on each Web
API method the bot uses, against a real `countersign serve`. Nothing is lost (the message is
eventually posted and updated, decisions are recorded, refused clicks can be retried) and
nothing is posted twice, except where Slack applied a call whose answer never arrived (then
at most twice: the documented at-least-once).

The stand-in's injected faults are never applied; "applied, answered too late" is simulated
by the `LateAnswer` middleware. Timeouts are the bot's own: SlackNotifier (posts, updates)
10 s, ephemeral replies 10 s and views.open 2.5 s (bot/app.py), user-group lookups 1.8 s
(bot/reviewers.py). Each scenario owns its Redis, stand-in and `serve`; they mostly wait on
those timeouts, so they run concurrently (harness.run_concurrently).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_host.approvals import ApprovalRequest
from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing
from agent_host.durable.redis_ledger import RedisLedger
from agent_host.durable.route_book import RouteBook, RouteRule
from agent_host.durable.store import RunStore
from agent_host.durable.worker import ResumeWorker
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.runner import Runner
from bot import blocks
from bot.reviewers import SlackReviewerDirectory
from bot.slack_notifier import SlackNotifier

from .harness import (
    APPROVALS,
    OPS,
    REQUESTER,
    REVIEWER,
    REVIEWER2,
    CallLog,
    LateAnswer,
    Proc,
    World,
    run_concurrently,
    until,
    world,
    write_file,
)

NOTIFIER = SlackNotifier(client=None, default_channel="")
NOTIFY_TIMEOUT = (
    NOTIFIER.timeout
)  # bot/slack_notifier.py: posts and updates (the client's is 10 s too)
GROUP_TIMEOUT = SlackReviewerDirectory(client=None).timeout  # bot/reviewers.py
VIEWS_OPEN_TIMEOUT = 2.5  # bot/app.py _open_view
ACK_BUDGET = 2.5  # "well under" Slack's 3 s

# -- shared steps --------------------------------------------------------------------------


async def started(w: World) -> Proc:
    serve = w.serve()
    await w.ready(serve)
    return serve


async def buttons_gone(w: World, request: ApprovalRequest, within: float = 25.0) -> None:
    async def updated() -> bool:
        message = w.message(request.message_channel, request.message_ts)
        return not any(b.get("type") == "actions" for b in message.blocks)

    await until(f"message {request.message_ts} updated as decided", updated, within=within)


async def finished(
    w: World,
    serve: Proc,
    request: ApprovalRequest,
    *,
    approved: bool = True,
    decided_by: str = REVIEWER,
    within: float = 25.0,
) -> None:
    """The run ended well, its request decided once, message updated, outcome in the thread."""
    info = await w.run_reaches(request.run_id, "succeeded", "failed", within=within, watch=[serve])
    assert info.status == "succeeded", info
    final = await w.request(request.request_id)
    assert final.status == ("approved" if approved else "rejected"), final
    assert final.decided_by == decided_by
    assert len(await w.terminal_events(request.request_id)) == 1
    assert len(w.refunds()) == (1 if approved else 0), w.refunds()
    await buttons_gone(w, final, within)

    async def answered() -> bool:
        return bool(w.thread_replies(final.message_channel, final.message_ts))

    await until("the outcome reply in the thread", answered, within=within, watch=[serve])


async def click_ok(
    w: World, user: str, request: ApprovalRequest, action: str = blocks.APPROVE
) -> float:
    reply, took = await w.click(user, request, action)
    assert reply.status == 200, reply
    assert took < ACK_BUDGET, f"the click took {took:.2f}s to be acknowledged"
    return took


async def ephemeral(w: World, user: str, count: int, within: float = 10.0) -> list[str]:
    async def arrived() -> list[str] | None:
        texts = w.ephemerals(user)
        return texts if len(texts) >= count else None

    return await until(f"{count} ephemeral(s) for {user}", arrived, within=within)


def posts_of(log: CallLog, method: str) -> list[int]:
    return [status for _, status in log.of(method)]


# -- scenarios ------------------------------------------------------------------------------


async def posts_and_updates_429_then_500s(tmp: Path) -> None:
    log = CallLog()
    async with world(tmp, middlewares=[log.middleware]) as w:
        serve = await started(w)
        w.standin.inject("chat.postMessage", status=429, retry_after=1)
        w.standin.inject("chat.postMessage", status=500, times=2)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, within=20.0, watch=[serve])
        assert posts_of(log, "chat.postMessage")[:4] == [429, 500, 500, 200]
        (refused, _), (retried, _) = log.of("chat.postMessage")[:2]
        assert retried - refused >= 0.95, "Retry-After: 1 was not waited out"
        assert len(w.top_level_posts()) == 1

        w.standin.inject("chat.update", status=500, times=2)
        w.standin.inject("chat.update", status=429, retry_after=1)
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        assert posts_of(log, "chat.update")[:4] == [500, 500, 429, 200]
        (_, _), (_, _), (limited, _), (after, _) = log.of("chat.update")[:4]
        assert after - limited >= 0.95, "Retry-After: 1 was not waited out"
        assert len(w.top_level_posts()) == 1


async def post_fails_every_attempt_then_outbox_retries(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        w.standin.inject("chat.postMessage", status=500, times=NOTIFIER.attempts)
        run_id = await w.start_run(serve)
        # the notifier gives up after its attempts; the outbox entry stays pending and is
        # retried after its idle time (5 s in serve)
        request = await w.only_request(run_id, posted=True, within=30.0, watch=[serve])
        assert len(w.standin.calls_to("chat.postMessage")) == NOTIFIER.attempts + 1
        assert len(w.top_level_posts()) == 1
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        assert len(w.top_level_posts()) == 1


async def post_times_out_unapplied(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        w.standin.inject("chat.postMessage", status=500, delay=NOTIFY_TIMEOUT + 0.5)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, within=25.0, watch=[serve])
        assert len(w.standin.calls_to("chat.postMessage")) == 2
        assert len(w.top_level_posts()) == 1, "a timed-out post Slack never applied is posted once"
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        assert len(w.top_level_posts()) == 1


async def post_applied_but_answer_late(tmp: Path) -> None:
    late = LateAnswer("chat.postMessage", NOTIFY_TIMEOUT + 0.5)
    async with world(tmp, middlewares=[late.middleware]) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, within=25.0, watch=[serve])
        assert late.applied == 1
        posts = w.top_level_posts()
        assert 1 <= len(posts) <= 2, f"at least once, at most twice: {len(posts)}"
        assert request.message_ts in {m.ts for m in posts}
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        # the orphaned first copy still has buttons; clicking it changes nothing
        orphans = [m for m in posts if m.ts != request.message_ts]
        for orphan in orphans:
            await click_ok(w, REVIEWER2, request_at(request, orphan.ts))
            texts = await ephemeral(w, REVIEWER2, 1)
            assert "already *approved*" in texts[-1], texts
        assert len(await w.terminal_events(request.request_id)) == 1
        assert len(w.refunds()) == 1


def request_at(request: ApprovalRequest, ts: str) -> ApprovalRequest:
    copy = ApprovalRequest.from_hash(request.to_hash())
    copy.message_ts = ts
    return copy


async def update_times_out_unapplied(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, watch=[serve])
        w.standin.inject("chat.update", status=500, delay=NOTIFY_TIMEOUT + 0.5)
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        assert len(w.standin.calls_to("chat.update")) == 2
        assert len(w.top_level_posts()) == 1


async def refused_click_reply_rate_limited(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, watch=[serve])
        w.standin.inject("chat.postEphemeral", status=429, retry_after=1)
        await click_ok(w, REQUESTER, request)  # no self-approval on the default route
        texts = await ephemeral(w, REQUESTER, 1, within=8.0)
        assert "Not allowed" in texts[0], texts
        assert (await w.request(request.request_id)).status == "pending"


async def refused_click_reply_500_and_timeout(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, watch=[serve])
        w.standin.inject("chat.postEphemeral", status=500)
        await click_ok(w, REQUESTER, request)
        await ephemeral(w, REQUESTER, 1, within=8.0)
        w.standin.inject("chat.postEphemeral", status=500, delay=10.5)
        await click_ok(w, REQUESTER, request)
        texts = await ephemeral(w, REQUESTER, 2, within=25.0)
        assert len(texts) <= 3, "a timed-out ephemeral is re-sent at most once"
        assert all("Not allowed" in t for t in texts), texts
        assert (await w.request(request.request_id)).status == "pending"


async def views_open_fails_then_times_out(tmp: Path) -> None:
    async with world(tmp) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, watch=[serve])

        w.standin.inject("views.open", status=500)
        await click_ok(w, REVIEWER, request, blocks.REJECT)
        texts = await ephemeral(w, REVIEWER, 1)
        assert "Could not open the form" in texts[0], texts

        w.standin.inject("views.open", status=429, retry_after=1)
        await click_ok(w, REVIEWER, request, blocks.REJECT)
        texts = await ephemeral(w, REVIEWER, 2)
        assert "Could not open the form" in texts[1], texts

        w.standin.inject("views.open", status=500, delay=VIEWS_OPEN_TIMEOUT + 0.5)
        took = await click_ok(w, REVIEWER, request, blocks.REJECT)
        assert took < 1.5, "the ack must not wait for views.open"
        texts = await ephemeral(w, REVIEWER, 3)
        assert "Could not open the form" in texts[2], texts
        assert not w.standin.workspace.views
        assert (await w.request(request.request_id)).status == "pending"

        await click_ok(w, REVIEWER, request, blocks.REJECT)

        async def opened() -> Any:
            return next(iter(w.standin.workspace.views), None)

        view = await until("the reject modal", opened, within=10.0)
        reply = await w.standin.submit_view(
            REVIEWER, view.id, {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not this one"}}
        )
        assert reply.status == 200 and not reply.body.strip(), reply
        await finished(w, serve, request, approved=False)
        assert len(w.standin.workspace.views) == 1
        assert len(w.top_level_posts()) == 1


async def reviewer_group_lookup_fails(tmp: Path) -> None:
    routes = write_file(
        tmp / "routes.yml",
        "routes:\n  - tool: issue_refund\n    channel: C0APPROVALS\n    reviewers: [S0REVIEWERS]\n",
    )
    async with world(tmp, COUNTERSIGN_ROUTES_FILE=str(routes)) as w:
        serve = await started(w)
        run_id = await w.start_run(serve)
        request = await w.only_request(run_id, posted=True, watch=[serve])
        assert request.route.reviewers == ("S0REVIEWERS",)
        faults: list[dict[str, Any]] = [
            {"status": 500},
            {"status": 429, "retry_after": 5},  # (the quiet click's margin)
            {"status": 500, "delay": GROUP_TIMEOUT + 0.7},
        ]
        told = 0

        async def refused_closed(fault: dict[str, Any]) -> None:
            nonlocal told
            await click_ok(w, REVIEWER, request)  # fails closed, but answers in time
            told += 1
            texts = await ephemeral(w, REVIEWER, told)
            assert "could not check the reviewer group" in texts[-1], (fault, texts)
            current = await w.request(request.request_id)
            assert current.status == "pending" and not current.approvals, fault

        for fault in faults:
            w.standin.inject("usergroups.users.list", **fault)
            await refused_closed(fault)
            if fault["status"] == 429:  # while its Retry-After holds, Slack is not asked
                asked = len(w.standin.calls_to("usergroups.users.list"))
                await refused_closed({"quiet after": fault})
                assert len(w.standin.calls_to("usergroups.users.list")) == asked
                await asyncio.sleep(fault["retry_after"])
        # The app without the scope: every lookup is refused, so the reviewer is told
        # what an admin must fix, not to click again.
        scopes = w.standin.core.config.scopes
        w.standin.grant(*(s for s in scopes if s != "usergroups:read"))
        await click_ok(w, REVIEWER, request)
        told += 1
        (*_, text) = await ephemeral(w, REVIEWER, told)
        assert "`missing_scope`" in text and "admin" in text, text
        assert (await w.request(request.request_id)).status == "pending"
        w.standin.grant(*scopes)
        await click_ok(w, REVIEWER, request)
        await finished(w, serve, request)
        assert len(w.standin.calls_to("usergroups.users.list")) == len(faults) + 2


async def one_hung_channel_does_not_hold_up_another(tmp: Path) -> None:
    async with world(tmp) as w:
        # Two requests in two channels, paused by this process (which has no outbox) so that
        # serve's outbox reads both in one batch.
        routes = RouteBook(w.redis, APPROVALS)
        await routes.add(RouteRule(agent="cleanup-agent", channel=OPS), "test")
        store = RunStore(w.redis, KeyRing.parse(w.keys), routes)
        runner = Runner(
            build_registry(ExampleEffects(w.journal)), RedisLedger(w.redis, store.keyring)
        )
        pauser = ResumeWorker(store, runner, "test-pauser")
        await pauser.consumer.ensure_groups()
        # Both runs in one shard: each shard's outbox stream has one consumer per process,
        # which is where `concurrent=True` was meant to keep channels apart.
        refund_id, cleanup_id = same_shard_run_ids()
        refund = await store.create_run("refund-agent", "refund order 123", REQUESTER, refund_id)
        cleanup = await store.create_run(
            "cleanup-agent", "delete /tmp/a.docx", REQUESTER, cleanup_id
        )
        handled = 0
        deadline = time.monotonic() + 10
        while handled < 2 and time.monotonic() < deadline:
            handled += await pauser.consumer.poll()
        assert handled == 2
        for run_id in (refund, cleanup):
            assert (await w.run_info(run_id)).status == "waiting"

        w.standin.inject("chat.postMessage", status=500, delay=NOTIFY_TIMEOUT + 0.5)
        serve = await started(w)
        ready_at = time.monotonic()

        async def one_posted() -> bool:
            return bool(w.top_level_posts(APPROVALS) or w.top_level_posts(OPS))

        await until("a post to the channel that is not hung", one_posted, within=25.0)
        waited = time.monotonic() - ready_at
        assert waited < 5.0, f"the other channel's post waited {waited:.1f}s for the hung one"

        for run_id in (refund, cleanup):
            await w.only_request(run_id, posted=True, within=25.0, watch=[serve])
        assert len(w.top_level_posts(APPROVALS)) == 1 and len(w.top_level_posts(OPS)) == 1


def same_shard_run_ids() -> tuple[str, str]:
    first = K.new_run_id()
    while True:
        second = K.new_run_id()
        if K.Keys(second).shard == K.Keys(first).shard:
            return first, second


SCENARIOS: dict[str, tuple[Any, float, Any]] = {
    # key: (scenario, rough seconds, marks)
    "postMessage+update/429-then-500s": (posts_and_updates_429_then_500s, 12, ()),
    "postMessage/500-every-attempt": (post_fails_every_attempt_then_outbox_retries, 18, ()),
    "postMessage/timeout-unapplied": (post_times_out_unapplied, 16, ()),
    "postMessage/applied-answer-late": (post_applied_but_answer_late, 17, ()),
    "update/timeout-unapplied": (update_times_out_unapplied, 16, ()),
    "postEphemeral/429": (refused_click_reply_rate_limited, 10, ()),
    "postEphemeral/500+timeout": (refused_click_reply_500_and_timeout, 11, ()),
    "views.open/500+429+timeout": (views_open_fails_then_times_out, 10, ()),
    "usergroups.users.list/500+429+timeout+missing_scope": (reviewer_group_lookup_fails, 17, ()),
    # regression: StreamConsumer.poll once ignored `concurrent`, so one hung post held its shard
    "outbox/one-hung-channel": (one_hung_channel_does_not_hold_up_another, 16, ()),
}


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    jobs = {key: (fn, seconds) for key, (fn, seconds, _) in SCENARIOS.items()}
    with run_concurrently(request, tmp_path_factory, jobs, max_workers=6) as futures:
        yield futures


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(key, id=key, marks=marks) for key, (_, _, marks) in SCENARIOS.items()],
)
def test_slack_fault_loses_nothing_and_posts_nothing_twice(
    scenario: str, scenarios: dict[str, concurrent.futures.Future[Any]]
) -> None:
    scenarios[scenario].result(timeout=110)
