"""The local sandbox's web page and its routes (slack_sandbox.page), over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from slack_sandbox import SlackStandIn, open_workspace
from slack_sandbox import page as page_module
from slack_sandbox.page_runs import RUNS_FILE
from tests.support.stack import serve_app
from tests.support.waiting import eventually

TOKEN = "xoxb-sandbox-page-token"
SECRET = "sandbox-page-signing-secret"
API_TOKEN = "sandbox-page-api-token"
LABEL = "countersign local sandbox — not Slack"
BUTTONS: list[dict[str, Any]] = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "*deploy* wants approval"}},
    {
        "type": "actions",
        "block_id": "decide",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "r1",
                "style": "primary",
            }
        ],
    },
]
MODAL: dict[str, Any] = {
    "type": "modal",
    "callback_id": "why",
    "title": {"type": "plain_text", "text": "Why"},
    "submit": {"type": "plain_text", "text": "Send"},
    "blocks": [
        {
            "type": "input",
            "block_id": "reason",
            "label": {"type": "plain_text", "text": "Why?"},
            "element": {"type": "plain_text_input", "action_id": "text", "multiline": True},
        }
    ],
}


@pytest.fixture
async def standin(tmp_path: Path) -> AsyncIterator[SlackStandIn]:
    stand_in = SlackStandIn(open_workspace(tmp_path), token=TOKEN, signing_secret=SECRET)
    await stand_in.start()
    yield stand_in
    await stand_in.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@dataclass
class FakeBot:
    """Stands in for the bot's request URL: records forms, answers with scripted replies."""

    forms: list[dict[str, str]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        raw = (await request.read()).decode()
        self.forms.append({k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()})
        if self.replies:
            return web.json_response(self.replies.pop(0))
        return web.Response(status=200)


@pytest.fixture
async def bot(standin: SlackStandIn) -> AsyncIterator[FakeBot]:
    fake = FakeBot()
    app = web.Application()
    app.router.add_post("/slack/events", fake.handle)
    runner, url = await serve_app(app)
    standin.events_url = f"{url}/slack/events"
    yield fake
    await runner.cleanup()


async def post_json(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


# --------------------------------------------------------------------------- the page itself


async def test_the_page_is_served_and_labelled_not_slack(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    async with http.get(standin.page_url) as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        html = await response.text()
    assert LABEL in html
    assert "<title>countersign local sandbox — not Slack</title>" in html
    assert 'src="/static/app.js"' in html and 'href="/static/style.css"' in html
    for testid in ("composer", "agent-select", "run-input", "start-run"):
        assert f'data-testid="{testid}"' in html


@pytest.mark.parametrize(
    ("name", "content_type", "expected"),
    [
        ("app.js", "javascript", "/_sandbox/events"),
        ("style.css", "text/css", ".btn.danger"),
    ],
)
async def test_static_files_load_and_stay_local(
    standin: SlackStandIn, http: aiohttp.ClientSession, name: str, content_type: str, expected: str
) -> None:
    async with http.get(f"{standin.base_url}/static/{name}") as response:
        assert response.status == 200
        assert content_type in response.content_type
        text = await response.text()
    assert expected in text
    assert "https://" not in text and "http://" not in text  # no external network
    async with http.get(f"{standin.base_url}/static/missing.js") as response:
        assert response.status == 404


async def test_config_lists_users_channels_and_agents(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{standin.base_url}/_sandbox/ui/config") as response:
        config = await response.json()
    assert config["label"] == LABEL
    roles = {u["id"]: u["role"] for u in config["users"]}
    assert roles == {
        "U0REQUESTER": "requester",
        "U0REVIEWER": "reviewer",
        "U0REVIEWER2": "second reviewer",
        "U0ADMIN": "admin",
        "U0OUTSIDER": "outsider",
    }
    assert all(u["name"] for u in config["users"])
    assert config["default_user"] == "U0REVIEWER"
    assert [c["id"] for c in config["channels"]] == ["C0APPROVALS", "C0OPS", "C0GENERAL"]
    assert {a["name"]: a["example"] for a in config["agents"]} == {
        "refund-agent": "refund order 123",
        "cleanup-agent": "delete /tmp/draft-1.docx /tmp/draft-2.docx",
        "repo-admin": "delete repos scratch, acme-prod",
        "support-agent": "Can I pay my invoice in euros?",
    }
    assert config["runs_enabled"] is False


# --------------------------------------------------------------------------- live events


async def read_until(stream: aiohttp.StreamReader, prefix: bytes) -> bytes:
    async with asyncio.timeout(5):
        while True:
            line = await stream.readline()
            assert line, "the event stream ended"
            if line.startswith(prefix):
                return line


async def test_event_stream_delivers_a_posted_message(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{standin.base_url}/_sandbox/events") as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        await read_until(response.content, b": connected")
        client = AsyncWebClient(token=TOKEN, base_url=standin.url)
        posted = await client.chat_postMessage(channel="C0APPROVALS", text="hello")
        line = await read_until(response.content, b"data:")
    event = json.loads(line.removeprefix(b"data:"))
    assert event["type"] == "message"
    assert (event["channel"], event["ts"]) == ("C0APPROVALS", posted["ts"])


async def test_event_stream_heartbeats_and_unsubscribes_on_disconnect(
    standin: SlackStandIn, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_module, "HEARTBEAT_SECONDS", 0.05)
    async with http.get(f"{standin.base_url}/_sandbox/events") as response:
        await read_until(response.content, b": heartbeat")
        assert standin.core.hub.subscribers == 1
    await eventually(lambda: standin.core.hub.subscribers == 0)


# --------------------------------------------------------------------------- interactions


async def test_click_slash_submit_and_close(
    standin: SlackStandIn, bot: FakeBot, http: aiohttp.ClientSession
) -> None:
    ui = f"{standin.base_url}/_sandbox/ui"
    client = AsyncWebClient(token=TOKEN, base_url=standin.url)
    posted = await client.chat_postMessage(channel="C0APPROVALS", text="ok?", blocks=BUTTONS)
    click = {"user": "U0REVIEWER", "channel": "C0APPROVALS", "ts": posted["ts"]}

    status, answer = await post_json(http, f"{ui}/click", {**click, "action_id": "approve"})
    assert (status, answer) == (200, {"status": 200, "body": ""})
    payload = json.loads(bot.forms[-1]["payload"])
    assert payload["actions"][0]["action_id"] == "approve"
    assert payload["user"]["id"] == "U0REVIEWER"
    status, answer = await post_json(http, f"{ui}/click", {**click, "action_id": "nope"})
    assert status == 404 and "nope" in answer["error"]
    status, answer = await post_json(http, f"{ui}/click", {"user": "U0REVIEWER"})
    assert status == 400

    bot.replies.append({"text": "pending: none"})
    body = {"user": "U0ADMIN", "channel": "C0OPS", "text": "pending all"}
    status, answer = await post_json(http, f"{ui}/slash", body)
    assert status == 200 and answer["status"] == 200
    assert (bot.forms[-1]["command"], bot.forms[-1]["text"]) == ("/approvals", "pending all")
    [ephemeral] = standin.workspace.ephemerals_for("U0ADMIN", "C0OPS")
    assert ephemeral.text == "pending: none"

    opened = await client.views_open(trigger_id=standin.issue_trigger("U0REVIEWER"), view=MODAL)
    view_id = opened["view"]["id"]
    submit = {"user": "U0REVIEWER", "view_id": view_id}
    bot.replies.append({"response_action": "errors", "errors": {"reason": "say more"}})
    values = {"reason": {"text": "because"}}
    status, answer = await post_json(http, f"{ui}/submit", {**submit, "values": values})
    assert status == 200 and answer["status"] == 200
    state = json.loads(bot.forms[-1]["payload"])["view"]["state"]["values"]
    assert state["reason"]["text"]["value"] == "because"
    view = standin.workspace.view(view_id)
    assert view is not None and view.errors == {"reason": "say more"} and not view.closed

    other = {"user": "U0OUTSIDER", "view_id": view_id}
    assert (await post_json(http, f"{ui}/close", other))[0] == 403
    assert await post_json(http, f"{ui}/close", submit) == (200, {"ok": True})
    assert view.closed
    status, answer = await post_json(http, f"{ui}/submit", {**submit, "values": values})
    assert status == 404


async def test_interactions_without_a_bot_answer_503(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    standin.events_url = None
    body = {"user": "U0REVIEWER", "channel": "C0APPROVALS", "text": "help"}
    status, answer = await post_json(http, f"{standin.base_url}/_sandbox/ui/slash", body)
    assert status == 503 and "events_url" in answer["error"]


async def test_another_site_cannot_act_through_the_page(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    """A web page elsewhere, open in the same browser, posting a form (text/plain) or a
    fetch from its own origin, acts as nobody: only the sandbox page's JSON does."""
    standin.events_url = None  # were it let through, the page's own answer would be 503
    url = f"{standin.base_url}/_sandbox/ui/slash"
    body = json.dumps({"user": "U0ADMIN", "channel": "C0APPROVALS", "text": "route add x"})
    for headers in (
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/json", "Origin": "http://evil.example"},
    ):
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 403, headers
            assert "only the sandbox page" in (await response.json())["error"]
    same = {"Content-Type": "application/json", "Origin": standin.base_url.rstrip("/")}
    async with http.post(url, data=body, headers=same) as response:
        assert response.status == 503  # through to the page's own handling


# --------------------------------------------------------------------------- runs panel


async def test_runs_answer_503_without_an_api_url(
    standin: SlackStandIn, http: aiohttp.ClientSession
) -> None:
    url = f"{standin.base_url}/_sandbox/ui/runs"
    async with http.get(url) as response:
        assert response.status == 503
        assert "api_url" in (await response.json())["error"]
    body = {"agent": "refund-agent", "input": "refund order 123", "user": "U0REQUESTER"}
    status, answer = await post_json(http, url, body)
    assert status == 503 and "api_url" in answer["error"]


@dataclass
class FakeApi:
    """The bot's HTTP API as far as the runs panel uses it."""

    started: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def start(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.started.append((request.headers.get("Authorization", ""), body))
        if body["agent"] == "no-such-agent":
            return web.json_response({"error": "unknown agent"}, status=400)
        return web.json_response(
            {"run_id": f"run_{len(self.started)}", "status": "running"}, status=202
        )

    async def detail(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        if request.headers.get("Authorization") != f"Bearer {API_TOKEN}":
            return web.json_response({"error": "wrong token"}, status=401)
        status = "succeeded" if run_id == "run_1" else "waiting"
        calls = [{"tool": "issue_refund", "arguments": {}, "outcome": "executed"}]
        return web.json_response({"run_id": run_id, "status": status, "tool_calls": calls})


@pytest.fixture
async def fake_api() -> AsyncIterator[tuple[FakeApi, str]]:
    api = FakeApi()
    app = web.Application()
    app.router.add_post("/api/v1/runs", api.start)
    app.router.add_get("/api/v1/runs/{run_id}", api.detail)
    runner, url = await serve_app(app)
    yield api, url
    await runner.cleanup()


async def test_runs_are_forwarded_remembered_and_listed_newest_first(
    tmp_path: Path, fake_api: tuple[FakeApi, str], http: aiohttp.ClientSession
) -> None:
    api, api_url = fake_api
    directory = tmp_path / "ws"

    async def started(use: Callable[[str], Awaitable[None]]) -> None:
        stand_in = SlackStandIn(
            open_workspace(directory), token=TOKEN, api_url=api_url, api_token=API_TOKEN
        )
        await stand_in.start()
        try:
            await use(f"{stand_in.base_url}/_sandbox/ui")
        finally:
            await stand_in.stop()

    async def start_two(ui: str) -> None:
        examples = (("refund-agent", "refund order 123"), ("support-agent", "euros?"))
        for number, (agent, text) in enumerate(examples, start=1):
            body = {"agent": agent, "input": text, "user": "U0REQUESTER"}
            expected = {"run_id": f"run_{number}", "status": "running"}
            assert await post_json(http, f"{ui}/runs", body) == (202, expected)
        bad = {"agent": "no-such-agent", "input": "x", "user": "U0REQUESTER"}
        assert await post_json(http, f"{ui}/runs", bad) == (400, {"error": "unknown agent"})

    async def list_them(ui: str) -> None:  # in a restarted sandbox: the list survived
        async with http.get(f"{ui}/runs") as response:
            runs = (await response.json())["runs"]
        assert [(r["run_id"], r["status"], r["input"]) for r in runs] == [
            ("run_2", "waiting", "euros?"),
            ("run_1", "succeeded", "refund order 123"),
        ]
        assert runs[1]["tool_calls"][0]["outcome"] == "executed"
        assert runs[0]["user"] == "U0REQUESTER"

    await started(start_two)
    assert api.started[0] == (
        f"Bearer {API_TOKEN}",
        {"agent": "refund-agent", "input": "refund order 123", "requested_by": "U0REQUESTER"},
    )
    assert (directory / RUNS_FILE).exists()
    await started(list_them)
