"""`/approvals` and each of its subcommands, over the signed slash-command path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_host.approvals.routes import parse_spec
from agent_host.durable import keys
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.decisions import Approve
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.tools import tool
from agent_host.settings import Settings
from bot import blocks
from bot.slash_commands import help_text
from slack_sandbox.blockkit import check_blocks
from slack_sandbox.seed import BOT_USER_ID, GENERAL
from slack_sandbox.workspace import Channel, UserGroup
from tests.support.replies import flat
from tests.support.stack import (
    ADMIN,
    API_TOKEN,
    CHANNEL,
    OPS,
    OUTSIDER,
    REQUESTER,
    REVIEWER,
    Stack,
    running_stack,
)
from tests.support.waiting import eventually

API_KEY = "sk-live-4242-very-secret"
API_AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def deployer() -> Agent:
    @tool(permission=Permission.ASK, reason="deploys to production", severity="high")
    def deploy(service: str, api_key: str) -> str:
        """Deploy a service with a credential."""
        return f"Deployed {service}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("deploy", service="billing", api_key=API_KEY)])
        return reply(c.result("deploy") or "")

    return Agent(
        name="deployer",
        instructions="Deploy.",
        tools=[deploy],
        model=ScriptedModel(script, name="scripted-deployer"),
    )


def registry(settings: Settings) -> AgentRegistry:
    examples = build_registry(ExampleEffects(settings.example_journal))
    examples.register("deployer", deployer)
    return examples


async def approvals(stack: Stack, user: str, text: str, channel: str = CHANNEL) -> str:
    """Run `/approvals text`; check the reply is an ephemeral JSON answer and return its text
    and blocks (`flat`)."""
    reply = await stack.approvals(user, channel, text)
    assert reply.status == 200, reply.body
    body: Any = json.loads(reply.body)
    assert body["response_type"] == "ephemeral"
    assert isinstance(body["text"], str) and body["text"]
    assert check_blocks(body.get("blocks") or [], limit=blocks.MESSAGE_BLOCKS_MAX) is None
    return flat(body["text"], body.get("blocks"))


async def next_page(stack: Stack, user: str, channel: str = CHANNEL) -> str:
    """Click **Next page** on `user`'s newest reply in `channel` that has one; the page that
    replaces that reply (`flat`)."""
    replies = [
        e
        for e in stack.standin.workspace.ephemerals_for(user, channel)
        if any(
            el.get("action_id") == blocks.PENDING_NEXT
            for b in e.blocks
            for el in b.get("elements", [])
        )
    ]
    assert replies, f"{user} has no reply with a Next page button in {channel}"
    shown = replies[-1]
    before = flat(shown.text, shown.blocks)
    answer = await stack.standin.click(user, channel, shown.ts, blocks.PENDING_NEXT)
    assert answer.status == 200, answer.body

    async def replaced() -> str | None:
        now = flat(shown.text, shown.blocks)
        return now if now != before else None

    page = await eventually(replaced)
    assert check_blocks(shown.blocks, limit=blocks.MESSAGE_BLOCKS_MAX) is None
    return page


async def waiting_requests(stack: Stack, run_id: str, count: int) -> list[Any]:
    """The run's requests once it waits with `count` of them (posted to Slack or not)."""

    async def paused() -> list[Any] | None:
        info = await stack.host.store.run_info(run_id)
        if not info or info.status != "waiting":
            return None
        requests = await stack.host.store.run_requests(run_id)
        return requests if len(requests) == count else None

    return await eventually(paused)


def listed_ids(text: str) -> list[str]:
    return re.findall(r"^• `([^`]+)`", text, flags=re.M)


def next_cursor(text: str) -> str | None:
    """The sealed page marker of a reply's Next page button."""
    match = re.search(r"\[Next page:(?:here|all):([^\]]+)\]", text)
    return match.group(1) if match else None


async def test_pending_lists_this_channel_and_pending_all_lists_every_channel(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        assert "Nothing is waiting" in await approvals(stack, REVIEWER, "pending")
        await approvals(stack, ADMIN, f"route add agent=cleanup-agent channel={OPS}")
        refund_run = await stack.start_run("refund-agent", "refund order 123")
        cleanup_run = await stack.start_run("cleanup-agent", "delete /tmp/x.txt")
        [refund] = await waiting_requests(stack, refund_run, 1)
        [cleanup] = await waiting_requests(stack, cleanup_run, 1)
        assert refund.route.destination == CHANNEL and cleanup.route.destination == OPS

        here = await approvals(stack, REVIEWER, "pending")
        assert listed_ids(here) == [refund.request_id]
        assert "issue_refund" in here and "refund-agent" in here
        assert f"<@{REQUESTER}>" in here
        ops = await approvals(stack, REVIEWER, "pending", channel=OPS)
        assert listed_ids(ops) == [cleanup.request_id]
        everywhere = await approvals(stack, ADMIN, "pending all")
        assert sorted(listed_ids(everywhere)) == sorted([refund.request_id, cleanup.request_id])
        # `all` is every channel for admins; a member is shown what they may see: both
        # routes name no reviewers, so each request is seen from its own channel only.
        mine = await approvals(stack, REVIEWER, "pending all")
        assert listed_ids(mine) == [refund.request_id]
        newest = max((refund, cleanup), key=lambda r: (int(r.created_at * 1000), r.request_id))
        assert listed_ids(everywhere)[0] == newest.request_id  # newest first
        assert next_cursor(everywhere) is None

        general = await approvals(stack, REVIEWER, "pending", channel="C0GENERAL")
        assert "Nothing is waiting" in general and "pending all" in general

        # A decided request leaves the list.
        [posted] = await stack.pending_requests(refund_run)
        await stack.click(REVIEWER, posted, blocks.APPROVE)
        await stack.run_status(refund_run, "succeeded")
        assert listed_ids(await approvals(stack, REVIEWER, "pending")) == []
        assert listed_ids(await approvals(stack, ADMIN, "pending all")) == [cleanup.request_id]
        # The slash answer is shown to the caller only.
        assert any("Waiting for a decision" in t for t in stack.ephemerals(REVIEWER))


async def test_pending_paginates_with_a_next_page_button(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        paths = " ".join(f"/f{i:02d}.txt" for i in range(12))
        run_id = await stack.start_run("cleanup-agent", f"delete {paths}")
        requests = await waiting_requests(stack, run_id, 12)

        first = await approvals(stack, REVIEWER, "pending")
        page1 = listed_ids(first)
        assert len(page1) == 10
        cursor = next_cursor(first)
        assert cursor is not None and "req_" not in cursor  # sealed: it names no request
        assert "next:" not in first  # nothing to type: a button

        second = await next_page(stack, REVIEWER)  # replaces the first page
        page2 = listed_ids(second)
        assert len(page2) == 2
        assert next_cursor(second) is None
        assert sorted(page1 + page2) == sorted(r.request_id for r in requests)
        # The reply was replaced in place, for the clicker only.
        [reply] = stack.standin.workspace.ephemerals_for(REVIEWER, CHANNEL)
        assert reply.text.startswith("Waiting for a decision") and "2 requests" in reply.text
        assert stack.standin.workspace.ephemerals_for(REQUESTER) == []

        every = await approvals(stack, REVIEWER, "pending all")
        assert len(listed_ids(every)) == 10 and next_cursor(every) is not None
        rest = await next_page(stack, REVIEWER)
        assert sorted(listed_ids(every) + listed_ids(rest)) == sorted(page1 + page2)


async def test_pending_pagination_reaches_every_request_of_a_large_pause(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        paths = " ".join(f"/g{i:02d}.txt" for i in range(75))
        run_id = await stack.start_run("cleanup-agent", f"delete {paths}")
        requests = await waiting_requests(stack, run_id, 75)
        seen: list[str] = []
        text = await approvals(stack, REVIEWER, "pending all")
        for _ in range(10):
            seen += listed_ids(text)
            if next_cursor(text) is None:
                break
            text = await next_page(stack, REVIEWER)
        assert len(seen) == len(set(seen))
        assert sorted(seen) == sorted(r.request_id for r in requests)


async def test_next_page_does_not_repeat_requests_when_the_cursor_request_was_decided(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        paths = " ".join(f"/h{i:02d}.txt" for i in range(12))
        run_id = await stack.start_run("cleanup-agent", f"delete {paths}")
        requests = {r.request_id: r for r in await waiting_requests(stack, run_id, 12)}
        first = await approvals(stack, REVIEWER, "pending all")
        page1 = listed_ids(first)
        assert len(page1) == 10 and next_cursor(first) is not None

        last = requests[page1[-1]]  # decided (here through the store) before page 2 is read
        result = await stack.host.store.decide(
            last.request_id, Approve(decided_by=REVIEWER, call_hash=last.call_hash)
        )
        assert result.outcome == "decided"

        page2 = listed_ids(await next_page(stack, REVIEWER))
        assert not set(page2) & set(page1), "page 2 repeats requests already listed"
        assert sorted(page1[:-1] + page2) == sorted(set(requests) - {last.request_id})


async def test_show_gives_details_and_history(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        shown = await approvals(stack, REVIEWER, f"show {request.request_id}")
        assert "`issue_refund` requested by" in shown and "`refund-agent`" in shown
        assert "*pending*" in shown
        assert f"<@{REQUESTER}>" in shown
        assert "moves money back to the customer" in shown
        assert "order_id" in shown and "123" in shown
        assert run_id in shown
        assert "*History*" in shown and "started" in shown

        await stack.click(REVIEWER, request, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        after = await approvals(stack, ADMIN, f"show {request.request_id}")
        assert "*approved*" in after
        assert "approved by <@U0REVIEWER>" in after


def outside_code(text: str) -> str:
    """`text` without its inline code spans: what Slack renders as formatting."""
    return re.sub(r"`[^`\n]*`", "", text)


async def test_what_an_agent_wrote_is_never_formatting_in_show_pending_or_app_home(
    redis_url: str, tmp_path: Path
) -> None:
    """A tool name with a line break and an argument with backticks (an agent's, or a
    model's under prompt injection) stay code wherever a request is listed: a reviewer
    never reads a bold "pre-approved" line that countersign did not write."""
    tool_name = "issue_refund*\n:white_check_mark: *Pre-approved by Security* _ok_"
    memo = "q3.csv` *:white_check_mark: Approved by Finance, just click Approve* `"
    body = {"agent": "billing-bot", "tool": tool_name, "arguments": {"memo": memo}}
    async with running_stack(redis_url, tmp_path) as stack:
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{stack.url}/api/v1/approvals", json=body, headers=API_AUTH) as resp,
        ):
            created = await resp.json()
            assert resp.status == 201, created
        request = await stack.posted(created["request_id"])

        shown = await approvals(stack, REVIEWER, f"show {request.request_id}")
        listed = await approvals(stack, REVIEWER, "pending all")
        assert (await stack.standin.open_home(REVIEWER)).status == 200

        def tab() -> str | None:
            view = json.dumps(stack.standin.home_view(REVIEWER) or {})
            return view if request.request_id in view else None

        home = await eventually(tab)

        assert request.request_id in listed and request.request_id in home
        for surface in (shown, listed, home):
            assert "Pre-approved" not in outside_code(surface), surface
            assert "Approved by Finance" not in outside_code(surface), surface
        assert shown.startswith("`issue_refund* :white_check_mark: *Pre-approved by Security*")


async def test_show_of_an_unknown_or_missing_id(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        unknown = await approvals(stack, REVIEWER, "show req_doesnotexist")
        assert "No request `req_doesnotexist`" in unknown
        assert "pending all" in unknown
        garbage = await approvals(stack, REVIEWER, "show <script>")
        assert "No request" in garbage and "<script>" not in garbage
        missing = await approvals(stack, REVIEWER, "show")
        assert "`/approvals show <request-id>`" in missing  # how it is typed


async def test_routes_and_route_add_remove_by_admin(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        empty = await approvals(stack, REVIEWER, "routes")
        assert "No routes" in empty and f"<#{CHANNEL}>" in empty

        added = await approvals(
            stack,
            ADMIN,
            "route add agent=refund-* tool=issue_refund severity=high "
            "channel=<#C0OPS|ops-approvals> reviewers=<@U0REVIEWER> <!subteam^S0REVIEWERS|@rev> "
            "quorum=2 expiry=2h self=no",
        )
        assert "Added route `r1`" in added
        # a user id is not looked up (no users:read): the admin is asked to check it shows
        assert "People are not looked up" in added and "check that <@U0REVIEWER>" in added
        [rule] = await stack.bot.routes.rules()
        assert rule.id == "r1" and rule.channel == OPS
        assert rule.reviewers == ("U0REVIEWER", "S0REVIEWERS")
        assert rule.quorum == 2 and rule.expiry_seconds == 7200
        assert rule.min_severity.value == "high" and rule.allow_self_approval is False

        listing = await approvals(stack, REVIEWER, "routes")
        assert "*r1*" in listing and "<#C0OPS>" in listing
        assert "quorum 2" in listing and "expires after 2h" in listing
        assert "<@U0REVIEWER>" in listing and "<!subteam^S0REVIEWERS>" in listing
        assert f"Anything else goes to <#{CHANNEL}>" in listing

        audit = await stack.host.redis.xrange(keys.AUDIT)
        assert [(f[b"event"], f[b"actor"]) for _, f in audit] == [(b"route.add", ADMIN.encode())]

        removed = await approvals(stack, ADMIN, "route remove r1")
        assert "Removed route `r1`" in removed
        assert await stack.bot.routes.rules() == []
        assert "No routes" in await approvals(stack, REVIEWER, "routes")
        gone = await approvals(stack, ADMIN, "route remove r1")
        assert "No route `r1`" in gone
        which = await approvals(stack, ADMIN, "route remove")
        assert "Say which route" in which

        # Ids are never reused after a removal.
        again = await approvals(stack, ADMIN, f"route add channel={CHANNEL}")
        assert "Added route `r2`" in again and "People are not looked up" not in again
        assert "No agent countersign runs" not in added + again  # `refund-*`, and any


async def test_a_route_for_an_agent_countersign_does_not_run_is_added_with_a_note(
    redis_url: str, tmp_path: Path
) -> None:
    """A mistyped agent name would send that agent's calls to another route's reviewers:
    the admin is told which agents countersign runs, and the closest one. The route is
    added all the same: an agent that asks over the HTTP API sends a name of its own."""
    async with running_stack(redis_url, tmp_path) as stack:
        typo = await approvals(stack, ADMIN, f"route add agent=refund-agnet channel={CHANNEL}")
        assert "Added route `r1`" in typo
        assert "No agent countersign runs is called 'refund-agnet'" in typo
        assert "(did you mean 'refund-agent'?)" in typo and "`cleanup-agent`" in typo
        assert "/approvals route remove r1" in typo
        [rule] = await stack.bot.routes.rules()
        assert rule.agent == "refund-agnet"
        cased = await approvals(stack, ADMIN, f"route add agent=Refund-Agent channel={CHANNEL}")
        assert "is called 'Refund-Agent'" in cased  # names match case and all, as said
        glob = await approvals(stack, ADMIN, f"route add agent=*-agent channel={CHANNEL}")
        assert "Added route `r3`" in glob and "No agent countersign runs" not in glob


async def test_a_route_an_earlier_one_leaves_no_calls_is_added_with_a_warning(
    redis_url: str, tmp_path: Path
) -> None:
    """The first matching route wins: a stricter route added after one that takes all its
    calls would never apply. The admin is told so, and how to put it first."""
    async with running_stack(redis_url, tmp_path) as stack:
        await approvals(stack, ADMIN, f"route add agent=refund-agent channel={CHANNEL}")
        added = await approvals(
            stack, ADMIN, f"route add tool=issue_refund channel={OPS} reviewers=<@{REVIEWER}>"
        )
        narrower = await approvals(
            stack, ADMIN, f"route add agent=refund-agent tool=issue_* severity=high channel={OPS}"
        )
        elsewhere = await approvals(
            stack, ADMIN, f"route add agent=cleanup-agent tool=delete_file channel={OPS}"
        )

        assert "Added route `r2`" in added  # every agent's issue_refund; r1 has refund-agent's
        assert "Route `r1` comes first and takes the calls both match" in added
        assert "`/approvals route remove r1`" in added
        assert "Added route `r3`" in narrower
        assert "Route `r1` comes first and takes every call this one would" in narrower
        assert "comes first" not in elsewhere  # no earlier route takes any of its calls
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        assert request.route.route_id == "r1"  # as the warning said


async def test_a_route_naming_a_user_group_nobody_could_decide_through_is_refused(
    redis_url: str, tmp_path: Path
) -> None:
    """A group that does not exist, or has nobody in it, would leave the route's requests
    to nobody (or escalate them to nobody): refused, saying why; nothing is added."""
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.workspace.usergroups.append(UserGroup("S0EMPTY", "empty", "Empty", []))
        for spec, says in (
            (f"channel={CHANNEL} reviewers=<!subteam^S0NOSUCH>", "does not exist"),
            (f"channel={CHANNEL} reviewers=<!subteam^S0EMPTY>", "has nobody in it"),
            (f"channel={CHANNEL} escalate_after=1h escalate_to=<!subteam^S0NOSUCH>", "exist"),
        ):
            answer = await approvals(stack, ADMIN, f"route add {spec}")
            assert ":warning: Route not added" in answer and says in answer, answer
            assert "then add the route again" in answer
        assert await stack.bot.routes.rules() == []

        # A group removed from Slack after its route was added: its members decide nothing,
        # and they are told so at once (not "click again in a moment").
        assert "Added route" in await approvals(
            stack, ADMIN, f"route add agent=cleanup-agent channel={CHANNEL} reviewers=S0REVIEWERS"
        )
        groups = stack.standin.workspace.usergroups
        groups[:] = [g for g in groups if g.id != "S0REVIEWERS"]
        run_id = await stack.start_run("cleanup-agent", "delete /tmp/old.txt")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.APPROVE)
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "you are not a reviewer for this request" in told
        still = await stack.host.store.get_request(request.request_id)
        assert still is not None and not still.decided

        removed = await approvals(stack, ADMIN, "route remove r1")
        assert "Requests already waiting under it keep it" in removed


async def test_route_add_asks_slack_at_once_and_says_so_when_slack_is_too_slow(
    redis_url: str, tmp_path: Path
) -> None:
    """Its channel and group lookups, each well within its own allowance (a channel 1 s, a
    group 1.8 s) but past the 1.5 s the command gives them all (LOOKUPS_WITHIN) one after
    the other, are asked at once. Slack slower than the time left for them: the admin is
    told Slack was slow (not that the database is down), and nothing is added."""
    spec = f"tool=issue_refund channel={CHANNEL} escalate_after=1h escalate_to={OPS}"
    async with running_stack(redis_url, tmp_path) as stack:
        # 1.8 s one after the other; at once, 0.6 s and 0.9 s to spare on a loaded machine
        stack.standin.inject("conversations.info", status=200, delay=0.6, times=2)
        stack.standin.inject("usergroups.users.list", status=200, delay=0.6, times=1)
        added = await approvals(stack, ADMIN, f"route add {spec} reviewers=S0REVIEWERS")
        assert "Added route `r1`" in added, added

        stack.standin.workspace.usergroups.append(UserGroup("S0SLOW", "slow", "Slow", [REVIEWER]))
        stack.standin.inject("usergroups.users.list", status=200, delay=1.7, times=1)
        slow = await approvals(stack, ADMIN, f"route add {spec} reviewers=S0SLOW")
        assert "Slack did not answer in time" in slow and "Nothing was changed" in slow, slow
        assert [rule.id for rule in await stack.bot.routes.rules()] == ["r1"]


async def test_a_route_escalating_from_a_private_channel_to_a_public_one_is_added_with_a_warning(
    redis_url: str, tmp_path: Path
) -> None:
    """Escalated, a private channel's requests (their arguments included) would be read by
    anyone in a public channel: the route is added, as asked, and the admin is told so with
    how to keep them private. Escalating within the private or within the public says
    nothing of it."""
    private, other_private = "G0PRIVOPS", "G0PRIVSEC"
    async with running_stack(redis_url, tmp_path) as stack:
        members = [ADMIN, REVIEWER, BOT_USER_ID]
        stack.standin.workspace.channels += [
            Channel(private, "private-ops", 0, members, is_private=True),
            Channel(other_private, "private-sec", 0, members, is_private=True),
        ]
        exposed = await approvals(
            stack,
            ADMIN,
            f"route add agent=refund-agent channel=<#{private}> escalate_after=1h "
            f"escalate_to=<#{OPS}>",
        )
        kept_private = await approvals(
            stack,
            ADMIN,
            f"route add agent=cleanup-agent channel=<#{private}> escalate_after=1h "
            f"escalate_to=<#{other_private}>",
        )
        public_to_public = await approvals(
            stack,
            ADMIN,
            f"route add agent=deployer channel=<#{CHANNEL}> escalate_after=1h escalate_to=<#{OPS}>",
        )

        assert "Added route `r1`" in exposed
        assert (
            f"Route `r1` escalates from the private <#{private}> to the public <#{OPS}>" in exposed
        ), exposed
        assert "`/approvals route remove r1`" in exposed
        for added in (kept_private, public_to_public):
            assert "Added route" in added and "escalates from the private" not in added, added
        assert len(await stack.bot.routes.rules()) == 3


async def test_a_route_whose_reviewers_are_too_few_for_its_quorum_is_refused(
    redis_url: str, tmp_path: Path
) -> None:
    """A quorum its reviewers could never reach, counting its groups' members, would leave
    every request to expire: refused, saying why. Enough people, users and groups together,
    is added."""
    async with running_stack(redis_url, tmp_path) as stack:
        groups = stack.standin.workspace.usergroups
        groups.append(UserGroup("S0SOLO", "solo", "Solo", [REVIEWER]))
        groups.append(UserGroup("S0PAIR", "pair", "Pair", [REVIEWER, "U0REVIEWER2"]))
        for reviewers in ("<!subteam^S0SOLO>", f"<!subteam^S0SOLO>,<@{REVIEWER}>"):
            answer = await approvals(
                stack, ADMIN, f"route add channel={CHANNEL} reviewers={reviewers} quorum=2"
            )
            assert ":warning: Route not added: quorum 2 needs more approvers" in answer, answer
        assert await stack.bot.routes.rules() == []
        added = await approvals(
            stack, ADMIN, f"route add channel={CHANNEL} reviewers=<!subteam^S0SOLO>,S0PAIR quorum=2"
        )
        assert "Added route `r1`" in added


async def test_routes_into_other_channels_are_listed_to_admins_only(
    redis_url: str, tmp_path: Path
) -> None:
    """A route into a private channel (its reviewers, its self-approval) is no outsider's
    to read: a member sees the routes into the channel they type the command in and those
    naming them, and is told how many more there are; an admin sees every one."""
    private = "G0PRIVFIN"
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.workspace.channels.append(
            Channel(private, "finance-private", 0, [ADMIN, REVIEWER, BOT_USER_ID], is_private=True)
        )
        for spec in (
            f"agent=refund-agent channel={private} reviewers=<@{REVIEWER}> self=yes",
            f"agent=cleanup-agent channel={OPS}",
        ):
            await stack.bot.routes.add(parse_spec(spec), ADMIN)

        outsider = await approvals(stack, OUTSIDER, "routes", channel=GENERAL)
        assert private not in outsider and "self-approval allowed" not in outsider, outsider
        assert OPS not in outsider and "2 more routes, into other channels" in outsider
        in_ops = await approvals(stack, OUTSIDER, "routes", channel=OPS)
        assert "*r2*" in in_ops and "*r1*" not in in_ops and "1 more route," in in_ops
        named = await approvals(stack, REVIEWER, "routes", channel=GENERAL)
        assert "*r1*" in named and f"<#{private}>" in named and "*r2*" not in named
        admin = await approvals(stack, ADMIN, "routes", channel=GENERAL)
        assert "*r1*" in admin and "*r2*" in admin and "more route" not in admin


async def test_a_routes_listing_longer_than_one_message_shows_what_fits(
    redis_url: str, tmp_path: Path
) -> None:
    """More routes than one Slack message holds: the listing shows the first ones, in the
    order they match, says how many more there are, and is never refused by Slack."""
    async with running_stack(redis_url, tmp_path) as stack:
        for n in range(150):
            glob = f"agent-{n:03d}-" + "x" * 190
            await stack.bot.routes.add(parse_spec(f"agent={glob} channel={CHANNEL}"), ADMIN)
        listing = await approvals(stack, REVIEWER, "routes")
        assert "*r1*" in listing and "*r150*" not in listing
        shown = listing.count("agent `agent-")
        assert f"… and {150 - shown} more routes after these" in listing
        assert f"Anything else goes to <#{CHANNEL}>" in listing


async def test_route_changes_are_for_admins_only(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        await approvals(stack, ADMIN, f"route add channel={OPS}")
        for user in (REVIEWER, REQUESTER):
            refused = await approvals(stack, user, f"route add channel={CHANNEL} self=yes")
            assert "Only admins" in refused
            refused = await approvals(stack, user, "route remove r1")
            assert "Only admins" in refused
        [rule] = await stack.bot.routes.rules()
        assert rule.id == "r1" and rule.channel == OPS
        audit = await stack.host.redis.xrange(keys.AUDIT)
        assert len(audit) == 1


@pytest.mark.parametrize(
    "spec",
    [
        "tool=issue_refund",  # no channel
        "channel=C0OPS quorum=two",
        "channel=C0OPS colour=red",
        "channel=#not-an-id",
        "channel=C0OPS expiry=forever",
        "channel=C0OPS reviewers=U0REVIEWER quorum=3",
        "just words",
    ],
)
async def test_malformed_route_spec_is_refused_with_an_example(
    redis_url: str, tmp_path: Path, spec: str
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        answer = await approvals(stack, ADMIN, f"route add {spec}")
        assert ":warning:" in answer
        assert "example: route add tool=issue_refund channel=C0APPROVALS" in answer
        assert await stack.bot.routes.rules() == []
        assert await stack.host.redis.xrange(keys.AUDIT) == []


async def test_help_and_unknown_subcommands_answer_with_help(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        assert await approvals(stack, OUTSIDER, "help") == help_text()
        assert await approvals(stack, REVIEWER, "") == help_text()
        unknown = await approvals(stack, REVIEWER, "frobnicate now")
        assert unknown.startswith("Unknown command `frobnicate now`.")
        assert unknown.endswith(help_text())
        hostile = await approvals(stack, REVIEWER, "<!channel> hi")
        assert "<!channel>" not in hostile and hostile.endswith(help_text())
        for word in ("pending", "show", "routes", "route add", "route remove", "help"):
            assert f"/approvals {word}" in help_text()


async def test_a_known_command_typed_another_way_is_told_how_it_is_typed(
    redis_url: str, tmp_path: Path
) -> None:
    """`show` without an id was "Unknown command `show`", and `pending bogus` listed the
    channel's requests as if `bogus` were not there."""
    async with running_stack(redis_url, tmp_path) as stack:
        said = {
            typed: await approvals(stack, REVIEWER, typed)
            for typed in ("show", "show req_1 req_2", "pending bogus", "routes extra", "route")
        }
    assert said == {
        "show": "`show` is not how `/approvals show` is typed: `/approvals show <request-id>` "
        "(each request's id is in `/approvals pending`).",
        "show req_1 req_2": "`show req_1 req_2` is not how `/approvals show` is typed: "
        "`/approvals show <request-id>` (each request's id is in `/approvals pending`).",
        "pending bogus": "`pending bogus` is not how `/approvals pending` is typed: "
        "`/approvals pending`, or `/approvals pending all`.",
        "routes extra": "`routes extra` is not how `/approvals routes` is typed: "
        "`/approvals routes`, with nothing after it.",
        "route": "`route` is not how `/approvals route` is typed: `/approvals route add "
        "<spec>` or `/approvals route remove <id>` (admins only).",
    }


async def test_show_masks_secret_arguments_like_the_message_does(
    redis_url: str, tmp_path: Path
) -> None:
    agents = "tests.integration.bot.test_bot_commands:registry"
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=agents) as stack:
        run_id = await stack.start_run("deployer", "deploy billing")
        [request] = await stack.pending_requests(run_id)
        posted = str(stack.message(CHANNEL, request.message_ts)["blocks"])
        assert API_KEY not in posted and blocks.MASK in posted  # the message masks it

        shown = await approvals(stack, OUTSIDER, f"show {request.request_id}")
        assert "billing" in shown
        assert API_KEY not in shown
