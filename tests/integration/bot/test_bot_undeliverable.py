"""Slack refusing for good (a channel the bot is not in, an archived channel, a deleted
message): nothing is retried for ever and nothing is silent. The request goes to the default
channel saying why, is marked undeliverable in the API and the audit, its outbox entry is
dead-lettered and acknowledged, the admins get a DM, and /metrics counts the error."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from agent_host.approvals import ApprovalRequest
from agent_host.durable import keys as K
from agent_host.durable.route_book import parse_spec
from bot import blocks
from slack_sandbox.signing import sign_request
from slack_sandbox.workspace import Channel
from tests.support.signing import webhook_signature
from tests.support.stack import (
    ADMIN,
    API_TOKEN,
    CHANNEL,
    REVIEWER,
    SECRET,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

from .test_bot_commands import approvals
from .test_bot_escalated_rights import all_actions, buttons, told
from .test_bot_home import all_text, click_home, home_after, open_home, publishes, waiting_ids
from .test_bot_signing import click_body, home_click_body, post

SECRET_ROOM = "C0SECRETROOM"  # exists, but the bot was never invited
ARCHIVED = "C0ARCHIVED"
WEBHOOK_SECRET = "webhook-secret"
ADMIN_DM = "D0ADMIN"  # the sandbox's DM channel of the bot with ADMIN


def add_channels(stack: Stack) -> None:
    people = [REVIEWER, ADMIN]
    stack.standin.workspace.channels += [
        Channel(SECRET_ROOM, "secret-room", 1_700_000_000, list(people)),
        Channel(ARCHIVED, "old-approvals", 1_700_000_000, [*people, "U0BOT"], is_archived=True),
    ]


async def route_to(stack: Stack, channel: str) -> None:
    """A route saved before the channel went bad (or from a routes file): no check applies."""
    await stack.bot.routes.add(parse_spec(f"agent=refund-agent channel={channel}"), ADMIN)


async def get(stack: Stack, path: str) -> Any:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{stack.url}{path}", headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json() if path.startswith("/api/") else await resp.text()


async def webhook_approve(stack: Stack, request_id: str) -> None:
    raw = json.dumps({"requestId": request_id, "decision": "approved"}).encode()
    signature = webhook_signature(raw, WEBHOOK_SECRET)
    headers = {"X-Webhook-Signature": signature, "Content-Type": "application/json"}
    url = f"{stack.url}/api/v1/webhooks/approval-response"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()


async def outbox_drained(stack: Stack) -> None:
    """Every outbox entry acknowledged: nothing is left to be retried."""

    async def drained() -> bool:
        for shard in K.shards():
            if not await stack.host.redis.exists(shard.outbox):
                continue
            groups = await stack.host.redis.xinfo_groups(shard.outbox)
            for group in groups:
                if int(group.get("pending") or 0) or int(group.get("lag") or 0):
                    return False
        return True

    await eventually(drained)


async def dead_letters(stack: Stack) -> list[dict[str, str]]:
    found = []
    for shard in K.shards():
        for _, fields in await stack.host.redis.xrange(shard.deadletter):
            found.append({k.decode(): v.decode() for k, v in fields.items()})
    return found


async def admin_dms(stack: Stack, count: int = 1) -> list[str]:
    async def arrived() -> list[str] | None:
        texts = [m["text"] for m in stack.channel_messages(ADMIN_DM)]
        return texts if len(texts) >= count else None

    return await eventually(arrived)


async def test_a_request_routed_where_the_bot_is_not_goes_to_the_default_channel(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        add_channels(stack)
        await route_to(stack, SECRET_ROOM)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)

        # Posted in the default channel instead, saying why; its buttons work there.
        assert request.message_channel == CHANNEL
        assert request.delivery == "undeliverable"
        assert request.delivery_error == "not_in_channel"
        message = stack.message(CHANNEL, request.message_ts)
        why = f"could not be posted to <#{SECRET_ROOM}>: `not_in_channel`"
        assert why in message["text"] and why in json.dumps(message["blocks"])
        assert "/invite @countersign" in message["text"]

        # The admin is told, in the app's DM.
        [dm] = await admin_dms(stack)
        assert request.request_id in dm and "not_in_channel" in dm and f"<#{CHANNEL}>" in dm

        # Tried once, then acknowledged: never retried.
        await outbox_drained(stack)
        posts = [c["channel"] for c in stack.standin.calls_to("chat.postMessage")]
        assert posts.count(SECRET_ROOM) == 1

        # Dead-lettered, marked in the audit trail and in the API.
        [letter] = await dead_letters(stack)
        assert letter["request_id"] == request.request_id
        assert letter["type"] == "request_posted"
        assert (letter["error"], letter["channel"]) == ("not_in_channel", SECRET_ROOM)
        audit = [e for e in await stack.host.store.audit(run_id) if e["event"] == "undeliverable"]
        assert [(e["request_id"], e["error"], e["channel"]) for e in audit] == [
            (request.request_id, "not_in_channel", SECRET_ROOM)
        ]
        [shown] = (await get(stack, f"/api/v1/runs/{run_id}"))["approvals"]
        assert shown["delivery"] == "undeliverable"
        assert shown["delivery_error"] == "not_in_channel"

        # /metrics counts the refusal, the deliveries and the dead letter.
        metrics = await get(stack, "/metrics")
        assert 'countersign_chat_deliveries_total{result="failed",error="not_in_channel"} 1' in (
            metrics
        )
        assert "countersign_dead_letters 1" in metrics

        # Approving in the fallback message resumes the run; the outcome lands in its thread.
        await stack.click(REVIEWER, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        decided = await stack.decided_message(CHANNEL, request.message_ts)
        assert why in decided["text"]  # the update keeps saying why it is here
        [outcome] = await stack.thread_replies(CHANNEL, request.message_ts)
        assert "refund" in outcome["text"].lower()
        assert stack.effects.count("refund") == 1
        await outbox_drained(stack)
        assert [c["channel"] for c in stack.standin.calls_to("chat.postMessage")].count(
            SECRET_ROOM
        ) == 1


async def test_a_private_channel_s_request_for_its_people_is_not_rerouted_to_the_default_one(
    redis_url: str, tmp_path: Path
) -> None:
    """A route naming no reviewers into a private channel the bot was removed from: its
    channel's people decide its requests, and the default channel's would all read and
    decide one, so it is not posted there; it waits, undeliverable, and the admins are told
    why and what to do. The same channel's route naming reviewers is rerouted as before
    (only they decide it wherever it is posted)."""
    private_room = "C0PRIVATEROOM"
    async with running_stack(redis_url, tmp_path) as stack:
        add_channels(stack)
        stack.standin.workspace.channels.append(
            Channel(private_room, "private-room", 1_700_000_000, [REVIEWER, ADMIN], is_private=True)
        )
        await route_to(stack, private_room)
        run_id = await stack.start_run("refund-agent", "refund order 123")

        async def undeliverable() -> ApprovalRequest | None:
            requests = await stack.host.store.run_requests(run_id)
            return next((r for r in requests if r.delivery == "undeliverable"), None)

        request = await eventually(undeliverable)
        [dm] = await admin_dms(stack)
        assert request.request_id in dm and "was not posted to the default channel" in dm, dm
        assert "name the route's reviewers" in dm, dm
        await outbox_drained(stack)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and not current.message_ts
        posts = [c["channel"] for c in stack.standin.calls_to("chat.postMessage")]
        assert CHANNEL not in posts

        named = f"agent=cleanup-agent channel={private_room} reviewers=<@{REVIEWER}>"
        await stack.bot.routes.add(parse_spec(named), ADMIN)
        other = await stack.start_run("cleanup-agent", "delete /tmp/a.txt")
        [rerouted] = await stack.pending_requests(other)
        assert rerouted.message_channel == CHANNEL


async def test_a_rerouted_request_offers_its_call_not_the_rest_of_the_run(
    redis_url: str, tmp_path: Path
) -> None:
    """ "Approve for this run" reaches past the call on screen, and is the route's own
    channel's people's to give; a request rerouted to the default channel could not be
    posted there. Its call is decided in the default channel; the rest of the run is
    neither offered on its message nor in the tab, and a forged click changes nothing."""
    async with running_stack(redis_url, tmp_path) as stack:
        add_channels(stack)
        await route_to(stack, SECRET_ROOM)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.rerouted and request.allow_always
        assert blocks.APPROVE_ALWAYS not in buttons(stack.message(CHANNEL, request.message_ts))

        body = click_body(stack, REVIEWER, request, blocks.APPROVE_ALWAYS, forged=True)
        status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200
        refused = await told(stack, REVIEWER)
        assert "Not allowed" in refused and "approve this call alone" in refused

        view = await open_home(stack, REVIEWER)
        assert request.request_id in waiting_ids(view)
        assert blocks.APPROVE_ALWAYS not in all_actions(view)
        seen = publishes(stack, REVIEWER)
        body = home_click_body(stack, REVIEWER, request, blocks.APPROVE_ALWAYS, forged=True)
        status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
        assert status == 200
        assert "Not allowed" in all_text(await home_after(stack, REVIEWER, seen))
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and current.decision is None

        await stack.click(REVIEWER, request, blocks.APPROVE)  # the call alone
        await stack.run_status(run_id, "succeeded")
        decided = await stack.decided(request.request_id)
        assert decided.decision is not None and not decided.decision.always


async def test_when_the_default_channel_refuses_too_the_admins_are_still_told(
    redis_url: str, tmp_path: Path
) -> None:
    env = {"COUNTERSIGN_WEBHOOK_SECRET": WEBHOOK_SECRET, "COUNTERSIGN_DEFAULT_CHANNEL": ARCHIVED}
    async with running_stack(redis_url, tmp_path, **env) as stack:
        add_channels(stack)
        await route_to(stack, SECRET_ROOM)
        run_id = await stack.start_run("refund-agent", "refund order 123")

        [dm] = await admin_dms(stack)
        await outbox_drained(stack)
        [request] = await stack.host.store.run_requests(run_id)
        assert request.request_id in dm and "is_archived" in dm
        assert "could not be posted anywhere else" in dm
        assert request.message_ts == "" and request.delivery == "undeliverable"
        [letter] = await dead_letters(stack)
        assert letter["request_id"] == request.request_id
        events = [(e["event"], e.get("error")) for e in await stack.host.store.audit(run_id)]
        assert ("undeliverable", "not_in_channel") in events
        assert ("delivery_failed", "is_archived") in events

        # It can still be decided (here by the webhook); the run's outcome is not held back
        # waiting for a message that will never exist.
        await webhook_approve(stack, request.request_id)
        await stack.run_status(run_id, "succeeded")
        await outbox_drained(stack)
        assert stack.effects.count("refund") == 1


async def test_an_update_of_a_deleted_message_is_recorded_and_dropped(
    redis_url: str, tmp_path: Path
) -> None:
    env = {"COUNTERSIGN_WEBHOOK_SECRET": WEBHOOK_SECRET}
    async with running_stack(redis_url, tmp_path, **env) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert stack.standin.workspace.delete_message(CHANNEL, request.message_ts)

        await webhook_approve(stack, request.request_id)
        await stack.run_status(run_id, "succeeded")

        async def recorded() -> list[dict[str, str]]:
            return [
                e
                for e in await stack.host.store.audit(run_id)
                if e["event"] == "delivery_failed" and e["notification"] == "request_decided"
            ]

        [failure] = await eventually(recorded)
        assert failure["error"] == "message_not_found" and failure["channel"] == CHANNEL
        await outbox_drained(stack)
        assert len(stack.standin.calls_to("chat.update")) == 1  # not retried
        assert await dead_letters(stack) == []  # only posts are dead-lettered
        metrics = await get(stack, "/metrics")
        assert 'countersign_chat_deliveries_total{result="failed",error="message_not_found"} 1' in (
            metrics
        )


async def test_route_add_refuses_a_channel_the_bot_cannot_post_in(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        add_channels(stack)
        cases = {
            SECRET_ROOM: "/invite @countersign",
            ARCHIVED: "is archived",
            "C0NOSUCHROOM": "does not exist",
        }
        for channel, fix in cases.items():
            answer = await approvals(
                stack, ADMIN, f"route add agent=refund-agent channel={channel}"
            )
            assert answer.startswith(":warning: Route not added:"), answer
            assert f"<#{channel}>" in answer and fix in answer
        assert await stack.bot.routes.rules() == []
        assert await stack.host.redis.xrange(K.AUDIT) == []

        # Once the bot is invited, the same command works.
        room = stack.standin.workspace.channel(SECRET_ROOM)
        assert room is not None
        room.members.append("U0BOT")
        added = await approvals(stack, ADMIN, f"route add agent=refund-agent channel={SECRET_ROOM}")
        assert "Added route `r1`" in added


async def test_a_request_posted_nowhere_keeps_approve_for_this_run_in_the_tab(
    redis_url: str, tmp_path: Path
) -> None:
    """With no message anywhere, the App Home tab of the route's channel's people is where
    they decide it: "Approve for this run" is theirs to give there (its original channel is
    the route's destination)."""
    env = {"COUNTERSIGN_DEFAULT_CHANNEL": ARCHIVED}
    async with running_stack(redis_url, tmp_path, **env) as stack:
        add_channels(stack)
        await route_to(stack, SECRET_ROOM)
        run_id = await stack.start_run("refund-agent", "refund order 123")
        await admin_dms(stack)
        await outbox_drained(stack)
        [request] = await stack.host.store.run_requests(run_id)
        assert request.message_channel == "" and request.allow_always

        view = await open_home(stack, REVIEWER)  # in the route's channel
        assert blocks.APPROVE_ALWAYS in all_actions(view)
        await click_home(stack, REVIEWER, request, blocks.APPROVE_ALWAYS)
        decided = await stack.decided(request.request_id)
        assert decided.decision is not None and decided.decision.always
