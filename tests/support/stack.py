"""A whole countersign stack on loopback for the bot's tests: real Redis, the Slack
stand-in, the aiohttp server with Bolt and the HTTP API, workers, sweeper and outbox."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from agent_host.approvals import ApprovalRequest, RunRecord
from agent_host.durable.crypto import generate_key
from agent_host.durable.host import Host
from agent_host.examples import ExampleEffects
from bot.composition import build_service
from bot.listeners.commands import UNREACHABLE
from bot.slack_settings import ServiceSettings as Settings
from bot.slack_settings import load_settings
from bot.wiring import SlackBot
from slack_sandbox import AppReply, SlackStandIn, open_workspace, workspace_to_dict
from tests.support.waiting import eventually

T = TypeVar("T")

TOKEN = "xoxb-test-token"
SECRET = "test-signing-secret"
API_TOKEN = "api-token"
REQUESTER, REVIEWER, REVIEWER2 = "U0REQUESTER", "U0REVIEWER", "U0REVIEWER2"
ADMIN, OUTSIDER = "U0ADMIN", "U0OUTSIDER"
CHANNEL, OPS = "C0APPROVALS", "C0OPS"
COMMAND_TRIES = 3


@dataclass
class Stack:
    standin: SlackStandIn
    host: Host
    bot: SlackBot
    url: str
    effects: ExampleEffects

    async def start_run(self, agent: str, text: str, requested_by: str = REQUESTER) -> str:
        return await self.host.store.create_run(agent, text, requested_by)

    async def pending_requests(self, run_id: str, count: int = 1) -> list[ApprovalRequest]:
        """Wait until the run waits with `count` requests, each posted to Slack."""

        async def posted() -> list[ApprovalRequest] | None:
            requests = [r for r in await self.host.store.run_requests(run_id) if not r.decided]
            if len(requests) >= count and all(r.message_ts for r in requests):
                return requests
            return None

        return await eventually(posted)

    async def run_status(self, run_id: str, *statuses: str) -> RunRecord:
        async def reached() -> RunRecord | None:
            info = await self.host.store.run_info(run_id)
            return info if info and info.status in statuses else None

        return await eventually(reached)

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        state = workspace_to_dict(self.standin.workspace)
        for message in state["messages"]:
            if message["channel"] == channel and message["ts"] == ts:
                return dict(message)
        raise AssertionError(f"no message {channel}/{ts}")

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        state = workspace_to_dict(self.standin.workspace)
        return [
            m
            for m in state["messages"]
            if m["channel"] == channel and m.get("thread_ts") == ts and m["ts"] != ts
        ]

    def ephemerals(self, user: str) -> list[str]:
        state = workspace_to_dict(self.standin.workspace)
        return [e.get("text", "") for e in state.get("ephemerals", []) if e.get("user") == user]

    async def approvals(self, user: str, channel: str, text: str) -> AppReply:
        """`user` runs `/approvals text` in `channel`, as a person would: told the database
        could not be reached (nothing was done: the replay guard, which must answer within
        half a second, did not, as on a loaded machine), they run it again."""
        for _ in range(COMMAND_TRIES - 1):
            reply = await self.standin.slash(user, channel, "/approvals", text)
            if (reply.json() or {}).get("text") != UNREACHABLE:
                return reply
        return await self.standin.slash(user, channel, "/approvals", text)

    async def click(self, user: str, request: ApprovalRequest, action_id: str) -> Any:
        channel, ts = request.message_channel, request.message_ts
        return await self.standin.click(user, channel, ts, action_id)

    # -- helpers added for the test_bot_* suites (append-only) ------------------------------
    async def opened_view(self, user: str, callback_id: str, seen: int = 0) -> dict[str, Any]:
        """Wait for view number `seen` (0-based) with `callback_id` opened for `user`."""

        async def opened() -> dict[str, Any] | None:
            views = [
                v
                for v in workspace_to_dict(self.standin.workspace)["views"]
                if v["user"] == user and v["view"].get("callback_id") == callback_id
            ]
            return views[seen] if len(views) > seen else None

        return await eventually(opened)

    def view_state(self, view_id: str) -> dict[str, Any]:
        for view in workspace_to_dict(self.standin.workspace)["views"]:
            if view["id"] == view_id:
                return dict(view)
        raise AssertionError(f"no view {view_id}")

    async def wait_ephemerals(self, user: str, count: int = 1) -> list[str]:
        """Wait until `user` has at least `count` ephemerals; returns all of their texts."""

        async def enough() -> list[str] | None:
            texts = self.ephemerals(user)
            return texts if len(texts) >= count else None

        return await eventually(enough)

    async def decided_message(self, channel: str, ts: str) -> dict[str, Any]:
        """Wait until the message at `ts` has lost its buttons (it was updated as decided)."""

        async def updated() -> dict[str, Any] | None:
            message = self.message(channel, ts)
            return None if any(b["type"] == "actions" for b in message["blocks"]) else message

        return await eventually(updated)

    async def thread_replies(self, channel: str, ts: str, count: int = 1) -> list[dict[str, Any]]:
        async def replies() -> list[dict[str, Any]] | None:
            found = self.thread(channel, ts)
            return found if len(found) >= count else None

        return await eventually(replies)

    async def decided(self, request_id: str) -> ApprovalRequest:
        """Wait until the request has a terminal status in Redis."""

        async def done() -> ApprovalRequest | None:
            request = await self.host.store.get_request(request_id)
            return request if request is not None and request.decided else None

        return await eventually(done)

    async def assert_still_waiting(self, run_id: str, *request_ids: str) -> None:
        """None of `request_ids` is decided, and their run still waits for a decision."""
        for request_id in request_ids:
            current = await self.host.store.get_request(request_id)
            assert current is not None and current.status == "pending", current
        info = await self.host.store.run_info(run_id)
        assert info is not None and info.status == "waiting", info

    async def posted(self, request_id: str) -> ApprovalRequest:
        """Wait until the request is posted to Slack (its message ts saved)."""

        async def found() -> ApprovalRequest | None:
            request = await self.host.store.get_request(request_id)
            return request if request is not None and request.message_ts else None

        return await eventually(found)

    def channel_messages(self, channel: str) -> list[dict[str, Any]]:
        """Top-level messages (no thread replies) in `channel`, oldest first."""
        state = workspace_to_dict(self.standin.workspace)
        return [
            m
            for m in state["messages"]
            if m["channel"] == channel and m.get("thread_ts") in (None, m["ts"])
        ]


def stack_settings(standin: SlackStandIn, redis_url: str, tmp_path: Path, **env: str) -> Settings:
    """The settings of a test stack talking to `standin`, with the example agents journalling
    their effects to `tmp_path/effects.jsonl`; `env` adds or overrides variables."""
    return load_settings(
        {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": standin.url,
            "REDIS_URL": redis_url,
            "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
            "COUNTERSIGN_ENCRYPTION_KEYS": generate_key("test"),
            "COUNTERSIGN_API_TOKEN": API_TOKEN,
            "COUNTERSIGN_DEFAULT_CHANNEL": CHANNEL,
            "COUNTERSIGN_ADMINS": ADMIN,
            "COUNTERSIGN_AGENTS": "agent_host.examples:default_registry",
            "COUNTERSIGN_EXAMPLE_JOURNAL": str(tmp_path / "effects.jsonl"),
            **env,
        }
    )


def quicken(host: Host) -> None:
    """Background timings short enough for tests: reclaim after 200 ms, sweep every 100 ms,
    retry a failed callback after 50 ms (doubling) and dead-letter it after 3 attempts.
    Acknowledged stream entries are not trimmed: these tests count the entries a decision
    wrote, and a trim racing them would drop them (trimming has tests of its own:
    test_streams.py, test_sweeper_restart.py)."""
    host.retry_idle_ms, host.sweep_interval = 200, 0.1
    host.trim_every = math.inf
    host.callback_backoff, host.callback_attempts = 0.05, 3


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """`app` served on a free loopback port; its runner (to clean up) and base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@asynccontextmanager
async def running_stack(
    redis_url: str, tmp_path: Path, *, rate_limit: float | None = None, **env: str
) -> AsyncIterator[Stack]:
    """The whole stack, Slack's requests over HTTP (`/slack/events`), one worker in process."""
    standin = SlackStandIn(
        open_workspace(tmp_path / "slack"),
        token=TOKEN,
        signing_secret=SECRET,
        rate_limit_per_channel=rate_limit,
    )
    await standin.start()
    settings = stack_settings(standin, redis_url, tmp_path, **env)
    service = await build_service(settings)  # the composition root `serve` uses
    quicken(service.host)
    try:
        await service.start(http=("127.0.0.1", 0), workers=1)
        standin.events_url = f"{service.url}/slack/events"
        effects = ExampleEffects(settings.example_journal)
        yield Stack(standin, service.host, service.bot, service.url, effects)
    finally:
        await service.stop()
        await standin.stop()
