"""A turn with many gated calls: one message for them all, through real Redis, the Slack
stand-in and signed Slack requests. Approve all decides each call once through the approval
service (reviewers, self-approval, "approve what you saw" per call), Reject all with one
reason, Review one by one in the thread; the message keeps the tally whatever decides."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from agent_host.approvals import ApprovalRequest
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.outbox import Outbox
from agent_host.durable.route_book import parse_spec
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.tools import ToolContext, tool
from agent_host.settings import Settings
from bot import blocks
from slack_sandbox import workspace_to_dict
from slack_sandbox.payloads import block_actions_payload, button_action, payload_body
from slack_sandbox.seed import BOT_USER_ID
from slack_sandbox.workspace import Channel
from tests.support.host_env import resume_entries
from tests.support.keyspace import pass_deadline
from tests.support.signing import slack_headers
from tests.support.stack import (
    ADMIN,
    CHANNEL,
    OPS,
    OUTSIDER,
    REQUESTER,
    REVIEWER,
    REVIEWER2,
    SECRET,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

from .test_bot_home import (
    PRIVATE,
    add_private_channel,
    all_text,
    click_home,
    open_home,
    waiting_ids,
)
from .test_bot_undeliverable import (
    ADMIN_DM,
    SECRET_ROOM,
    WEBHOOK_SECRET,
    add_channels,
    outbox_drained,
    webhook_approve,
)

AGENTS = "tests.integration.bot.test_bot_bulk:registry"
SEVEN = " ".join(f"/tmp/draft-{n}.txt" for n in range(7))


def batch_agent(effects: ExampleEffects) -> Agent:
    """One turn of 4 archives and 3 deletions, all gated: 7 calls for one channel."""

    @tool(permission=Permission.ASK, reason="moves a file to the archive", severity="medium")
    def archive_file(path: str, ctx: ToolContext) -> str:
        """Archive a file."""
        effects.record("archive_file", path=path, key=ctx.idempotency_key)
        return f"Archived {path}"

    @tool(permission=Permission.ASK, reason="destructive: deletes a file", severity="high")
    def delete_file(path: str, ctx: ToolContext) -> str:
        """Delete a file."""
        effects.record("delete_file", path=path, key=ctx.idempotency_key)
        return f"Deleted {path}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            archives = [call("archive_file", path=f"/a/{n}.txt") for n in range(4)]
            deletions = [call("delete_file", path=f"/d/{n}.txt") for n in range(3)]
            return ModelResponse(tool_calls=archives + deletions)
        return reply("Batch done: " + "; ".join(m.content for m in c.results))

    return Agent(
        name="batch-agent",
        instructions="You tidy files.",
        tools=[archive_file, delete_file],
        model=ScriptedModel(script, name="scripted-batch"),
    )


def registry(settings: Settings) -> AgentRegistry:
    effects = ExampleEffects(settings.example_journal)
    examples = build_registry(effects)
    examples.register("batch-agent", lambda: batch_agent(effects))
    return examples


# -- helpers --------------------------------------------------------------------------------
# Each bulk message as first posted, with its buttons (bulk id -> message): replayed later.
_SNAPSHOTS: dict[str, dict[str, Any]] = {}


def texts(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks", []), ensure_ascii=False)


def actions(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["action_id"]: e
        for b in message.get("blocks", [])
        if b["type"] == "actions"
        for e in b["elements"]
    }


async def seven_on_route(stack: Stack, spec: str) -> tuple[str, list[ApprovalRequest]]:
    """An admin adds the route `spec`; a cleanup run asks for seven deletions at once: the
    run and its requests once their bulk message is posted."""
    added = await stack.approvals(ADMIN, CHANNEL, f"route add {spec}")
    assert "Added route" in added.json()["text"], added.body
    run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
    return run_id, await bulk_of(stack, run_id)


async def each_once(stack: Stack, run_id: str, requests: list[ApprovalRequest], event: str) -> bool:
    """Whether each request has exactly one `event` in the run's audit."""
    events = await audit_events(stack, run_id)
    return all(events[(r.request_id, event)] == 1 for r in requests)


async def bulk_of(stack: Stack, run_id: str, count: int = 7) -> list[ApprovalRequest]:
    """The run's requests once its bulk message is posted (each knows that message)."""

    async def posted() -> list[ApprovalRequest] | None:
        requests = await stack.host.store.run_requests(run_id)
        if len(requests) == count and all(r.bulk_ts for r in requests):
            return requests
        return None

    requests = await eventually(posted)
    first = requests[0]
    _SNAPSHOTS.setdefault(first.bulk_id, stack.message(first.message_channel, first.bulk_ts))
    return requests


async def click_bulk(stack: Stack, user: str, request: ApprovalRequest, action: str) -> None:
    reply = await stack.standin.click(user, request.message_channel, request.bulk_ts, action)
    assert reply.status == 200, reply.body


async def tally_shows(stack: Stack, request: ApprovalRequest, *wanted: str) -> dict[str, Any]:
    async def shown() -> dict[str, Any] | None:
        message = stack.message(request.message_channel, request.bulk_ts)
        return message if all(w in texts(message) for w in wanted) else None

    return await eventually(shown)


def signed_click(
    stack: Stack, user: str, channel: str, message: dict[str, Any], action_id: str
) -> bytes:
    """The body Slack sends for `user` clicking `action_id` on `message` as it was then
    (a snapshot): sent again later, it is a replay."""
    core = stack.standin.core
    found = next(
        (b["block_id"], e)
        for b in message["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == action_id
    )
    payload = block_actions_payload(
        core,
        user=core.workspace.user(user),  # type: ignore[arg-type]
        channel=core.workspace.channel(channel),  # type: ignore[arg-type]
        message_ts=message["ts"],
        message=message,
        thread_ts=None,
        action=button_action(*found),
        trigger_id=stack.standin.issue_trigger(user),
        response_url=core.new_response_url(channel, user, message["ts"], is_ephemeral=False),
    )
    return payload_body(payload)


async def send_signed(stack: Stack, body: bytes, *, at: int | None = None) -> str:
    """`body` signed now (or at `at`): the same body signed at another time passes the
    replay guard, which knows a request by its signature (a test of what lies behind it)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{stack.url}/slack/events",
            data=body,
            headers=dict(slack_headers(body, SECRET, at=at)),
        ) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.text()


async def audit_events(stack: Stack, run_id: str) -> Counter[tuple[str, str]]:
    return Counter(
        (e.get("request_id", ""), e["event"]) for e in await stack.host.store.audit(run_id)
    )


# -- one message ----------------------------------------------------------------------------
async def test_a_seven_call_turn_posts_one_message_with_the_bulk_buttons(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        [message] = stack.channel_messages(CHANNEL)
        assert all(r.bulk_id == requests[0].request_id for r in requests)
        assert all(r.message_ts == r.bulk_ts == message["ts"] for r in requests)
        assert stack.standin.calls_to("chat.postMessage").__len__() == 1

        shown = texts(message)
        assert "Approval needed: 7 calls from cleanup-agent" in shown
        for n in range(7):
            assert f"/tmp/draft-{n}.txt" in shown
        assert "7 calls: 7 waiting" in shown
        buttons = actions(message)
        assert set(buttons) == {blocks.BULK_APPROVE, blocks.BULK_REJECT, blocks.BULK_SPLIT}
        approve = buttons[blocks.BULK_APPROVE]
        assert approve["text"]["text"] == "Approve all 7"
        assert "Approve all 7 calls?" in approve["confirm"]["title"]["text"]
        assert "delete_file (7)" in approve["confirm"]["text"]["text"]
        assert blocks.APPROVE_ALWAYS not in buttons  # never for a bulk
        public = requests[0].public()
        assert public["bulk_id"] == requests[0].request_id


async def test_below_the_threshold_each_call_is_posted_alone_and_the_threshold_is_a_setting(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        five = " ".join(f"/tmp/f{n}.txt" for n in range(5))
        run_id = await stack.start_run("cleanup-agent", f"delete {five}")
        requests = await stack.pending_requests(run_id, 5)
        assert all(not r.bulk_id and not r.bulk_ts for r in requests)
        assert len({r.message_ts for r in requests}) == 5
        assert len(stack.channel_messages(CHANNEL)) == 5
    async with running_stack(redis_url, tmp_path / "two", COUNTERSIGN_BULK_THRESHOLD="2") as stack:
        run_id = await stack.start_run("cleanup-agent", "delete /tmp/x /tmp/y /tmp/z")
        requests = await bulk_of(stack, run_id, 3)
        assert len(stack.channel_messages(CHANNEL)) == 1
    async with running_stack(redis_url, tmp_path / "off", COUNTERSIGN_BULK_THRESHOLD="0") as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await stack.pending_requests(run_id, 7)
        assert all(not r.bulk_id for r in requests)
        assert len(stack.channel_messages(CHANNEL)) == 7


# -- Approve all ----------------------------------------------------------------------------
async def test_approve_all_decides_each_call_once_and_the_run_resumes_once(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_APPROVE)

        await stack.run_status(run_id, "succeeded")
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "Approved 7 call(s)" in told
        for request in requests:
            decided = await stack.host.store.get_request(request.request_id)
            assert decided is not None and decided.status == "approved"
            assert decided.decided_by == REVIEWER
            assert decided.decision is not None and decided.decision.call_hash == request.call_hash
        deleted = [e["path"] for e in stack.effects.all_events() if e["kind"] == "delete_file"]
        assert sorted(deleted) == sorted(f"/tmp/draft-{n}.txt" for n in range(7))
        assert len(await resume_entries(stack.host.redis, run_id)) == 1
        events = await audit_events(stack, run_id)
        assert all(events[(r.request_id, "approved")] == 1 for r in requests)

        final = await tally_shows(stack, requests[0], "All 7 calls decided", "7 approved")
        assert actions(final) == {}  # no buttons once every call is decided
        [outcome] = await stack.thread_replies(CHANNEL, requests[0].bulk_ts)
        assert "Cleanup finished" in outcome["text"]


async def test_a_duplicated_and_a_replayed_approve_all_change_nothing_more(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        first = requests[0]
        posted = stack.message(CHANNEL, first.bulk_ts)  # with its buttons, as first shown
        mine = signed_click(stack, REVIEWER, CHANNEL, posted, blocks.BULK_APPROVE)
        theirs = signed_click(stack, REVIEWER2, CHANNEL, posted, blocks.BULK_APPROVE)
        # The same click delivered twice (signed a second apart, so both reach the bulk's
        # listener), and another reviewer's at the same moment.
        now = int(time.time())
        await asyncio.gather(send_signed(stack, mine, at=now), send_signed(stack, mine, at=now - 1))
        await send_signed(stack, theirs)
        assert await send_signed(stack, mine, at=now) == ""  # a copy of a request taken
        await stack.run_status(run_id, "succeeded")
        await stack.wait_ephemerals(REVIEWER, 2)
        await stack.wait_ephemerals(REVIEWER2, 1)
        await tally_shows(stack, first, "All 7 calls decided")

        await send_signed(stack, mine, at=now - 2)  # delivered again once all is decided
        told = await stack.wait_ephemerals(REVIEWER, 3)
        assert "decided already" in told[-1]
        await stack.bot.tasks.drain(within=30)

        assert stack.effects.count("delete_file") == 7
        assert len(await resume_entries(stack.host.redis, run_id)) == 1
        events = await audit_events(stack, run_id)
        for request in requests:
            assert events[(request.request_id, "approved")] == 1
        decided = [await stack.decided(r.request_id) for r in requests]
        assert {r.status for r in decided} == {"approved"}
        assert {r.decided_by for r in decided} <= {REVIEWER, REVIEWER2}


async def test_a_reviewer_allowed_on_only_some_calls_approves_only_those(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        spec = f"tool=delete_file channel={CHANNEL} reviewers=<@{REVIEWER2}>"
        added = await stack.approvals(ADMIN, CHANNEL, f"route add {spec}")
        assert "Added route" in added.json()["text"], added.body
        run_id = await stack.start_run("batch-agent", "tidy up")
        requests = await bulk_of(stack, run_id)
        assert len(stack.channel_messages(CHANNEL)) == 1  # two routes, one channel

        await click_bulk(stack, REQUESTER, requests[0], blocks.BULK_APPROVE)  # their own run
        [own] = await stack.wait_ephemerals(REQUESTER)
        assert "7 call(s) left waiting" in own and "you started this run" in own

        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_APPROVE)
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "Approved 4 call(s)" in told
        assert "3 call(s) left waiting, not decided by you" in told
        assert told.count("delete_file") == 3 and "not a reviewer" in told
        states = {r.tool: set() for r in requests}
        for request in requests:
            current = await stack.host.store.get_request(request.request_id)
            assert current is not None
            states[request.tool].add(str(current.status))
        assert states == {"archive_file": {"approved"}, "delete_file": {"pending"}}
        await tally_shows(stack, requests[0], "4 approved", "3 waiting", "Approve all 3")
        info = await stack.host.store.run_info(run_id)
        assert info is not None and info.status == "waiting"  # the turn waits for all
        assert stack.effects.count("archive_file") == 0

        await click_bulk(stack, REVIEWER2, requests[0], blocks.BULK_APPROVE)
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("archive_file") == 4
        assert stack.effects.count("delete_file") == 3
        assert len(await resume_entries(stack.host.redis, run_id)) == 1


async def test_a_call_changed_or_a_list_changed_since_posting_is_not_approved(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        first, changed = requests[0], requests[3]
        redis = stack.host.redis
        bulk_key = K.Keys(first.bulk_id).bulk(first.bulk_id)
        members = await redis.hget(bulk_key, "members")

        # A call is slipped into the list the message was posted with: nothing is decided.
        listed = json.loads(members)
        await redis.hset(bulk_key, "members", json.dumps([*listed, ["req_ffffffff_0001", "x"]]))
        await click_bulk(stack, REVIEWER, first, blocks.BULK_APPROVE)
        [refused] = await stack.wait_ephemerals(REVIEWER)
        assert "not the ones it was posted with" in refused
        await stack.bot.tasks.drain(within=30)
        for request in requests:
            current = await stack.host.store.get_request(request.request_id)
            assert current is not None and not current.decided

        # One call changed after the message was posted: it is left waiting, the rest decided.
        await redis.hset(bulk_key, "members", members)
        request_key = K.Keys(changed.request_id).request(changed.request_id)
        await redis.hset(request_key, "call_hash", "f" * 64)
        await click_bulk(stack, REVIEWER, first, blocks.BULK_APPROVE)
        told = await stack.wait_ephemerals(REVIEWER, 2)
        assert "Approved 6 call(s)" in told[-1]
        assert "changed after the message was posted" in told[-1]
        assert changed.request_id in told[-1]
        still = await stack.host.store.get_request(changed.request_id)
        assert still is not None and still.status == "pending"
        assert stack.effects.count("delete_file") == 0  # the turn waits for that call


async def test_a_bulk_button_outside_its_own_message_is_refused(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        posted = stack.message(CHANNEL, requests[0].bulk_ts)
        copy = await stack.bot.client.chat_postMessage(
            channel=OPS, text="a copy", blocks=posted["blocks"]
        )
        await stack.standin.click(REVIEWER, OPS, copy["ts"], blocks.BULK_APPROVE)
        [refused] = await stack.wait_ephemerals(REVIEWER)
        assert "does not belong to this message" in refused
        await stack.bot.tasks.drain(within=30)
        for request in requests:
            current = await stack.host.store.get_request(request.request_id)
            assert current is not None and not current.decided


# -- Reject all, Review one by one ----------------------------------------------------------
async def test_reject_all_rejects_every_call_with_one_reason(
    redis_url: str, tmp_path: Path
) -> None:
    reason = "Keep the drafts until the audit is over"
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        await click_bulk(stack, REQUESTER, requests[0], blocks.BULK_REJECT)
        [refused] = await stack.wait_ephemerals(REQUESTER)
        assert "Not allowed" in refused and "you started this run" in refused
        assert workspace_to_dict(stack.standin.workspace)["views"] == []  # no form for them

        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_REJECT)
        view = await stack.opened_view(REVIEWER, blocks.BULK_REJECT_MODAL)
        assert "Reject the 7 calls" in json.dumps(view["view"])
        values = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
        assert (await stack.standin.submit_view(REVIEWER, view["id"], values)).status == 200

        await stack.run_status(run_id, "succeeded")
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "Rejected 7 call(s)" in told
        for request in requests:
            decided = await stack.decided(request.request_id)
            assert decided.status == "rejected" and decided.decided_by == REVIEWER
            assert getattr(decided.decision, "message", "") == reason
        assert stack.effects.count("delete_file") == 0
        info = await stack.host.store.run_info(run_id)
        assert info is not None and reason in info.output
        await tally_shows(stack, requests[0], "All 7 calls decided", "7 rejected")


async def test_reject_all_submitted_after_its_reviewer_left_the_channel_changes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        members = [REVIEWER, REQUESTER, ADMIN, BOT_USER_ID]
        stack.standin.workspace.channels.append(
            Channel(PRIVATE, "private-ops", 0, members, is_private=True)
        )
        # No named reviewers: the people of the private channel decide.
        run_id, requests = await seven_on_route(stack, f"agent=cleanup-agent channel={PRIVATE}")
        await reject_all_refused_after_leaving(stack, REVIEWER, members, run_id, requests)


async def reject_all_refused_after_leaving(
    stack: Stack, user: str, members: list[str], run_id: str, requests: list[ApprovalRequest]
) -> None:
    """`user` opens Reject all on the bulk message, leaves its channel (its `members`)
    with the form open, then submits it: refused, and nothing changes."""
    await click_bulk(stack, user, requests[0], blocks.BULK_REJECT)
    view = await stack.opened_view(user, blocks.BULK_REJECT_MODAL)
    members.remove(user)
    values = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not now"}}
    refused = await stack.standin.submit_view(user, view["id"], values)
    error = refused.json()["errors"][blocks.REASON_BLOCK]
    assert "Not allowed" in error and "you are not there" in error
    await stack.assert_still_waiting(run_id, *(r.request_id for r in requests))


async def test_reject_all_after_leaving_is_not_let_through_by_another_route_s_escalation(
    redis_url: str, tmp_path: Path
) -> None:
    """Two routes of one private channel, neither naming reviewers; the archive calls are
    escalated to REVIEWER2, the delete calls not. REVIEWER2 opens Reject all in the
    channel, leaves it, then submits: the archive calls' note is theirs, but the delete
    calls are the channel's people's alone, so the form is refused and nothing changes."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        members = [REVIEWER, REVIEWER2, REQUESTER, ADMIN, BOT_USER_ID]
        stack.standin.workspace.channels.append(
            Channel(PRIVATE, "private-ops", 0, members, is_private=True)
        )
        for spec in (
            f"tool=delete_file channel={PRIVATE}",
            f"tool=archive_file channel={PRIVATE} escalate_after=1s escalate_to=<@{REVIEWER2}>",
        ):
            added = await stack.approvals(ADMIN, PRIVATE, f"route add {spec}")
            assert "Added route" in added.json()["text"], added.body
        run_id = await stack.start_run("batch-agent", "tidy up")
        requests = await bulk_of(stack, run_id)
        archives = [r for r in requests if r.tool == "archive_file"]
        assert archives and len(archives) < len(requests)
        await eventually(lambda: each_once(stack, run_id, archives, "escalated"), within=20)
        await outbox_drained(stack)
        for request in archives:
            current = await stack.host.store.get_request(request.request_id)
            assert current is not None and [n.to for n in current.escalation_notes] == [REVIEWER2]

        await reject_all_refused_after_leaving(stack, REVIEWER2, members, run_id, requests)


async def test_review_one_by_one_posts_each_call_in_the_thread_and_the_tally_follows(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        bulk_ts = requests[0].bulk_ts
        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_SPLIT)
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "Posting the 7 call(s)" in told

        async def posted_alone() -> list[ApprovalRequest] | None:
            found = await stack.host.store.run_requests(run_id)
            alone = [r for r in found if r.message_ts != r.bulk_ts]
            return found if len(alone) == 7 else None

        split = await eventually(posted_alone)
        replies = await stack.thread_replies(CHANNEL, bulk_ts, 7)
        assert {r["ts"] for r in replies} == {r.message_ts for r in split}
        assert all(r.bulk_ts == bulk_ts for r in split)
        bulk_message = await tally_shows(stack, requests[0], "chose to review these one by one")
        assert actions(bulk_message) == {}

        # A second split, and Approve all from the message as it was, change nothing.
        await click_bulk_snapshot(stack, REVIEWER2, requests[0], blocks.BULK_SPLIT)
        await click_bulk_snapshot(stack, REVIEWER2, requests[0], blocks.BULK_APPROVE)
        second = await stack.wait_ephemerals(REVIEWER2, 2)
        assert all("chose to review these calls one by one" in t for t in second)
        assert len(stack.thread(CHANNEL, bulk_ts)) == 7

        # Each call is decided on its own message; the bulk message keeps the tally.
        one = split[2]
        await stack.standin.click(REVIEWER, CHANNEL, one.message_ts, blocks.APPROVE)
        await stack.decided_message(CHANNEL, one.message_ts)
        await tally_shows(stack, requests[0], "1 approved", "6 waiting")
        for request in split:
            if request.request_id != one.request_id:
                await stack.standin.click(REVIEWER, CHANNEL, request.message_ts, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        await tally_shows(stack, requests[0], "All 7 calls decided", "7 approved")
        assert stack.effects.count("delete_file") == 7
        events = await audit_events(stack, run_id)
        assert events[(requests[0].bulk_id, "bulk_split")] == 1


async def click_bulk_snapshot(
    stack: Stack, user: str, request: ApprovalRequest, action: str
) -> None:
    """Click `action` on the bulk message as it was first posted (its buttons since gone)."""
    snapshot = _SNAPSHOTS[request.bulk_id]
    await send_signed(stack, signed_click(stack, user, CHANNEL, snapshot, action))


# -- the tally follows every path -----------------------------------------------------------
async def test_the_tally_follows_the_webhook_the_sweeper_and_the_app_home_tab(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(
        redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=WEBHOOK_SECRET
    ) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        await webhook_approve(stack, requests[0].request_id)
        await tally_shows(stack, requests[0], "1 approved", "6 waiting", "Approve all 6")

        await stack.standin.open_home(REVIEWER)  # the App Home tab lists each call alone

        async def tab() -> dict[str, Any] | None:
            view = stack.standin.home_view(REVIEWER)
            block = blocks.actions_block_id(requests[1].request_id)
            if view and any(b.get("block_id") == block for b in view["blocks"]):
                return view
            return None

        await eventually(tab)
        block = blocks.actions_block_id(requests[1].request_id)
        await stack.standin.click_home(REVIEWER, blocks.APPROVE, block)
        await tally_shows(stack, requests[0], "2 approved", "5 waiting")

        for request in requests[2:]:
            await pass_deadline(stack.host.redis, request.request_id)
        await stack.run_status(run_id, "succeeded")
        final = await tally_shows(stack, requests[0], "All 7 calls decided", "5 expired")
        assert actions(final) == {}
        assert stack.effects.count("delete_file") == 2


async def test_a_redelivered_bulk_entry_posts_nothing_again(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await bulk_of(stack, run_id)
        outbox = Outbox(stack.host.store, stack.host.notifier, "test-redelivery")
        entry = {"type": "requests_posted_bulk", "bulk_id": requests[0].bulk_id}
        await outbox.handle("0-1", entry)
        await outbox.handle("0-2", entry)
        assert len(stack.standin.calls_to("chat.postMessage")) == 1
        assert len(stack.channel_messages(CHANNEL)) == 1


# -- nothing lost, nothing repeated -----------------------------------------------------------
async def test_a_channel_that_refuses_the_bulk_gets_each_call_rerouted_and_the_admins_told(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        add_channels(stack)
        await stack.bot.routes.add(parse_spec(f"agent=cleanup-agent channel={SECRET_ROOM}"), ADMIN)
        run_id = await stack.start_run("cleanup-agent", f"delete {SEVEN}")
        requests = await stack.pending_requests(run_id, 7)  # each posted somewhere
        assert {r.message_channel for r in requests} == {CHANNEL}
        assert all(r.delivery == "undeliverable" and not r.bulk_ts for r in requests)
        assert len(stack.channel_messages(CHANNEL)) == 7  # each on its own, saying why
        bulk = await stack.host.bulks.get(requests[0].bulk_id)
        assert bulk is not None and bulk.fallback and not bulk.posted

        async def admins_told() -> list[dict[str, Any]] | None:
            found = stack.channel_messages(ADMIN_DM)
            return found if len(found) == 7 else None

        await eventually(admins_told)
        for request in requests:  # decided on its own message, as any rerouted request
            await stack.standin.click(REVIEWER, CHANNEL, request.message_ts, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        assert stack.effects.count("delete_file") == 7


async def test_the_calls_of_one_message_share_one_reminder_in_its_thread(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, requests = await seven_on_route(
            stack, f"agent=cleanup-agent channel={CHANNEL} remind_after=1s"
        )

        await eventually(
            lambda: each_once(stack, run_id, requests, "reminded")
        )  # each call's step is taken, and audited
        await outbox_drained(stack)
        [reminder] = stack.thread(CHANNEL, requests[0].bulk_ts)
        assert "The calls in this message have been waiting" in reminder["text"]


async def test_the_shared_reminder_and_escalation_outlive_the_call_that_took_them_being_decided(
    redis_url: str, tmp_path: Path
) -> None:
    """The first of the message's calls to come due takes its route's reminder and
    escalation for all of them; Slack fails those posts for a while, and meanwhile that one
    call is decided. The six others still wait: they are reminded and escalated all the
    same, once (the others had left it to that call)."""
    async with running_stack(
        redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=WEBHOOK_SECRET
    ) as stack:
        run_id, requests = await seven_on_route(
            stack,
            f"agent=cleanup-agent channel={CHANNEL} remind_after=2s escalate_after=2s "
            f"escalate_to=<#{OPS}>",
        )
        stack.host.notifier.attempts = 1  # type: ignore[attr-defined]  # each failure: later
        failing = stack.standin.core.faults.inject("chat.postMessage", status=503, times=10_000)
        bulk_key = K.Keys(requests[0].bulk_id).bulk(requests[0].bulk_id)
        route_id = requests[0].route.route_id

        async def taken_and_failed() -> set[str] | None:
            by: Any = await stack.host.redis.hmget(
                bulk_key, [f"reminder_by:{route_id}", f"escalation_by:{route_id}"]
            )
            if None in by or failing.remaining > 10_000 - 2:
                return None
            return {as_text(b) for b in by}

        for request_id in await eventually(taken_and_failed, within=20):
            await webhook_approve(stack, request_id)
        stack.standin.core.faults.clear()

        async def reminded_and_escalated() -> bool:
            thread = stack.thread(CHANNEL, requests[0].bulk_ts)
            reminders = [m for m in thread if "have been waiting" in m["text"]]
            return len(reminders) == 1 and len(stack.channel_messages(OPS)) == 1

        await eventually(reminded_and_escalated, within=20)
        await outbox_drained(stack)
        assert await reminded_and_escalated()  # once each
        [note] = stack.channel_messages(OPS)
        waiting = [r for r in await stack.host.store.run_requests(run_id) if not r.decided]
        assert len(waiting) in (5, 6)  # the one or two calls that took the steps decided
        # The note counts what waited when its entry read the calls, which may be just
        # before the approvals landed (its post then waited for the channel's turn).
        counted = re.search(r"(\d+) of 7 calls", note["text"])
        assert counted is not None and len(waiting) <= int(counted.group(1)) <= 7, note["text"]


async def test_a_bulk_escalation_refused_for_good_is_told_to_the_admins_once(
    redis_url: str, tmp_path: Path
) -> None:
    """The message's calls escalate to the run's requester, who may not decide them: the
    escalation reaches nobody, which nothing else would say, so the admins are told (once,
    by the call that took the step for all seven)."""
    async with running_stack(redis_url, tmp_path) as stack:
        _, requests = await seven_on_route(
            stack,
            f"agent=cleanup-agent channel={CHANNEL} escalate_after=1s escalate_to=<@{REQUESTER}>",
        )
        ids = {r.request_id for r in requests}

        async def told() -> list[str] | None:
            texts = [m["text"] for m in stack.channel_messages(ADMIN_DM)]
            return [t for t in texts if any(i in t for i in ids)] or None

        [alert] = await eventually(told, within=20)
        assert "could not escalate" in alert and "escalated_to_requester" in alert, alert
        await outbox_drained(stack)
        assert len(await told() or []) == 1


async def test_calls_of_two_routes_in_one_message_each_follow_their_routes_ladder(
    redis_url: str, tmp_path: Path
) -> None:
    """One channel, two routes: the archive calls anyone may decide, reminded after 1 s and
    escalated to a reviewer; the delete calls a named reviewer's, reminded after 2 s and
    escalated to #ops. Each route's calls get their own reminder in the message's thread,
    mentioning their own reviewers, and their own escalation."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        for spec in (
            f"tool=delete_file channel={CHANNEL} reviewers=<@{REVIEWER2}> "
            f"remind_after=2s escalate_after=3s escalate_to=<#{OPS}>",
            f"tool=archive_file channel={CHANNEL} remind_after=1s "
            f"escalate_after=1s escalate_to=<@{REVIEWER}>",
        ):
            added = await stack.approvals(ADMIN, CHANNEL, f"route add {spec}")
            assert "Added route" in added.json()["text"], added.body
        run_id = await stack.start_run("batch-agent", "tidy up")
        requests = await bulk_of(stack, run_id)
        assert len({r.bulk_id for r in requests}) == 1  # one message for both routes

        await eventually(lambda: each_once(stack, run_id, requests, "escalated"), within=20)
        await outbox_drained(stack)

        async def two_reminders() -> list[dict[str, Any]] | None:
            thread = stack.thread(CHANNEL, requests[0].bulk_ts)
            return thread if len(thread) == 2 else None

        named, anyone = sorted(
            (m["text"] for m in await eventually(two_reminders)),
            key=lambda t: not t.startswith("<@"),
        )
        assert named.startswith(f"<@{REVIEWER2}>") and "yours to decide" in named
        assert "Anyone here may decide those no reviewer is named for" in anyone
        [note] = stack.channel_messages(OPS)  # the delete calls' escalation
        assert "3 of 3 calls" in note["text"]
        dm = stack.standin.workspace.im_channel(REVIEWER).id
        [direct] = await eventually(lambda: stack.channel_messages(dm) or None)
        assert "4 of 4 calls" in direct["text"]  # the archive calls'


async def test_a_quorum_applies_to_each_call_of_approve_all(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, requests = await seven_on_route(
            stack, f"agent=cleanup-agent channel={CHANNEL} reviewers=S0REVIEWERS quorum=2"
        )

        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_APPROVE)
        [first] = await stack.wait_ephemerals(REVIEWER)
        assert "Your approval is recorded on 7 call(s)" in first
        await tally_shows(stack, requests[0], "(1 of 2 approvals)", "7 waiting")
        await click_bulk(stack, REVIEWER, requests[0], blocks.BULK_APPROVE)  # again: one vote
        texts_ = await stack.wait_ephemerals(REVIEWER, 2)
        assert "You approved 7 call(s) already" in texts_[-1]
        for request in requests:
            current = await stack.host.store.get_request(request.request_id)
            assert current is not None and current.approvals == [REVIEWER]
            assert current.status == "pending"
        assert stack.effects.count("delete_file") == 0

        await click_bulk(stack, REVIEWER2, requests[0], blocks.BULK_APPROVE)
        await stack.run_status(run_id, "succeeded")
        for request in requests:
            decided = await stack.decided(request.request_id)
            assert decided.approvals == [REVIEWER, REVIEWER2]
        assert stack.effects.count("delete_file") == 7
        assert len(await resume_entries(stack.host.redis, run_id)) == 1


async def test_an_escalation_posts_one_note_linking_the_message_not_a_copy_of_each_call(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, requests = await seven_on_route(
            stack, f"agent=cleanup-agent channel={CHANNEL} escalate_after=1s escalate_to=<#{OPS}>"
        )

        await eventually(
            lambda: each_once(stack, run_id, requests, "escalated")
        )  # each call's step is taken, and audited
        await outbox_drained(stack)
        [note] = stack.channel_messages(OPS)
        assert "Escalated" in note["text"] and "7 of 7 calls of `cleanup-agent`" in note["text"]
        assert f"in <#{CHANNEL}>" in note["text"] and "|the message>" in note["text"]
        assert OPS in await stack.host.bulks.escalated_to(
            requests[0].bulk_id, requests[0].route.route_id
        )
        # Each call records the note (no copy of it): #ops's people may decide it.
        for current in await stack.host.store.run_requests(run_id):
            assert current.escalations == []
            [recorded] = current.escalation_notes
            assert (recorded.to, recorded.channel, recorded.ts) == (OPS, OPS, note["ts"])


async def test_a_bulk_escalation_lets_whoever_it_reached_decide_on_a_route_naming_no_reviewers(
    redis_url: str, tmp_path: Path
) -> None:
    """Seven calls routed to a private channel, no reviewers named, escalated to someone
    outside it: the note reaches them, and each call waits in their App Home tab with its
    buttons (not "Approve for this run", the channel's to give); they approve one from
    there, and the note's message is never turned into a copy of one call. Someone else
    outside the channel is offered none of them."""
    async with running_stack(redis_url, tmp_path) as stack:
        add_private_channel(stack)
        run_id, requests = await seven_on_route(
            stack,
            f"agent=cleanup-agent channel={PRIVATE} escalate_after=1s escalate_to=<@{OUTSIDER}>",
        )
        await eventually(lambda: each_once(stack, run_id, requests, "escalated"))
        await outbox_drained(stack)
        dm = stack.standin.workspace.im_channel(OUTSIDER).id
        [note] = stack.channel_messages(dm)
        assert "7 of 7 calls" in note["text"] and "or your countersign App Home tab" in note["text"]

        view = await open_home(stack, OUTSIDER)
        assert set(waiting_ids(view)) == {r.request_id for r in requests}
        assert blocks.APPROVE_ALWAYS not in all_text(view)
        await click_home(stack, OUTSIDER, requests[0], blocks.APPROVE)
        decided = await stack.decided(requests[0].request_id)
        assert decided.status == "approved" and decided.decided_by == OUTSIDER
        await tally_shows(stack, requests[0], "1 approved", "6 waiting")
        await outbox_drained(stack)
        assert stack.channel_messages(dm) == [note]  # the note, as it was posted

        others = await open_home(stack, REVIEWER2)
        assert not {r.request_id for r in requests} & set(waiting_ids(others))
