"""The App Home tab, "waiting for you": published when the tab is opened (a signed
`app_home_opened` event, retried as Slack retries), listing only what the person may
decide, oldest first, with buttons that decide through the same path, and published again
after each of their decisions, wherever they made it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from agent_host.approvals import ApprovalRequest
from agent_host.durable.reviewer_log import ReviewerLog
from bot import blocks
from bot.blocks.home import WAITING_MAX
from bot.blocks.message import buttons_block
from bot.member_channels import DECISION_MAX_AGE
from slack_sandbox.blockkit import check_view
from slack_sandbox.payloads import home_actions_payload, payload_body
from slack_sandbox.seed import BOT_USER_ID
from slack_sandbox.signing import sign_request
from slack_sandbox.workspace import Channel
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

from .test_bot_commands import approvals

PRIVATE = "C0PRIVATE"  # a private channel the outsider is not in


# -- helpers --------------------------------------------------------------------------------
def publishes(stack: Stack, user: str) -> int:
    return sum(1 for p in stack.standin.calls_to("views.publish") if p.get("user_id") == user)


async def home_after(stack: Stack, user: str, seen: int) -> dict[str, Any]:
    """`user`'s tab once it was published more than `seen` times (checked as Slack would)."""

    async def published() -> dict[str, Any] | None:
        if publishes(stack, user) <= seen:
            return None
        return stack.standin.home_view(user)

    view = await eventually(published)
    assert check_view(view) is None, check_view(view)
    return view


async def open_home(stack: Stack, user: str) -> dict[str, Any]:
    seen = publishes(stack, user)
    reply = await stack.standin.open_home(user)
    assert reply.status == 200, reply.body
    return await home_after(stack, user, seen)


def waiting_ids(view: dict[str, Any]) -> list[str]:
    """The requests the tab offers buttons for, in order."""
    prefix = blocks.actions_block_id("")
    return [
        b["block_id"][len(prefix) :]
        for b in view["blocks"]
        if b["type"] == "actions" and b.get("block_id", "").startswith(prefix)
    ]


def recent_text(view: dict[str, Any]) -> str:
    """The "Decided by you recently" part of the tab."""
    texts, after = [], False
    for block in view["blocks"]:
        if block["type"] == "header":
            after = block["text"]["text"].startswith("Decided by you")
        elif after:
            texts.append(json.dumps(block))
    return "\n".join(texts)


def all_text(view: dict[str, Any]) -> str:
    return json.dumps(view["blocks"])


async def click_home(stack: Stack, user: str, request: ApprovalRequest, action: str) -> None:
    block = blocks.actions_block_id(request.request_id)
    reply = await stack.standin.click_home(user, action, block)
    assert reply.status == 200, reply.body


async def private_request(stack: Stack, ladder: str = "") -> ApprovalRequest:
    """A request routed to the private channel (the outsider is not in it), with no
    reviewers named: the people of the channel decide it."""
    add_private_channel(stack)
    route = f"route add agent=cleanup-agent channel={PRIVATE} {ladder}".strip()
    await approvals(stack, ADMIN, route)
    run = await stack.start_run("cleanup-agent", "delete /srv/private.txt")
    [request] = await stack.pending_requests(run)
    return request


def add_private_channel(stack: Stack) -> None:
    members = [REVIEWER, REQUESTER, ADMIN, BOT_USER_ID]
    stack.standin.workspace.channels.append(
        Channel(PRIVATE, "private-ops", 0, members, is_private=True)
    )


# -- opening the tab ------------------------------------------------------------------------
async def test_opening_the_tab_publishes_what_waits_oldest_first_with_buttons(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        empty = await open_home(stack, REVIEWER)
        assert waiting_ids(empty) == []
        assert "Nothing is waiting for your decision" in all_text(empty)

        first_run = await stack.start_run("refund-agent", "refund order 123")
        [first] = await stack.pending_requests(first_run)
        second_run = await stack.start_run("cleanup-agent", "delete /tmp/a.txt")
        [second] = await stack.pending_requests(second_run)
        assert first.created_at < second.created_at

        view = await open_home(stack, REVIEWER)
        assert waiting_ids(view) == [first.request_id, second.request_id]  # oldest first
        actions = {b["block_id"]: b for b in view["blocks"] if b["type"] == "actions"}
        shown = actions[blocks.actions_block_id(first.request_id)]["elements"]
        assert shown[0]["action_id"] == blocks.APPROVE
        assert blocks.REJECT in [e["action_id"] for e in shown]
        text = all_text(view)
        assert "issue_refund" in text and "delete_file" in text
        assert "order_id" in text  # the arguments, in one line
        assert "waiting <1m" in text  # the age
        links = {
            (p["channel"], p["message_ts"]) for p in stack.standin.calls_to("chat.getPermalink")
        }
        assert (CHANNEL, first.message_ts) in links
        assert "open message" in text and "countersign-sandbox.slack.com" in text


async def test_a_retried_event_is_not_processed_twice(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        first = await stack.standin.open_home(REVIEWER, event_id="Ev0HOME0001")
        assert first.status == 200
        await home_after(stack, REVIEWER, 0)
        # Slack thinks the delivery was missed and sends it again (X-Slack-Retry-Num 1, 2).
        for retry in (1, 2):
            again = await stack.standin.open_home(REVIEWER, event_id="Ev0HOME0001", retry=retry)
            assert again.status == 200
        await stack.bot.tasks.drain(within=30)  # whatever the deliveries started has finished
        assert publishes(stack, REVIEWER) == 1

        # A retry whose first delivery never arrived is the first one seen: processed.
        lost = await stack.standin.open_home(REVIEWER, event_id="Ev0HOME0002", retry=1)
        assert lost.status == 200
        await home_after(stack, REVIEWER, 1)
        await stack.bot.tasks.drain(within=30)
        assert publishes(stack, REVIEWER) == 2


async def test_events_are_verified_like_every_slack_request(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        ws = stack.standin.workspace
        event = {
            "type": "event_callback",
            "team_id": ws.team.id,
            "api_app_id": ws.bot.app_id,
            "event_id": "Ev0FORGED01",
            "event_time": 1,
            "event": {"type": "app_home_opened", "user": REVIEWER, "tab": "home"},
        }
        url = f"{stack.url}/slack/events"
        body = json.dumps(event).encode()
        elsewhere = json.dumps(event | {"team_id": "T0ELSEWHERE"}).encode()
        json_type = "application/json"
        async with aiohttp.ClientSession() as session:
            forged = {"Content-Type": json_type, **sign_request("wrong", int(time.time()), body)}
            async with session.post(url, data=body, headers=forged) as response:
                assert response.status == 401
            stale = slack_headers(body, SECRET, at=int(time.time()) - 600, content_type=json_type)
            async with session.post(url, data=body, headers=stale) as response:
                assert response.status == 401
            # Correctly signed, but from another workspace: acked, and nothing happens.
            signed = slack_headers(elsewhere, SECRET, content_type=json_type)
            async with session.post(url, data=elsewhere, headers=signed) as response:
                assert response.status == 200
        await stack.bot.tasks.drain(within=30)
        assert publishes(stack, REVIEWER) == 0
        # None of them took the event's id: the real delivery of it is processed.
        reply = await stack.standin.open_home(REVIEWER, event_id="Ev0FORGED01")
        assert reply.status == 200
        await home_after(stack, REVIEWER, 0)


# -- only what they may decide --------------------------------------------------------------
async def test_the_tab_shows_nobody_what_they_may_not_decide(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        add_private_channel(stack)
        group = "<!subteam^S0REVIEWERS>"  # REVIEWER and REVIEWER2
        await approvals(
            stack, ADMIN, f"route add agent=repo-admin channel={OPS} reviewers={group} quorum=2"
        )
        await approvals(stack, ADMIN, f"route add agent=cleanup-agent channel={PRIVATE}")
        run = await stack.start_run("repo-admin", "delete repos acme-prod")
        [quorum] = await stack.pending_requests(run)  # a group's, two approvals needed
        run = await stack.start_run("cleanup-agent", "delete /srv/private.txt")
        [private] = await stack.pending_requests(run)  # no reviewers, a private channel
        run = await stack.start_run("refund-agent", "refund order 123")
        [open_] = await stack.pending_requests(run)  # no reviewers, #approvals: everyone
        run = await stack.start_run("refund-agent", "refund order 124", requested_by=OUTSIDER)
        [own] = await stack.pending_requests(run)  # the outsider's own request

        outsider = await open_home(stack, OUTSIDER)
        assert waiting_ids(outsider) == [open_.request_id]  # only what they may decide
        text = all_text(outsider)
        for hidden in (quorum, private, own):
            assert hidden.request_id not in text
        assert "delete_repo" not in text and "private.txt" not in text

        reviewer = await open_home(stack, REVIEWER)
        everything = [quorum.request_id, private.request_id, open_.request_id, own.request_id]
        assert waiting_ids(reviewer) == everything
        requester = await open_home(stack, REQUESTER)  # not their own runs', not the group's
        assert waiting_ids(requester) == [own.request_id]
        admin = await open_home(stack, ADMIN)  # admins see all in /approvals; decide as anyone
        assert waiting_ids(admin) == [private.request_id, open_.request_id, own.request_id]

        # Every request shown is one the approval service lets that person decide.
        views = ((OUTSIDER, outsider), (REVIEWER, reviewer), (REQUESTER, requester))
        for user, view in (*views, (ADMIN, admin)):
            for request_id in waiting_ids(view):
                request = await stack.host.approvals.load(request_id)
                assert request is not None
                assert (await stack.host.approvals.may_decide(user, request)).allowed

        # A quorum vote cast leaves the voter's list (they cannot vote twice), not the
        # other reviewer's.
        seen = publishes(stack, REVIEWER)
        await click_home(stack, REVIEWER, quorum, blocks.APPROVE)
        after = await home_after(stack, REVIEWER, seen)
        assert quorum.request_id not in waiting_ids(after)
        assert quorum.request_id in recent_text(after) and "1 of 2" in recent_text(after)
        other = await open_home(stack, REVIEWER2)  # also not in the private channel
        assert waiting_ids(other) == [quorum.request_id, open_.request_id, own.request_id]
        assert "(1/2)" in all_text(other)


async def test_someone_who_left_a_private_channel_no_longer_sees_its_requests(
    redis_url: str, tmp_path: Path
) -> None:
    """Their channels were listed when they last opened the tab (kept a minute); the
    requests of a private channel they left since are not shown to them, as a click on
    them would be refused. What they may still decide takes their place, and the check
    asks Slack once per channel, not once per request."""
    async with running_stack(redis_url, tmp_path) as stack:
        add_private_channel(stack)
        await approvals(stack, ADMIN, f"route add agent=cleanup-agent channel={PRIVATE}")
        private = []
        for n in range(WAITING_MAX + 1):  # more than the tab holds
            run = await stack.start_run("cleanup-agent", f"delete /srv/f{n}.csv")
            private += await stack.pending_requests(run)
        run = await stack.start_run("refund-agent", "refund order 123")
        [refund] = await stack.pending_requests(run)  # #approvals: they are still in it
        shown = waiting_ids(await open_home(stack, REVIEWER))
        assert shown == [r.request_id for r in private][:WAITING_MAX]

        stack.standin.workspace.channel(PRIVATE).members.remove(REVIEWER)
        # Seconds later: their listing is kept (a minute), past the few seconds a click on
        # one of its requests would rest on.
        home = stack.host.notifier.after_decision.__self__  # type: ignore[attr-defined]
        home.channels.clock = lambda: time.monotonic() + DECISION_MAX_AGE + 1
        asked = len(stack.standin.core.calls)
        again = await open_home(stack, REVIEWER)

        assert waiting_ids(again) == [refund.request_id]
        assert "f0.csv" not in all_text(again) and "More are waiting" not in all_text(again)
        lookups = [n for n, _ in stack.standin.core.calls[asked:] if n.startswith("conversat")]
        assert len(lookups) <= 4, lookups  # per channel (two), not per request (22)
        assert len(waiting_ids(await open_home(stack, ADMIN))) == WAITING_MAX  # still in it


async def test_a_tab_slack_refuses_the_channels_for_says_what_an_admin_must_fix(
    redis_url: str, tmp_path: Path
) -> None:
    """Without `groups:read`, Slack refuses to list a person's channels (`missing_scope`):
    the requests of a channel's people stay off the tab (fail closed), and the tab says
    who must fix what, not "open this tab again in a moment", which would never help."""
    async with running_stack(redis_url, tmp_path) as stack:
        request = await private_request(stack)
        await left_out_while_refused(stack, REVIEWER, request, "groups:read")


async def left_out_while_refused(
    stack: Stack, user: str, request: ApprovalRequest, scope: str
) -> None:
    """Without `scope`, `user`'s tab leaves `request` out and says who must fix what (not
    "in a moment"); with it again, the tab lists it with no such note."""
    scopes = stack.standin.core.config.scopes
    stack.standin.grant(*(s for s in scopes if s != scope))
    view = await open_home(stack, user)
    assert request.request_id not in waiting_ids(view)
    text = all_text(view)
    assert "`missing_scope`" in text and "countersign admin fixes it" in text, text
    assert "open this tab again in a moment" not in text
    stack.standin.grant(*scopes)
    view = await open_home(stack, user)
    assert request.request_id in waiting_ids(view)
    assert "missing_scope" not in all_text(view)


async def test_a_forged_home_click_on_a_request_they_may_not_decide_changes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        private = await private_request(stack)
        view = await open_home(stack, OUTSIDER)
        assert waiting_ids(view) == []

        # The outsider's own tab, with the private request's buttons slipped in (a signed
        # payload: as if Slack had shown them): the server checks again, and refuses.
        ws = stack.standin.workspace
        home = ws.home(OUTSIDER)
        assert home is not None
        forged_view = json.loads(json.dumps(home.view))
        buttons = buttons_block(private)
        forged_view["blocks"].append(buttons)
        user = ws.user(OUTSIDER)
        assert user is not None
        action = {
            "action_id": blocks.APPROVE,
            "block_id": buttons["block_id"],
            "type": "button",
            "value": private.request_id,
            "action_ts": "1.0",
        }
        payload = home_actions_payload(
            stack.standin.core, user=user, view=forged_view, action=action, trigger_id="1.2.x"
        )
        body = payload_body(payload)
        seen = publishes(stack, OUTSIDER)
        async with aiohttp.ClientSession() as session:
            headers = dict(slack_headers(body, SECRET))
            async with session.post(f"{stack.url}/slack/events", data=body, headers=headers) as r:
                assert r.status == 200
        notice = await home_after(stack, OUTSIDER, seen)
        assert "Not allowed" in all_text(notice) and PRIVATE in all_text(notice)
        still = await stack.host.store.get_request(private.request_id)
        assert still is not None and not still.decided

        # A button block that is not in their tab at all is refused before anything else.
        payload["view"] = home.view
        body = payload_body(payload)
        seen = publishes(stack, OUTSIDER)
        async with aiohttp.ClientSession() as session:
            headers = dict(slack_headers(body, SECRET))
            async with session.post(f"{stack.url}/slack/events", data=body, headers=headers) as r:
                assert r.status == 200
        notice = await home_after(stack, OUTSIDER, seen)
        assert "does not belong" in all_text(notice)
        still = await stack.host.store.get_request(private.request_id)
        assert still is not None and not still.decided


async def test_a_form_submitted_after_its_reviewer_left_the_channel_changes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        request = await private_request(stack)
        await stack.click(REVIEWER, request, blocks.APPROVE_COMMENT)  # a member, on the message
        form = await stack.opened_view(REVIEWER, blocks.COMMENT_MODAL)
        channel = stack.standin.workspace.channel(PRIVATE)
        assert channel is not None
        channel.members.remove(REVIEWER)  # ... who leaves the channel with the form open

        comment = {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: "fine to delete"}}
        refused = await stack.standin.submit_view(REVIEWER, form["id"], comment)
        error = refused.json()["errors"][blocks.COMMENT_BLOCK]
        assert "Not allowed" in error and "you are not there" in error
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and not still.decided

        # Slack cannot say now: refused too, saying so, and nothing changes.
        stack.standin.inject("conversations.members", status=500)
        unsure = await stack.standin.submit_view(REVIEWER, form["id"], comment)
        assert "could not check your channels" in unsure.json()["errors"][blocks.COMMENT_BLOCK]

        channel.members.append(REVIEWER)  # back in the channel, the same form decides
        accepted = await stack.standin.submit_view(REVIEWER, form["id"], comment)
        assert accepted.status == 200 and accepted.json() is None  # closes with the ack
        await stack.run_status(request.run_id, "succeeded")


async def rejects_by_form(stack: Stack, user: str, request_id: str, channel: str, ts: str) -> None:
    """`user` clicks Reject on the message `ts` in `channel`, submits the form, and so
    rejects the request."""
    await stack.standin.click(user, channel, ts, blocks.REJECT)
    form = await stack.opened_view(user, blocks.REJECT_MODAL)
    reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "not this one"}}
    reply = await stack.standin.submit_view(user, form["id"], reason)
    assert reply.status == 200 and reply.json() is None, reply.body  # closes with the ack
    decided = await stack.decided(request_id)
    assert decided.status == "rejected" and decided.decided_by == user


async def test_in_a_public_channel_anyone_may_decide_even_one_not_in_it(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await approvals(stack, ADMIN, f"route add agent=cleanup-agent channel={CHANNEL}")
        channel = stack.standin.workspace.channel(CHANNEL)
        assert channel is not None and not channel.is_private
        channel.members.remove(OUTSIDER)  # ... who can still see and click there
        run = await stack.start_run("cleanup-agent", "delete /tmp/old.txt")
        [request] = await stack.pending_requests(run)
        # Slack cannot list the channel's members now: that it is public is enough.
        stack.standin.inject("conversations.members", status=500, times=10)
        await rejects_by_form(stack, OUTSIDER, request.request_id, CHANNEL, request.message_ts)


async def test_whoever_a_request_was_escalated_to_may_decide_it_outside_its_channel(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        request = await private_request(stack, f"escalate_after=1s escalate_to=<@{OUTSIDER}>")

        async def escalated() -> ApprovalRequest | None:
            current = await stack.host.store.get_request(request.request_id)
            return current if current is not None and current.escalations else None

        [copy] = (await eventually(escalated, what="the escalated copy")).escalations
        assert copy.to == OUTSIDER and copy.channel.startswith("D")
        lookups = ("users.conversations", "conversations.members", "conversations.info")
        for method in lookups:  # none is needed
            stack.standin.inject(method, status=500, times=10)
        await rejects_by_form(stack, OUTSIDER, request.request_id, copy.channel, copy.ts)


# -- deciding refreshes the tab -------------------------------------------------------------
async def test_deciding_from_the_tab_decides_once_and_refreshes_it(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run)
        view = await open_home(stack, REVIEWER)
        assert waiting_ids(view) == [request.request_id]
        other = await open_home(stack, REVIEWER2)  # will not be refreshed by REVIEWER's click
        assert waiting_ids(other) == [request.request_id]

        seen = publishes(stack, REVIEWER)
        await click_home(stack, REVIEWER, request, blocks.APPROVE)
        decided = await stack.decided(request.request_id)
        assert decided.status == "approved" and decided.decided_by == REVIEWER
        after = await home_after(stack, REVIEWER, seen)
        assert waiting_ids(after) == []
        assert request.request_id in recent_text(after) and "approved" in recent_text(after)
        # The same decision the message buttons make: the message is updated, the run goes on.
        await stack.decided_message(CHANNEL, request.message_ts)
        await stack.run_status(run, "succeeded")
        assert stack.effects.count("refund") == 1

        # A click on a tab left open from before changes nothing and says why, in the tab.
        seen = publishes(stack, REVIEWER2)
        await click_home(stack, REVIEWER2, request, blocks.APPROVE)
        stale = await home_after(stack, REVIEWER2, seen)
        assert f"already *approved* by <@{REVIEWER}>" in all_text(stale)
        assert waiting_ids(stale) == []
        assert stack.effects.count("refund") == 1
        assert (await stack.decided(request.request_id)).decided_by == REVIEWER


async def test_deciding_on_the_message_or_in_a_form_refreshes_the_tab(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        paths = "/tmp/a.txt /tmp/b.txt"
        run = await stack.start_run("cleanup-agent", f"delete {paths}")
        first, second = await stack.pending_requests(run, 2)
        view = await open_home(stack, REVIEWER)
        assert sorted(waiting_ids(view)) == sorted([first.request_id, second.request_id])

        seen = publishes(stack, REVIEWER)
        await stack.click(REVIEWER, first, blocks.APPROVE)  # on the channel's message
        after = await home_after(stack, REVIEWER, seen)
        assert waiting_ids(after) == [second.request_id]
        assert first.request_id in recent_text(after)

        seen = publishes(stack, REVIEWER)
        await stack.click(REVIEWER, second, blocks.REJECT)  # the reject form
        form = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "keep b"}}
        assert (await stack.standin.submit_view(REVIEWER, form["id"], reason)).status == 200
        last = await home_after(stack, REVIEWER, seen)
        assert waiting_ids(last) == []
        recent = recent_text(last)
        assert second.request_id in recent and "rejected" in recent
        assert recent.index(second.request_id) < recent.index(first.request_id)  # newest first


async def test_only_a_tab_opened_lately_is_published_again_after_a_decision(
    redis_url: str, tmp_path: Path
) -> None:
    """Publishing a tab nobody opened is work no one sees (it is built fresh when they open
    it), so a decision refreshes only the tabs of deciders who opened theirs lately."""
    async with running_stack(redis_url, tmp_path) as stack:
        run = await stack.start_run("cleanup-agent", "delete /tmp/a.txt /tmp/b.txt")
        first, second = await stack.pending_requests(run, 2)

        await stack.click(REVIEWER, first, blocks.APPROVE)  # never opened the tab
        await stack.decided_message(CHANNEL, first.message_ts)
        log = ReviewerLog(stack.host.redis)

        async def noted() -> bool:  # the decision was delivered to the tab's side
            return first.request_id in await log.recent(REVIEWER, 10)

        await eventually(noted)
        await asyncio.sleep(0.5)  # what a refresh would have sent by now
        assert publishes(stack, REVIEWER) == 0

        view = await open_home(stack, REVIEWER)  # now they look: it is built fresh
        assert waiting_ids(view) == [second.request_id]
        assert first.request_id in recent_text(view)
        seen = publishes(stack, REVIEWER)
        await stack.click(REVIEWER, second, blocks.APPROVE)
        after = await home_after(stack, REVIEWER, seen)  # and kept fresh from then on
        assert waiting_ids(after) == []
        assert second.request_id in recent_text(after)
