"""The local Slack stand-in (slack_sandbox), exercised over real loopback HTTP with slack_sdk."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from slack_sandbox import SlackStandIn, open_workspace, seed_workspace, sign_request
from slack_sandbox.persistence import STATE_FILE

TOKEN = "xoxb-sandbox-test-token"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TS_PATTERN = re.compile(r"^\d{10}\.\d{6}$")
APPROVE_BLOCKS: list[dict[str, Any]] = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "*deploy* wants approval"}},
    {
        "type": "actions",
        "block_id": "decide",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "run-42",
                "style": "primary",
            },
            {
                "type": "button",
                "action_id": "deny",
                "text": {"type": "plain_text", "text": "Deny"},
                "value": "run-42",
                "style": "danger",
            },
        ],
    },
]
MODAL: dict[str, Any] = {
    "type": "modal",
    "callback_id": "deny_reason",
    "private_metadata": "run-42",
    "title": {"type": "plain_text", "text": "Deny"},
    "submit": {"type": "plain_text", "text": "Send"},
    "blocks": [
        {
            "type": "input",
            "block_id": "reason",
            "label": {"type": "plain_text", "text": "Why?"},
            "element": {"type": "plain_text_input", "action_id": "text"},
        }
    ],
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def standin(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SlackStandIn]:
    stand_in = SlackStandIn(
        open_workspace(tmp_path), token=TOKEN, signing_secret=SECRET, clock=clock
    )
    await stand_in.start()
    yield stand_in
    await stand_in.stop()


@pytest.fixture
def client(standin: SlackStandIn) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=standin.url)


# --------------------------------------------------------------------------- a tiny app


@dataclass
class Received:
    headers: dict[str, str]
    raw: bytes
    form: dict[str, str]

    def payload(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.form["payload"])
        return parsed


@dataclass
class Receiver:
    """Checks requests exactly as Slack documents, then answers with scripted replies."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    replies: list[tuple[int, str, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 60 * 5:
            self.rejected.append("stale")
            return web.Response(status=401)
        base = b"v0:" + timestamp.encode() + b":" + raw
        expected = "v0=" + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            self.rejected.append("signature")
            return web.Response(status=401)
        # the verifier Bolt uses must agree
        assert SignatureVerifier(SECRET).is_valid(raw, timestamp, signature)
        assert request.content_type == "application/x-www-form-urlencoded"
        form = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
        self.received.append(Received(dict(request.headers), raw, form))
        if self.replies:
            status, body, content_type = self.replies.pop(0)
            return web.Response(status=status, text=body, content_type=content_type)
        return web.Response(status=200)


@pytest.fixture
async def receiver(standin: SlackStandIn) -> AsyncIterator[Receiver]:
    recv = Receiver()
    app = web.Application()
    app.router.add_post("/slack/events", recv.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    recv.url = f"http://{host}:{port}/slack/events"
    standin.events_url = recv.url
    yield recv
    await runner.cleanup()


# --------------------------------------------------------------------------- Web API methods


async def test_auth_test_names_the_bot(client: AsyncWebClient, standin: SlackStandIn) -> None:
    assert standin.url.endswith("/api/") and standin.url.startswith("http://127.0.0.1:")
    resp = await client.auth_test()
    assert resp["team_id"] == "T0SANDBOX"
    assert resp["team"] == "countersign sandbox"
    assert resp["user_id"] == "U0BOT"
    assert resp["bot_id"] == "B0BOT"
    assert standin.calls[-1] == ("auth.test", {})


async def test_wrong_or_missing_token(standin: SlackStandIn) -> None:
    with pytest.raises(SlackApiError) as wrong:
        await AsyncWebClient(token="xoxb-wrong", base_url=standin.url).auth_test()
    assert wrong.value.response.status_code == 200
    assert wrong.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as missing:
        await AsyncWebClient(base_url=standin.url).auth_test()
    assert missing.value.response["error"] == "not_authed"
    async with (
        aiohttp.ClientSession() as session,  # Slack also takes a form `token`
        session.post(standin.url + "auth.test", data={"token": TOKEN}) as resp,
    ):
        assert (await resp.json())["user_id"] == "U0BOT"


async def test_unknown_method(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as err:
        await client.api_call("chat.teleport")
    assert err.value.response["error"] == "unknown_method"


async def test_post_message_and_thread_reply(client: AsyncWebClient, standin: SlackStandIn) -> None:
    posted = await client.chat_postMessage(
        channel="C0APPROVALS", text="approval needed", blocks=APPROVE_BLOCKS
    )
    assert posted["channel"] == "C0APPROVALS"
    assert TS_PATTERN.match(posted["ts"])
    message = posted["message"]
    assert message["ts"] == posted["ts"]
    assert message["text"] == "approval needed"
    assert (message["user"], message["bot_id"], message["type"]) == ("U0BOT", "B0BOT", "message")
    assert message["blocks"][1]["elements"][0]["action_id"] == "approve"
    assert message["blocks"][0]["block_id"]  # generated, as Slack does

    reply = await client.chat_postMessage(
        channel="C0APPROVALS", text="decided", thread_ts=posted["ts"]
    )
    assert float(reply["ts"]) > float(posted["ts"])
    assert reply["message"]["thread_ts"] == posted["ts"]
    parent = standin.workspace.message("C0APPROVALS", posted["ts"])
    assert parent is not None
    assert (parent.reply_count, parent.latest_reply) == (1, reply["ts"])
    assert standin.calls_to("chat.postMessage")[1]["thread_ts"] == posted["ts"]

    for bad, error in ((dict(channel="C0NOPE", text="x"), "channel_not_found"),
                       (dict(channel="C0OPS"), "no_text")):  # fmt: skip
        with pytest.raises(SlackApiError) as err:
            await client.api_call("chat.postMessage", json=bad)
        assert err.value.response["error"] == error


async def test_form_encoded_blocks_are_json_strings(standin: SlackStandIn) -> None:
    form = {"channel": "C0OPS", "text": "form post", "blocks": json.dumps(APPROVE_BLOCKS)}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(standin.url + "chat.postMessage", data=form, headers=headers) as resp,
    ):
        body = await resp.json()
    assert body["ok"] is True
    stored = standin.workspace.message("C0OPS", body["ts"])
    assert stored is not None and stored.blocks[1]["block_id"] == "decide"


async def test_update_message(client: AsyncWebClient, standin: SlackStandIn) -> None:
    posted = await client.chat_postMessage(channel="C0OPS", text="pending", blocks=APPROVE_BLOCKS)
    updated = await client.chat_update(
        channel="C0OPS",
        ts=posted["ts"],
        text="approved by rev.one",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "approved"}}],
    )
    assert (updated["channel"], updated["ts"], updated["text"]) == (
        "C0OPS",
        posted["ts"],
        "approved by rev.one",
    )
    stored = standin.workspace.message("C0OPS", posted["ts"])
    assert stored is not None
    assert stored.text == "approved by rev.one"
    assert [b["type"] for b in stored.blocks] == ["section"]
    assert stored.edited is not None and stored.edited["user"] == "U0BOT"
    with pytest.raises(SlackApiError) as err:
        await client.chat_update(channel="C0OPS", ts="1700000000.000001", text="x")
    assert err.value.response["error"] == "message_not_found"


async def test_ephemeral_and_permalink(client: AsyncWebClient, standin: SlackStandIn) -> None:
    eph = await client.chat_postEphemeral(
        channel="C0APPROVALS", user="U0OUTSIDER", text="you may not approve this"
    )
    assert TS_PATTERN.match(eph["message_ts"])
    [stored] = standin.workspace.ephemerals_for("U0OUTSIDER")
    assert (stored.channel, stored.text, stored.ts) == (
        "C0APPROVALS",
        "you may not approve this",
        eph["message_ts"],
    )
    with pytest.raises(SlackApiError) as err:
        await client.chat_postEphemeral(channel="C0APPROVALS", user="U0NOBODY", text="x")
    assert err.value.response["error"] == "user_not_found"

    posted = await client.chat_postMessage(channel="C0GENERAL", text="hello")
    link = await client.chat_getPermalink(channel="C0GENERAL", message_ts=posted["ts"])
    digits = posted["ts"].replace(".", "")
    assert link["permalink"] == (
        f"https://countersign-sandbox.slack.com/archives/C0GENERAL/p{digits}"
    )
    with pytest.raises(SlackApiError) as err:
        await client.chat_getPermalink(channel="C0GENERAL", message_ts="1.000001")
    assert err.value.response["error"] == "message_not_found"


async def test_views_need_a_fresh_trigger(
    client: AsyncWebClient, standin: SlackStandIn, clock: FakeClock
) -> None:
    fresh = standin.issue_trigger("U0REVIEWER")
    opened = await client.views_open(trigger_id=fresh, view=MODAL)
    view = opened["view"]
    assert re.match(r"^V[A-Z0-9]{10}$", view["id"])
    assert view["callback_id"] == "deny_reason" and view["private_metadata"] == "run-42"
    assert view["root_view_id"] == view["id"] and view["state"] == {"values": {}}
    assert standin.workspace.view(view["id"]) is not None
    assert standin.workspace.view(view["id"]).user == "U0REVIEWER"  # type: ignore[union-attr]

    with pytest.raises(SlackApiError) as reused:
        await client.views_open(trigger_id=fresh, view=MODAL)
    assert reused.value.response["error"] == "exchanged_trigger_id"
    stale = standin.issue_trigger("U0REVIEWER")
    clock.now += 3.5
    with pytest.raises(SlackApiError) as expired:
        await client.views_open(trigger_id=stale, view=MODAL)
    assert expired.value.response["error"] == "expired_trigger_id"
    with pytest.raises(SlackApiError) as invented:
        await client.views_open(trigger_id="12345.98765.abcd2358fdea", view=MODAL)
    assert invented.value.response["error"] == "invalid_trigger_id"

    new_title = dict(MODAL, title={"type": "plain_text", "text": "Denied"})
    with pytest.raises(SlackApiError) as conflict:
        await client.views_update(view_id=view["id"], view=new_title, hash="1.stale")
    assert conflict.value.response["error"] == "hash_conflict"
    updated = await client.views_update(view_id=view["id"], view=new_title, hash=view["hash"])
    assert updated["view"]["id"] == view["id"]
    assert updated["view"]["title"]["text"] == "Denied"
    assert updated["view"]["hash"] != view["hash"]
    with pytest.raises(SlackApiError) as missing:
        await client.views_update(external_id="nope", view=new_title)
    assert missing.value.response["error"] == "not_found"


async def test_people_groups_and_channels(client: AsyncWebClient) -> None:
    user = (await client.users_info(user="U0REVIEWER2"))["user"]
    assert (user["id"], user["name"], user["team_id"]) == ("U0REVIEWER2", "rev.two", "T0SANDBOX")
    assert user["profile"]["display_name"] == "rev.two" and user["is_bot"] is False
    admin = (await client.users_info(user="U0ADMIN"))["user"]
    assert admin["is_admin"] is True and admin["name"] == "ada.admin"
    with pytest.raises(SlackApiError) as err:
        await client.users_info(user="U0GHOST")
    assert err.value.response["error"] == "user_not_found"

    group = await client.usergroups_users_list(usergroup="S0REVIEWERS")
    assert group["users"] == ["U0REVIEWER", "U0REVIEWER2"]
    with pytest.raises(SlackApiError) as err:
        await client.usergroups_users_list(usergroup="S0NOPE")
    assert err.value.response["error"] == "no_such_subteam"

    channel = (await client.conversations_info(channel="C0OPS"))["channel"]
    assert (channel["id"], channel["name"], channel["is_channel"]) == (
        "C0OPS",
        "ops-approvals",
        True,
    )
    with pytest.raises(SlackApiError) as err:
        await client.conversations_info(channel="C0NOPE")
    assert err.value.response["error"] == "channel_not_found"


# --------------------------------------------------------------------------- persistence


def _file_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_restart_keeps_messages_and_views(tmp_path: Path) -> None:
    first = SlackStandIn(open_workspace(tmp_path), token=TOKEN)
    await first.start()
    client = AsyncWebClient(token=TOKEN, base_url=first.url)
    posted = await client.chat_postMessage(channel="C0APPROVALS", text="survives restarts")
    view = (await client.views_open(trigger_id=first.issue_trigger("U0ADMIN"), view=MODAL))["view"]
    await first.stop()
    assert _file_names(tmp_path) == [STATE_FILE]  # saved, and no temp files left behind

    second = SlackStandIn(open_workspace(tmp_path), token=TOKEN)
    await second.start()
    try:
        stored = second.workspace.message("C0APPROVALS", posted["ts"])
        assert stored is not None and stored.text == "survives restarts"
        reopened = second.workspace.view(view["id"])
        assert reopened is not None and reopened.hash == view["hash"]
        client = AsyncWebClient(token=TOKEN, base_url=second.url)
        again = await client.chat_postMessage(channel="C0APPROVALS", text="later")
        assert float(again["ts"]) > float(posted["ts"])
        link = await client.chat_getPermalink(channel="C0APPROVALS", message_ts=posted["ts"])
        assert link["channel"] == "C0APPROVALS"
    finally:
        await second.stop()


# --------------------------------------------------------------------------- limits and faults


async def test_rate_limit_per_channel(tmp_path: Path) -> None:
    stand_in = SlackStandIn(seed_workspace(), token=TOKEN, rate_limit_per_channel=1.0)
    async with stand_in:
        client = AsyncWebClient(token=TOKEN, base_url=stand_in.url)
        await client.chat_postMessage(channel="C0APPROVALS", text="one")
        with pytest.raises(SlackApiError) as err:
            await client.chat_postMessage(channel="C0APPROVALS", text="two")
        assert err.value.response.status_code == 429
        assert err.value.response.headers["Retry-After"] == "1"
        assert err.value.response["error"] == "ratelimited"
        await client.chat_postMessage(channel="C0OPS", text="other channel is fine")
        texts = [m.text for m in stand_in.workspace.channel_messages("C0APPROVALS")]
        assert texts == ["one"]
        assert stand_in.max_posts_per_second("C0APPROVALS") == 1
        assert len(stand_in.post_times["C0APPROVALS"]) == 1


async def test_a_limited_method_is_refused_past_its_calls_a_minute(
    client: AsyncWebClient, standin: SlackStandIn, clock: FakeClock
) -> None:
    standin.limit("conversations.info", 3)
    for _ in range(3):
        await client.conversations_info(channel="C0OPS")
        clock.now += 10
    with pytest.raises(SlackApiError) as err:
        await client.conversations_info(channel="C0OPS")
    assert err.value.response.status_code == 429
    assert err.value.response["error"] == "ratelimited"
    assert err.value.response.headers["Retry-After"] == "30"  # the first call leaves at 60 s
    await client.users_info(user="U0ADMIN")  # other methods are not limited
    clock.now += 30
    await client.conversations_info(channel="C0OPS")  # a minute after the first: allowed


async def test_fault_queue(client: AsyncWebClient, standin: SlackStandIn) -> None:
    standin.inject("chat.postMessage", status=500, times=2)
    for _ in range(2):
        with pytest.raises(SlackApiError) as err:
            await client.chat_postMessage(channel="C0OPS", text="flaky")
        assert err.value.response.status_code == 500
    await client.chat_postMessage(channel="C0OPS", text="flaky")
    assert [m.text for m in standin.workspace.channel_messages("C0OPS")] == ["flaky"]

    standin.inject("users.info", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as limited:
        await client.users_info(user="U0ADMIN")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"

    standin.inject("auth.test", delay=0.6, status=503)
    slow_client = AsyncWebClient(token=TOKEN, base_url=standin.url, timeout=0.2)  # type: ignore[arg-type]
    with pytest.raises(asyncio.TimeoutError):
        await slow_client.auth_test()

    async with aiohttp.ClientSession() as session:  # out-of-process control
        spec = {"method": "conversations.info", "status": 503, "times": 1}
        async with session.post(standin.base_url + "/_sandbox/faults", json=spec) as resp:
            assert (await resp.json())["faults"][0]["method"] == "conversations.info"
    with pytest.raises(SlackApiError) as unavailable:
        await client.conversations_info(channel="C0OPS")
    assert unavailable.value.response.status_code == 503
    assert (await client.conversations_info(channel="C0OPS"))["channel"]["id"] == "C0OPS"


# --------------------------------------------------------------------------- interactions


async def test_click_sends_a_signed_block_actions_payload(
    client: AsyncWebClient, standin: SlackStandIn, receiver: Receiver
) -> None:
    events = standin.subscribe()
    posted = await client.chat_postMessage(
        channel="C0APPROVALS", text="approve?", blocks=APPROVE_BLOCKS
    )
    assert (await events.get()) == {
        "type": "message",
        "channel": "C0APPROVALS",
        "ts": posted["ts"],
        "thread_ts": None,
    }
    reply = await standin.click("U0REVIEWER", "C0APPROVALS", posted["ts"], "approve")
    assert reply.status == 200 and receiver.rejected == []
    [request] = receiver.received
    assert request.headers["User-Agent"].startswith("Slackbot 1.0")
    assert list(request.form) == ["payload"]
    payload = request.payload()
    assert payload["type"] == "block_actions"
    assert payload["user"] == {
        "id": "U0REVIEWER",
        "username": "rev.one",
        "name": "rev.one",
        "team_id": "T0SANDBOX",
    }
    assert payload["api_app_id"] == "A0SANDBOX" and payload["token"]
    assert payload["container"] == {
        "type": "message",
        "message_ts": posted["ts"],
        "channel_id": "C0APPROVALS",
        "is_ephemeral": False,
    }
    assert re.match(r"^\d+\.\d+\.[0-9a-f]+$", payload["trigger_id"])
    assert payload["team"] == {"id": "T0SANDBOX", "domain": "countersign-sandbox"}
    assert payload["channel"] == {"id": "C0APPROVALS", "name": "approvals"}
    assert payload["message"]["ts"] == posted["ts"]
    assert payload["message"]["blocks"] == posted["message"]["blocks"]
    assert payload["state"] == {"values": {}}
    assert payload["response_url"].startswith(standin.base_url + "/_sandbox/response/")
    [action] = payload["actions"]
    assert {k: action[k] for k in ("action_id", "block_id", "value", "type", "style")} == {
        "action_id": "approve",
        "block_id": "decide",
        "value": "run-42",
        "type": "button",
        "style": "primary",
    }
    assert action["text"] == {"type": "plain_text", "text": "Approve"}
    assert TS_PATTERN.match(action["action_ts"])

    # the trigger is fresh: the app can open a modal with it
    opened = await client.views_open(trigger_id=payload["trigger_id"], view=MODAL)
    assert standin.workspace.view(opened["view"]["id"]).user == "U0REVIEWER"  # type: ignore[union-attr]

    # the response_url replaces the original, or talks ephemerally to the clicker
    async with aiohttp.ClientSession() as session:
        done = {"replace_original": True, "text": "approved by <@U0REVIEWER>"}
        async with session.post(payload["response_url"], json=done) as resp:
            assert resp.status == 200
        note = {"response_type": "ephemeral", "text": "thanks"}
        async with session.post(payload["response_url"], json=note) as resp:
            assert resp.status == 200
    original = standin.workspace.message("C0APPROVALS", posted["ts"])
    assert original is not None and original.text == "approved by <@U0REVIEWER>"
    assert original.blocks == []
    assert [e.text for e in standin.workspace.ephemerals_for("U0REVIEWER")] == ["thanks"]

    with pytest.raises(LookupError):
        await standin.click("U0REVIEWER", "C0APPROVALS", posted["ts"], "approve")  # now gone


async def test_forged_requests_are_refused_by_a_verifying_app(
    standin: SlackStandIn, receiver: Receiver
) -> None:
    body = b"payload=%7B%7D"
    stale = sign_request(SECRET, int(time.time()) - 600, body)
    wrong = sign_request("not-the-secret", int(time.time()), body)
    async with aiohttp.ClientSession() as session:
        for headers in (stale, wrong):
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            async with session.post(receiver.url, data=body, headers=headers) as resp:
                assert resp.status == 401
    assert receiver.rejected == ["stale", "signature"]


async def test_submit_view_applies_the_response_action(
    client: AsyncWebClient, standin: SlackStandIn, receiver: Receiver
) -> None:
    view = (await client.views_open(trigger_id=standin.issue_trigger("U0REVIEWER"), view=MODAL))[
        "view"
    ]
    errors = {"response_action": "errors", "errors": {"reason": "Say a little more"}}
    receiver.replies.append((200, json.dumps(errors), "application/json"))
    reply = await standin.submit_view("U0REVIEWER", view["id"], {"reason": {"text": "no"}})
    assert reply.json() == errors
    stored = standin.workspace.view(view["id"])
    assert stored is not None and stored.errors == {"reason": "Say a little more"}
    assert stored.closed is False
    with pytest.raises(ValueError, match="required"):  # Slack's client refuses empty inputs
        await standin.submit_view("U0REVIEWER", view["id"], {})

    await standin.submit_view("U0REVIEWER", view["id"], {"reason": {"text": "too risky"}})
    assert stored.closed is True
    payload = receiver.received[-1].payload()
    assert payload["type"] == "view_submission"
    assert payload["user"]["id"] == "U0REVIEWER"
    assert payload["view"]["id"] == view["id"]
    assert payload["view"]["callback_id"] == "deny_reason"
    assert payload["view"]["private_metadata"] == "run-42"
    assert payload["view"]["state"] == {
        "values": {"reason": {"text": {"type": "plain_text_input", "value": "too risky"}}}
    }


async def test_slash_command_reply_becomes_ephemeral(
    standin: SlackStandIn, receiver: Receiver
) -> None:
    answer = {"response_type": "ephemeral", "text": "3 approvals pending"}
    receiver.replies.append((200, json.dumps(answer), "application/json"))
    reply = await standin.slash("U0REQUESTER", "C0OPS", "/countersign", "status")
    assert reply.status == 200
    form = receiver.received[-1].form
    assert {k: form[k] for k in ("team_id", "channel_id", "channel_name", "user_id")} == {
        "team_id": "T0SANDBOX",
        "channel_id": "C0OPS",
        "channel_name": "ops-approvals",
        "user_id": "U0REQUESTER",
    }
    assert (form["user_name"], form["command"], form["text"]) == (
        "rina.requester",
        "/countersign",
        "status",
    )
    assert form["api_app_id"] == "A0SANDBOX" and form["token"] and form["trigger_id"]
    assert form["response_url"].startswith(standin.base_url + "/_sandbox/response/")
    [shown] = standin.workspace.ephemerals_for("U0REQUESTER", "C0OPS")
    assert shown.text == "3 approvals pending"
    assert standin.workspace.channel_messages("C0OPS") == []


# --------------------------------------------------------------------------- the App Home tab

HOME: dict[str, Any] = {
    "type": "home",
    "callback_id": "home",
    "blocks": [
        {"type": "actions", "block_id": "decide:1", "elements": APPROVE_BLOCKS[1]["elements"]}
    ],
}


async def test_views_publish_keeps_each_users_home_tab(
    client: AsyncWebClient, standin: SlackStandIn
) -> None:
    published = (await client.views_publish(user_id="U0REVIEWER", view=HOME))["view"]
    assert published["type"] == "home" and published["hash"]
    again = await client.views_publish(user_id="U0REVIEWER", view=HOME, hash=published["hash"])
    assert again["view"]["id"] == published["id"]  # one tab per person, replaced in place
    assert standin.home_view("U0REVIEWER") == again["view"]
    assert standin.home_view("U0ADMIN") is None
    for arguments, error in (
        ({"user_id": "U0REVIEWER", "view": HOME, "hash": published["hash"]}, "hash_conflict"),
        ({"user_id": "U0GHOST", "view": HOME}, "user_not_found"),
        ({"user_id": "U0REVIEWER", "view": MODAL}, "invalid_arguments"),
        ({"user_id": "U0REVIEWER", "view": HOME | {"blocks": [{}] * 101}}, "invalid_arguments"),
    ):
        with pytest.raises(SlackApiError) as err:
            await client.views_publish(**arguments)
        assert err.value.response["error"] == error
    assert standin.home_view("U0REVIEWER") == again["view"]


def add_private_channels(standin: SlackStandIn) -> None:
    """Two private channels the outsider is in: one without the bot, one with it."""
    from slack_sandbox.workspace import Channel

    ws = standin.workspace
    ws.channels.append(Channel("C0HIDDEN", "hidden", 0, ["U0OUTSIDER"], is_private=True))
    ws.channels.append(Channel("C0SHARED", "shared", 0, ["U0OUTSIDER", "U0BOT"], is_private=True))


async def test_users_conversations_lists_a_members_channels_in_pages(
    client: AsyncWebClient, standin: SlackStandIn
) -> None:
    add_private_channels(standin)
    kinds = "public_channel,private_channel"
    first = await client.users_conversations(user="U0OUTSIDER", types=kinds, limit=2)
    cursor = first["response_metadata"]["next_cursor"]
    assert len(first["channels"]) == 2 and cursor
    rest = await client.users_conversations(user="U0OUTSIDER", types=kinds, cursor=cursor)
    assert rest["response_metadata"]["next_cursor"] == ""
    ids = {c["id"] for c in first["channels"] + rest["channels"]}
    # a private channel the bot is not in is not the bot's to list
    assert ids == {"C0APPROVALS", "C0OPS", "C0GENERAL", "C0SHARED"}
    public = await client.users_conversations(user="U0OUTSIDER")
    assert {c["id"] for c in public["channels"]} == {"C0APPROVALS", "C0OPS", "C0GENERAL"}


async def test_conversations_members_lists_a_channels_members_in_pages(
    client: AsyncWebClient, standin: SlackStandIn
) -> None:
    add_private_channels(standin)
    first = await client.conversations_members(channel="C0SHARED", limit=1)
    cursor = first["response_metadata"]["next_cursor"]
    assert len(first["members"]) == 1 and cursor
    rest = await client.conversations_members(channel="C0SHARED", cursor=cursor)
    assert rest["response_metadata"]["next_cursor"] == ""
    assert set(first["members"] + rest["members"]) == {"U0OUTSIDER", "U0BOT"}
    # a private channel the bot is not in is not the bot's to list
    for channel in ("C0HIDDEN", "C0NOWHERE"):
        with pytest.raises(SlackApiError) as err:
            await client.conversations_members(channel=channel)
        assert err.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as err:
        await client.conversations_members(channel="C0SHARED", cursor="not-ours")
    assert err.value.response["error"] == "invalid_cursor"


async def test_a_private_channel_the_bot_is_not_in_is_one_it_cannot_see(
    client: AsyncWebClient, standin: SlackStandIn
) -> None:
    """As Slack answers: a public channel the bot is not in exists (`not_in_channel`), a
    private one does not (`channel_not_found`), whatever the bot asks of it."""
    add_private_channels(standin)
    standin.workspace.channel("C0OPS").members.remove("U0BOT")  # type: ignore[union-attr]
    for channel, error in (("C0OPS", "not_in_channel"), ("C0HIDDEN", "channel_not_found")):
        with pytest.raises(SlackApiError) as err:
            await client.chat_postMessage(channel=channel, text="approval needed")
        assert err.value.response["error"] == error
    for ask in (
        client.conversations_info(channel="C0HIDDEN"),
        client.chat_postEphemeral(channel="C0HIDDEN", user="U0OUTSIDER", text="x"),
    ):
        with pytest.raises(SlackApiError) as err:
            await ask
        assert err.value.response["error"] == "channel_not_found"
    shared = await client.conversations_info(channel="C0SHARED")
    assert shared["channel"]["is_private"] is True
    assert standin.workspace.channel_messages("C0HIDDEN") == []


async def test_opening_and_clicking_the_home_tab_send_what_slack_sends(
    client: AsyncWebClient, standin: SlackStandIn
) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def app_endpoint(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/slack/events", app_endpoint)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    standin.events_url = f"http://{host}:{port}/slack/events"
    try:
        await standin.open_home("U0REVIEWER", event_id="Ev0TEST")
        await standin.open_home("U0REVIEWER", event_id="Ev0TEST", retry=1)
        await client.views_publish(user_id="U0REVIEWER", view=HOME)
        await standin.click_home("U0REVIEWER", "deny", "decide:1")
        with pytest.raises(LookupError):
            await standin.click_home("U0REVIEWER", "deny", "no-such-block")
    finally:
        await runner.cleanup()

    (first_headers, first), (retry_headers, retried), (click_headers, click) = received
    verifier = SignatureVerifier(SECRET)
    for headers, raw in received:
        stamp, signature = headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
        assert verifier.is_valid(raw, stamp, signature)
    assert first_headers["Content-Type"] == "application/json"
    assert "X-Slack-Retry-Num" not in first_headers
    assert (retry_headers["X-Slack-Retry-Num"], retry_headers["X-Slack-Retry-Reason"]) == (
        "1",
        "http_timeout",
    )
    assert retried == first  # the same delivery again
    event = json.loads(first)
    assert (event["type"], event["event_id"], event["team_id"]) == (
        "event_callback",
        "Ev0TEST",
        "T0SANDBOX",
    )
    assert event["event"]["type"] == "app_home_opened" and event["event"]["tab"] == "home"
    assert event["event"]["user"] == "U0REVIEWER"
    payload = json.loads(parse_qs(click.decode())["payload"][0])
    assert payload["type"] == "block_actions" and "channel" not in payload
    assert payload["container"]["type"] == "view" and payload["view"]["type"] == "home"
    assert payload["actions"][0]["block_id"] == "decide:1"
    assert click_headers["Content-Type"] == "application/x-www-form-urlencoded"
