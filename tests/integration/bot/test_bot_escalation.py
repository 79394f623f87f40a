"""The escalation ladder end to end (real Redis, the Slack stand-in, signed Slack requests):
a reminder in the thread mentioning the reviewers, an escalated copy elsewhere linking the
original whose buttons decide the request and keep both messages in step, each step once
whatever the number of sweepers, restarts and redeliveries, and none after a decision."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent_host.approvals import ApprovalRequest
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.ladder import ESCALATED, REMINDED
from agent_host.durable.outbox import Outbox
from agent_host.durable.sweeper import Sweeper
from bot import blocks
from slack_sandbox.workspace import Channel
from tests.integration.bot.test_bot_commands import approvals, listed_ids
from tests.integration.bot.test_bot_home import private_request
from tests.support.keyspace import xrange_all, zcard_all
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    OPS,
    OUTSIDER,
    REVIEWER,
    REVIEWER2,
    TOKEN,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

GROUP = "S0REVIEWERS"


async def _route(stack: Stack, ladder: str, reviewers: str = f"<@{REVIEWER}>") -> str:
    spec = f"tool=issue_refund channel=<#{CHANNEL}|approvals> reviewers={reviewers} {ladder}"
    reply = await stack.approvals(ADMIN, CHANNEL, f"route add {spec}")
    text = str(reply.json()["text"])
    assert "Added route" in text, text
    return text


async def _events(stack: Stack, request: ApprovalRequest, *names: str) -> list[dict[str, str]]:
    return [
        e
        for e in await stack.host.store.audit(request.run_id)
        if e.get("request_id") == request.request_id and e.get("event") in names
    ]


async def _admin_told(stack: Stack, request: ApprovalRequest) -> str:
    """The direct message the admin got about `request`'s escalation."""
    dm = stack.standin.workspace.im_channel(ADMIN).id

    async def told() -> str | None:
        texts = [m["text"] for m in stack.channel_messages(dm)]
        return next((t for t in texts if request.request_id in t), None)

    return await eventually(told, what=f"the admin told of {request.request_id}")


async def _escalated(stack: Stack, request_id: str, copies: int = 1) -> ApprovalRequest:
    async def recorded() -> ApprovalRequest | None:
        current = await stack.host.store.get_request(request_id)
        return current if current is not None and len(current.escalations) >= copies else None

    return await eventually(recorded, what=f"{copies} escalated cop(ies) of {request_id}")


async def _permalink(stack: Stack, channel: str, ts: str) -> str:
    client = AsyncWebClient(token=TOKEN, base_url=f"{stack.standin.url.rstrip('/')}/")
    return str((await client.chat_getPermalink(channel=channel, message_ts=ts))["permalink"])


async def _settled(stack: Stack) -> None:
    """Every ladder step claimed and every outbox entry delivered: nothing more can come."""

    async def quiet() -> bool:
        if await zcard_all(stack.host.redis, "ladder"):
            return False
        for shard in K.shards():
            pending: Any = await stack.host.redis.xpending(shard.outbox, K.OUTBOX_GROUP)
            if int(pending["pending"]):
                return False
            groups: Any = await stack.host.redis.xinfo_groups(shard.outbox)
            if any(int(g.get("lag") or 0) for g in groups):
                return False
        return True

    await eventually(quiet, what="the ladder and the outbox to settle")


def _texts(message: dict[str, Any]) -> str:
    return str(message["blocks"])


async def _refund_escalating_to_the_group(stack: Stack) -> tuple[str, ApprovalRequest]:
    """A refund waiting on a route of GROUP's, escalated to GROUP's members after 1 s."""
    await _route(
        stack,
        f"escalate_after=1s escalate_to=<!subteam^{GROUP}|@reviewers>",
        f"<!subteam^{GROUP}>",
    )
    run_id = await stack.start_run("refund-agent", "refund order 123")
    [request] = await stack.pending_requests(run_id)
    return run_id, request


async def test_a_reminder_replies_in_the_thread_mentioning_the_reviewers_once(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        added = await _route(stack, "remind_after=1s", f"<@{REVIEWER}>,<!subteam^{GROUP}>")
        assert "reminds after 1s" in added
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.route.remind_after_seconds == 1

        [reminder] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert f"<@{REVIEWER}> <!subteam^{GROUP}>" in reminder["text"]
        assert "waiting for a decision" in reminder["text"]
        assert request.request_id in reminder["text"]
        [step] = await _events(stack, request, "reminded")
        assert step["detail"] == f"{REVIEWER},{GROUP}"

        # Deciding afterwards: the outcome joins the thread, and never a second reminder.
        await stack.click(REVIEWER, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        replies = await stack.thread_replies(CHANNEL, request.message_ts, count=2)
        assert [r["ts"] for r in replies if "waiting for a decision" in r["text"]] == [
            reminder["ts"]
        ]
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.reminder_ts == reminder["ts"]


async def test_an_escalated_copy_links_the_original_and_deciding_there_updates_both(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        added = await _route(stack, f"escalate_after=1s escalate_to=<#{OPS}|ops-approvals>")
        assert f"escalates to <#{OPS}> after 1s" in added
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        escalated = await _escalated(stack, request.request_id)
        [copy] = escalated.escalations
        assert (copy.to, copy.channel) == (OPS, OPS)
        link = await _permalink(stack, CHANNEL, request.message_ts)
        assert copy.link == link
        [posted] = stack.channel_messages(OPS)
        assert posted["ts"] == copy.ts
        note = posted["blocks"][0]
        assert note["type"] == "context"
        assert f"<{link}|the original request>" in note["elements"][0]["text"]
        assert f"<#{CHANNEL}>" in note["elements"][0]["text"]
        assert any(b["type"] == "actions" for b in posted["blocks"])  # its own buttons

        async def original_says_where() -> bool:
            return f"Escalated to <#{OPS}>" in _texts(stack.message(CHANNEL, request.message_ts))

        await eventually(original_says_where)
        [step] = await _events(stack, request, "escalated")
        assert step["detail"] == OPS
        [where] = await _events(stack, request, "escalation_posted")
        assert where["detail"] == OPS

        # The copy's buttons follow the route's rules: an outsider is refused, nothing moves.
        await stack.standin.click(OUTSIDER, OPS, copy.ts, blocks.APPROVE)
        [refusal] = await stack.wait_ephemerals(OUTSIDER)
        assert "not a reviewer" in refusal
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and still.status == "pending"

        # A reviewer approves from the copy (a signed block_actions request from #ops).
        await stack.standin.click(REVIEWER, OPS, copy.ts, blocks.APPROVE)
        decided = await stack.decided(request.request_id)
        assert decided.status == "approved" and decided.decided_by == REVIEWER
        original = await stack.decided_message(CHANNEL, request.message_ts)
        mirrored = await stack.decided_message(OPS, copy.ts)
        for message in (original, mirrored):
            assert "Approved" in _texts(message) and f"<@{REVIEWER}>" in _texts(message)
        assert f"<{link}|the original request>" in _texts(mirrored)
        assert f"Escalated to <#{OPS}>" in _texts(original)
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1
        assert len(stack.channel_messages(OPS)) == 1


async def test_an_escalation_to_a_user_group_messages_each_member_and_any_copy_decides(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, request = await _refund_escalating_to_the_group(stack)

        escalated = await _escalated(stack, request.request_id, copies=2)
        copies = {c.to: c for c in escalated.escalations}
        assert set(copies) == {REVIEWER, REVIEWER2}
        dms = {user: copies[user].channel for user in copies}
        assert all(channel.startswith("D") for channel in dms.values())
        link = await _permalink(stack, CHANNEL, request.message_ts)
        for user, copy in copies.items():
            [dm] = stack.channel_messages(dms[user])
            assert dm["ts"] == copy.ts and f"<{link}|the original request>" in _texts(dm)

        # REVIEWER2 rejects from their direct message: the form opens, the reason is kept.
        second = copies[REVIEWER2]
        await stack.standin.click(REVIEWER2, second.channel, second.ts, blocks.REJECT)
        view = await stack.opened_view(REVIEWER2, blocks.REJECT_MODAL)
        await stack.standin.submit_view(
            REVIEWER2, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not today"}}
        )
        decided = await stack.decided(request.request_id)
        assert decided.status == "rejected" and decided.decided_by == REVIEWER2
        for channel, ts in [(CHANNEL, request.message_ts)] + [
            (c.channel, c.ts) for c in copies.values()
        ]:
            assert "Rejected" in _texts(await stack.decided_message(channel, ts))
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 0


async def test_a_copy_posted_while_its_request_was_decided_shows_the_decision(
    redis_url: str, tmp_path: Path
) -> None:
    """The escalation DMs each member of a group. While the first copy is on its way, a
    reviewer decides in the channel (that decision's update cannot know the copy yet); then
    Slack fails the second copy for a while. The first copy still ends up showing the
    decision, not buttons that can only answer "already decided"."""
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, request = await _refund_escalating_to_the_group(stack)
        stack.host.notifier.attempts = 1  # type: ignore[attr-defined]  # each failure: later
        faults = stack.standin.core.faults
        slow = faults.inject("chat.postMessage", status=200, delay=1.5)  # the first copy
        faults.inject("chat.postMessage", status=503, times=10_000)  # then Slack fails

        await eventually(lambda: slow.remaining == 0, what="the first copy on its way")
        await stack.click(REVIEWER, request, blocks.APPROVE)
        decided = await stack.decided(request.request_id)
        assert decided.escalations == []  # its update went out before any copy was recorded
        [first] = (await _escalated(stack, request.request_id)).escalations
        faults.clear()

        shown = await stack.decided_message(first.channel, first.ts)
        assert "Approved" in _texts(shown)
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("refund") == 1


async def test_an_escalation_to_a_group_skips_the_requester_however_their_id_is_written(
    redis_url: str, tmp_path: Path
) -> None:
    """The requester may not decide their own request: a copy in their direct messages
    would only be refused, so they get none, even when the run named them in lower case."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(
            stack,
            f"escalate_after=1s escalate_to=<!subteam^{GROUP}|@reviewers>",
            f"<!subteam^{GROUP}>",
        )
        run_id = await stack.start_run("refund-agent", "refund order 123", REVIEWER2.lower())
        [request] = await stack.pending_requests(run_id)
        escalated = await _escalated(stack, request.request_id)
        await _settled(stack)
        current = await stack.host.store.get_request(escalated.request_id)
        assert current is not None and [c.to for c in current.escalations] == [REVIEWER]


async def test_an_escalation_to_the_requester_alone_is_recorded_as_reaching_nobody(
    redis_url: str, tmp_path: Path
) -> None:
    """Escalated to one person, who started the run: they may not decide it, so they get
    no copy; the audit trail says the escalation reached nobody who could decide."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"escalate_after=1s escalate_to=<@{REVIEWER2}>")
        run_id = await stack.start_run("refund-agent", "refund order 123", REVIEWER2)
        [request] = await stack.pending_requests(run_id)
        failed = await eventually(lambda: _events(stack, request, "delivery_failed"))
        assert "escalated_to_requester" in str(failed)
        told = await _admin_told(stack, request)  # nobody else would learn it
        assert "could not escalate" in told and f"<@{REVIEWER2}>" in told, told
        assert "escalated_to_requester" in told and f"<#{CHANNEL}>" in told, told
        await _settled(stack)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.escalations == []
        dm = stack.standin.workspace.im_channel(REVIEWER2).id
        assert stack.channel_messages(dm) == []


async def test_an_escalation_to_a_user_group_gone_from_slack_is_recorded_not_retried(
    redis_url: str, tmp_path: Path
) -> None:
    """The group was deleted after its route was added: it has nobody to tell, which no
    retry changes, so the escalation is recorded as failed at once."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"escalate_after=1s escalate_to=<!subteam^{GROUP}|@reviewers>")
        groups = stack.standin.workspace.usergroups
        groups[:] = [g for g in groups if g.id != GROUP]
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        [failed] = await eventually(lambda: _events(stack, request, "delivery_failed"))
        assert "no_members" in str(failed)
        told = await _admin_told(stack, request)
        assert "no_members" in told and f"<!subteam^{GROUP}>" in told, told
        await _settled(stack)
        assert len(stack.standin.calls_to("usergroups.users.list")) <= 2  # not retried


async def test_a_reminder_refused_for_good_is_told_to_the_admins(
    redis_url: str, tmp_path: Path
) -> None:
    """The request's channel was archived while it waited: its reviewers no longer see it
    and its reminder is refused for good; the admins learn it, once."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, "remind_after=1s")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        channel = stack.standin.workspace.channel(CHANNEL)
        assert channel is not None
        channel.is_archived = True
        [failed] = await eventually(lambda: _events(stack, request, "delivery_failed"))
        assert "is_archived" in str(failed)
        told = await _admin_told(stack, request)
        assert "could not remind the reviewers" in told, told
        assert "is_archived" in told and f"<#{CHANNEL}>" in told, told
        await _settled(stack)
        dm = stack.standin.workspace.im_channel(ADMIN).id
        assert sum(request.request_id in m["text"] for m in stack.channel_messages(dm)) == 1
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and not current.reminder_ts


async def test_a_decided_request_leaves_the_ladder_and_gets_no_reminder(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, "remind_after=2s escalate_after=3s escalate_to=C0OPS")
        decided_run = await stack.start_run("refund-agent", "refund order 123")
        [decided] = await stack.pending_requests(decided_run)
        await stack.click(REVIEWER, decided, blocks.APPROVE)
        await stack.decided(decided.request_id)
        shard = K.Keys(decided.request_id).shard
        left = [as_text(m) for m in await stack.host.redis.zrange(shard.ladder, 0, -1)]
        assert not [m for m in left if m.endswith(decided.request_id)]
        await stack.run_status(decided_run, "succeeded")

        # A later request on the same route: by the time it is reminded and escalated, the
        # decided one's steps (due earlier) would have come long before.
        waiting_run = await stack.start_run("refund-agent", "refund order 124")
        [waiting] = await stack.pending_requests(waiting_run)
        await stack.thread_replies(CHANNEL, waiting.message_ts)
        await _escalated(stack, waiting.request_id)
        await _settled(stack)

        [outcome] = stack.thread(CHANNEL, decided.message_ts)
        assert "waiting for a decision" not in outcome["text"]
        assert await _events(stack, decided, "reminded", "escalated") == []
        assert [m["ts"] for m in stack.channel_messages(OPS)] == [
            (await _escalated(stack, waiting.request_id)).escalations[0].ts
        ]


@asynccontextmanager
async def _more_sweepers(stack: Stack, count: int) -> AsyncIterator[None]:
    stop = asyncio.Event()
    sweepers = [
        Sweeper(stack.host.store, stack.host.approvals, interval=0.01) for _ in range(count)
    ]
    tasks = [asyncio.create_task(s.run(stop)) for s in sweepers]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_racing_sweepers_a_restart_and_redelivered_entries_repeat_no_step(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"remind_after=1s escalate_after=1s escalate_to={OPS}")
        async with _more_sweepers(stack, 3):  # four sweepers in all, polling every 10 ms
            run_id = await stack.start_run("refund-agent", "refund order 123")
            [request] = await stack.pending_requests(run_id)
            await _escalated(stack, request.request_id)
            await stack.thread_replies(CHANNEL, request.message_ts)
            await _settled(stack)

        assert len(stack.thread(CHANNEL, request.message_ts)) == 1
        assert len(stack.channel_messages(OPS)) == 1
        assert len(await _events(stack, request, "reminded")) == 1
        assert len(await _events(stack, request, "escalated")) == 1

        # A sweeper started afresh (a restarted process) finds nothing left to claim.
        assert await Sweeper(stack.host.store).ladder.climb() == 0
        # The steps' outbox entries delivered again (as after a crash before their ack)
        # post nothing new: what was posted is recorded with the request.
        outbox = Outbox(stack.host.store, stack.host.notifier, "redelivery")
        entries = [
            (as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()})
            for entry_id, fields in await xrange_all(stack.host.redis, "outbox")
        ]
        ladder_entries = [e for e in entries if e[1].get("type") in (REMINDED, ESCALATED)]
        assert len(ladder_entries) == 2
        for entry_id, fields in ladder_entries:
            await outbox.handle(entry_id, fields)
        assert len(stack.thread(CHANNEL, request.message_ts)) == 1
        assert len(stack.channel_messages(OPS)) == 1
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and len(current.escalations) == 1


async def test_an_escalation_delivered_again_after_its_copies_brings_the_original_up_to_date(
    redis_url: str, tmp_path: Path
) -> None:
    """An escalation's entry that stopped after recording its copies and before updating
    the original (a crash, or the admins' alert waiting for a refused token) is delivered
    again: it posts no copy again, and the original then says where it was escalated."""
    async with running_stack(redis_url, tmp_path) as stack:
        await _route(stack, f"escalate_after=1s escalate_to={OPS}")
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        before = stack.message(CHANNEL, request.message_ts)
        await _escalated(stack, request.request_id)
        await _settled(stack)
        assert f"Escalated to <#{OPS}>" in _texts(stack.message(CHANNEL, request.message_ts))

        [original] = [
            m
            for m in stack.standin.workspace.messages
            if (m.channel, m.ts) == (CHANNEL, request.message_ts)
        ]
        original.text, original.blocks = before["text"], before["blocks"]  # the update missed
        outbox = Outbox(stack.host.store, stack.host.notifier, "redelivery")
        [(entry_id, fields)] = [
            (as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()})
            for entry_id, fields in await xrange_all(stack.host.redis, "outbox")
            if as_text(fields.get(b"type", b"")) == ESCALATED
        ]
        await outbox.handle(entry_id, fields)

        assert f"Escalated to <#{OPS}>" in _texts(stack.message(CHANNEL, request.message_ts))
        assert len(stack.channel_messages(OPS)) == 1  # no copy posted again


async def test_bad_ladder_values_are_refused_and_change_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.workspace.channels.append(Channel("C0QUIET", "quiet", 0, [ADMIN]))
        for spec, says in [
            ("remind_after=soon", "remind_after 'soon' is not a duration"),
            ("remind_after=4d", "remind_after 4d is not before expiry 3d"),
            ("escalate_after=1h", "escalate_after needs escalate_to"),
            (f"escalate_after=1h escalate_to=<#{CHANNEL}>", "is the route's own channel"),
            ("escalate_after=1h escalate_to=<#C0QUIET|quiet>", "I am not a member of <#C0QUIET>"),
        ]:
            reply = await stack.approvals(ADMIN, CHANNEL, f"route add channel={CHANNEL} {spec}")
            text = str(reply.json()["text"])
            assert text.startswith(":warning:") and says in text, text
        listing = await stack.approvals(ADMIN, CHANNEL, "routes")
        assert "No routes" in listing.json()["text"]


async def test_whoever_a_request_was_escalated_to_finds_it_in_approvals(
    redis_url: str, tmp_path: Path
) -> None:
    """Escalated to someone outside the private channel of a route without named
    reviewers: they may decide it (from their copy), so `/approvals pending all` lists it
    for them and `show` shows it, wherever they type it; someone else outside still sees
    none of it."""
    async with running_stack(redis_url, tmp_path) as stack:
        request = await private_request(stack, f"escalate_after=1s escalate_to=<@{OUTSIDER}>")
        [copy] = (await _escalated(stack, request.request_id)).escalations

        listing = await approvals(stack, OUTSIDER, "pending all", CHANNEL)
        assert request.request_id in listed_ids(listing)
        shown = await approvals(stack, OUTSIDER, f"show {request.request_id}", CHANNEL)
        assert "`delete_file` requested by" in shown and not shown.startswith("No request")
        in_the_copys_channel = await approvals(stack, OUTSIDER, "pending all", copy.channel)
        assert request.request_id in listed_ids(in_the_copys_channel)

        stranger = await approvals(stack, REVIEWER2, "pending all", CHANNEL)
        assert request.request_id not in listed_ids(stranger)
