"""A real countersign stack on loopback, and the set-up the figures share.

The server under test is `countersign serve` itself (`python -m bot.cli serve --workers 1`:
the Bolt app and the HTTP API on one aiohttp server, one in-process resume worker, the
sweeper and the outbox) in its own process, so its latencies and its garbage collector see
only countersign's objects, not the bench's. Slack is the local stand-in, served from the
bench process, keeping its workspace in memory (no JSON file rewritten per change: that is
the sandbox's cost, not countersign's).

Shared set-up: many pending requests, each with its approval message in the stand-in, and
the `block_actions` body Slack would send for a click on each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from agent_host.approvals import ApprovalRequest, Route, Router
from agent_host.durable.connections import as_text
from agent_host.durable.keys import OUTBOX_GROUP, RESUME_GROUP, Keys, shards
from agent_host.durable.redis_server import free_port
from agent_host.durable.store import RunStore
from agent_host.runtime.runner import Paused
from bot import blocks
from slack_sandbox import SlackStandIn, Workspace, seed_workspace
from slack_sandbox.blockkit import find_element
from slack_sandbox.methods_chat import post_message
from slack_sandbox.payloads import block_actions_payload, button_action, payload_body
from slack_sandbox.shapes import message_json
from slack_sandbox.workspace import Channel, Message
from tests.support.paths import PROJECT_ROOT
from tests.support.processes import inherited_env
from tests.support.routers import StaticRouter

from .agents import PROBE_ENV
from .common import KEY_TEXT, KEYRING

__all__ = [
    "CHANNEL",
    "REVIEWER",
    "ROUTE",
    "SECRET",
    "ServerProcess",
    "SpreadRouter",
    "bare_server",
    "bench_channels",
    "click_bodies",
    "decided_count",
    "group_backlog",
    "outbox_streams",
    "persist_pauses",
    "post_approvals",
    "resume_streams",
    "serve_process",
    "set_message_refs",
    "standin",
    "wait_streams_drained",
]

TOKEN = "xoxb-bench-token"
SECRET = "bench-signing-secret"
CHANNEL = "C0APPROVALS"
REVIEWER = "U0REVIEWER"  # a member of S0REVIEWERS in the sandbox seed
# Reviewers by user group: every click runs the reviewer rules (the group's members are
# fetched from the stand-in once, then cached, as in production).
ROUTE = Route(route_id="bench", destination=CHANNEL, reviewers=("S0REVIEWERS",))
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0


# -- Slack ------------------------------------------------------------------------------
def sandbox_workspace(extra_channels: Iterable[str] = ()) -> Workspace:
    """The default sandbox seed, in memory, plus public channels the bot is a member of."""
    workspace = seed_workspace()
    members = [u.id for u in workspace.users] + [workspace.bot.user_id]
    for channel_id in extra_channels:
        workspace.channels.append(
            Channel(channel_id, channel_id.lower(), 1_700_000_000, list(members))
        )
    return workspace


@contextlib.asynccontextmanager
async def standin(
    *, rate_limit: float | None = None, extra_channels: Iterable[str] = ()
) -> AsyncIterator[SlackStandIn]:
    slack = SlackStandIn(
        sandbox_workspace(extra_channels),
        token=TOKEN,
        signing_secret=SECRET,
        rate_limit_per_channel=rate_limit,
    )
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


# -- server processes --------------------------------------------------------------------
@dataclass
class ServerProcess:
    """A server child process on 127.0.0.1:`port`; `probe` is filled in once it stopped."""

    proc: asyncio.subprocess.Process
    port: int
    log_path: Path
    probe_path: Path | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    # `serve --workers 0`'s separate `countersign worker` process, while it runs
    worker: ServerProcess | None = None

    @property
    def pids(self) -> list[int]:
        """This process and its worker process, if any: whose CPU time a figure counts."""
        return [self.proc.pid] + ([self.worker.proc.pid] if self.worker is not None else [])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_url(self) -> str:
        return f"{self.url}/slack/events"

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.returncode is not None:
                    break
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(f"{self.url}/healthz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"server on port {self.port} did not start; its log:\n{tail}")

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.probe_path is not None and self.probe_path.exists():
            self.probe = json.loads(self.probe_path.read_text(encoding="utf-8"))


def _prepare(tmp: Path) -> int:
    """Make the server's directory; a free port for it."""
    tmp.mkdir(parents=True, exist_ok=True)
    return free_port()


async def _spawn(args: list[str], env: dict[str, str], port: int, log: Path) -> ServerProcess:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *args,
            cwd=PROJECT_ROOT,
            env={**inherited_env(), **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    return ServerProcess(proc, port, log)


@contextlib.asynccontextmanager
async def serve_process(
    tmp: Path,
    redis_url: str,
    slack: SlackStandIn,
    *,
    workers: int = 1,
    profile_to: Path | None = None,
) -> AsyncIterator[ServerProcess]:
    """`countersign serve --workers N` against `redis_url`, Slack being `slack`. With
    `workers=0`, a separate `countersign worker` process (one worker, its own sweeper and
    outbox: the scale-out layout) runs beside it."""
    port = _prepare(tmp)
    env = _serve_env(tmp, redis_url, slack)
    profiler = ["-m", "cProfile", "-o", str(profile_to)] if profile_to else []
    command = ["-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    server = await _spawn(
        [sys.executable, *profiler, *command, "--workers", str(workers)],
        env,
        port,
        tmp / "serve.log",
    )
    server.probe_path = tmp / "probe.json"
    worker: ServerProcess | None = None
    try:
        await server.wait_ready()
        if workers == 0:
            worker_env = {**env, PROBE_ENV: str(tmp / "worker-probe.json")}
            args = [sys.executable, "-m", "bot.cli", "worker"]
            worker = await _spawn(args, worker_env, 0, tmp / "worker.log")
            worker.probe_path = tmp / "worker-probe.json"
            server.worker = worker
        yield server
    finally:
        await server.stop()
        if worker is not None:
            await worker.stop()
            server.probe["started"] = worker.probe.get("started", {})
            server.probe["worker_gc"] = worker.probe.get("gc", [])


def _serve_env(tmp: Path, redis_url: str, slack: SlackStandIn) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.url,
        "REDIS_URL": redis_url,
        "COUNTERSIGN_DATA_DIR": str(tmp / "data"),
        "COUNTERSIGN_ENCRYPTION_KEYS": KEY_TEXT,
        "COUNTERSIGN_DEFAULT_CHANNEL": CHANNEL,
        "COUNTERSIGN_AGENTS": "bench.agents:registry",
        PROBE_ENV: str(tmp / "probe.json"),
    }


@contextlib.asynccontextmanager
async def bare_server(tmp: Path, redis_url: str) -> AsyncIterator[ServerProcess]:
    """The ack baseline (`bench.bare_server`) against `redis_url`."""
    port = _prepare(tmp)
    args = [sys.executable, "-m", "bench.bare_server", str(port), redis_url, SECRET]
    server = await _spawn(args, {}, port, tmp / "bare.log")
    try:
        await server.wait_ready()
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def floor_server(
    tmp: Path, redis_url: str, slack: SlackStandIn, round_trips: int
) -> AsyncIterator[ServerProcess]:
    """The components' floor of a cycle (`bench.floor_server`): `round_trips` Redis round
    trips and a cycle's two Web API calls, through Bolt, redis-py and slack_sdk."""
    port = _prepare(tmp)
    args = [sys.executable, "-m", "bench.floor_server", str(port), redis_url, SECRET]
    args += [slack.url, str(round_trips)]
    server = await _spawn(args, {}, port, tmp / "floor.log")
    try:
        await server.wait_ready()
        yield server
    finally:
        await server.stop()


# -- pending requests ---------------------------------------------------------------------
def bench_channels(count: int) -> list[str]:
    """Channel ids for `spread_router` (add them to the stand-in with `extra_channels`)."""
    return [f"C0BENCH{n:04d}" for n in range(count)]


class SpreadRouter:
    """The bench route (reviewers by user group), its channel taken from `channels` in
    turn: under a load of many clicks per second each channel still gets its outcome
    replies at no more than Slack's one post per second, so the outbox's pacing (Slack's
    limit, kept by countersign) does not hold the outcomes back for minutes."""

    def __init__(self, channels: Sequence[str]) -> None:
        self.routes = [
            Route(route_id="bench", destination=c, reviewers=ROUTE.reviewers) for c in channels
        ]
        self.next = 0

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        route = self.routes[self.next % len(self.routes)]
        self.next += 1
        return route


async def persist_pauses(
    redis: Redis,
    outcomes: Sequence[Paused],
    route: Route | Router = ROUTE,
    *,
    batch: int = 50,
    create_runs: bool = True,
) -> list[ApprovalRequest]:
    """Each run as the API creates it (`create_run`, which also queues a start entry that a
    worker will find stale and skip) and its pause as the worker saves it (`save_outcome`),
    routed by `route`; returns the pending request of each, in order. Without
    `create_runs` only the pauses are saved (no start entries for a running worker to race)."""
    router = StaticRouter(route) if isinstance(route, Route) else route
    store = RunStore(redis, KEYRING, router)

    async def one(outcome: Paused) -> bool:
        state = outcome.state
        if create_runs:
            await store.create_run(state.agent, state.input, state.requested_by, state.run_id)
        return await store.save_outcome(outcome, "", "worker")

    for start in range(0, len(outcomes), batch):
        saved = await asyncio.gather(*(one(o) for o in outcomes[start : start + batch]))
        if not all(saved):
            raise RuntimeError("a pause was not saved (fenced): the run ids collide")
    requests = []
    for outcome in outcomes:
        found = await store.run_requests(outcome.state.run_id)
        requests.append(found[0])
    return requests


def post_approvals(slack: SlackStandIn, requests: Sequence[ApprovalRequest]) -> list[str]:
    """The approval message of each request (`bot.blocks.approval_message`), posted into the
    stand-in by its own chat.postMessage handler, not over HTTP: the outbox would pace a
    thousand posts into one channel at one per second. Returns each message's ts."""
    stamps = []
    for request in requests:
        text, body = blocks.approval_message(request)
        channel = request.route.destination
        reply = post_message(slack.core, {"channel": channel, "text": text, "blocks": body})
        if not reply.get("ok"):
            raise RuntimeError(f"the stand-in refused an approval message: {reply}")
        stamps.append(str(reply["ts"]))
    return stamps


async def set_message_refs(
    redis: Redis, requests: Sequence[ApprovalRequest], stamps: Sequence[str]
) -> None:
    """What the outbox saves once a request is posted (`RunStore.set_message_ref`)."""
    store = RunStore(redis, KEYRING, StaticRouter(ROUTE))
    for request, ts in zip(requests, stamps, strict=True):
        await store.set_message_ref(request.request_id, request.route.destination, ts)
        request.message_channel, request.message_ts = request.route.destination, ts


async def prepare_clicks(
    redis: Redis,
    slack: SlackStandIn,
    outcomes: Sequence[Paused],
    route: Route | Router = ROUTE,
) -> tuple[list[ApprovalRequest], list[str]]:
    """Pauses saved, their messages posted and referenced, and one signed-to-be approval
    click body per request: what the click benchmarks replay."""
    requests = await persist_pauses(redis, outcomes, route)
    stamps = post_approvals(slack, requests)
    await set_message_refs(redis, requests, stamps)
    return requests, click_bodies(slack, requests, stamps)


def click_bodies(
    slack: SlackStandIn,
    requests: Sequence[ApprovalRequest],
    stamps: Sequence[str],
    user_id: str = REVIEWER,
    action_id: str = blocks.APPROVE,
) -> list[str]:
    """The form body Slack POSTs when `user_id` clicks `action_id` on each request's message,
    built by the stand-in's own payload code exactly as its `click` builds it (the signature
    is added when the request is sent)."""
    core = slack.core
    workspace = core.workspace
    user = workspace.user(user_id)
    by_ts: dict[tuple[str, str], Message] = {(m.channel, m.ts): m for m in workspace.messages}
    bodies = []
    for request, ts in zip(requests, stamps, strict=True):
        channel = workspace.channel(request.route.destination)
        message = by_ts[(request.route.destination, ts)]
        found = find_element(message.blocks, action_id, "button")
        if user is None or channel is None or found is None:
            raise RuntimeError(f"cannot build a click on request {request.request_id}")
        block_id, element = found
        payload = block_actions_payload(
            core,
            user=user,
            channel=channel,
            message_ts=ts,
            message=message_json(workspace, message),
            thread_ts=None,
            action=button_action(block_id, element),
            trigger_id=core.triggers.issue(user.id),
            response_url=core.new_response_url(channel.id, user.id, ts, is_ephemeral=False),
        )
        bodies.append(payload_body(payload).decode())
    return bodies


def resume_streams() -> list[tuple[str, str]]:
    """Every shard's resume stream with the workers' consumer group."""
    return [(shard.resume, RESUME_GROUP) for shard in shards()]


def outbox_streams() -> list[tuple[str, str]]:
    """Every shard's outbox stream with the outbox's consumer group."""
    return [(shard.outbox, OUTBOX_GROUP) for shard in shards()]


async def group_backlog(redis: Redis, streams: Iterable[tuple[str, str]]) -> int | None:
    """Entries not yet delivered or not yet acknowledged in those groups; None while a
    group does not exist yet."""
    total = 0
    for stream, group in streams:
        groups: Any = await redis.xinfo_groups(stream) if await redis.exists(stream) else []
        info = next((g for g in groups if as_text(g["name"]) == group), None)
        if info is None:
            return None
        total += int(info["pending"]) + int(info.get("lag") or 0)
    return total


async def wait_streams_drained(
    redis: Redis, within: float = 30.0, streams: Iterable[tuple[str, str]] | None = None
) -> None:
    """Until the consumer groups of `streams` (default: every shard's resume and outbox
    streams) exist and have nothing new or unacknowledged."""
    wanted = list(streams) if streams is not None else resume_streams() + outbox_streams()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await group_backlog(redis, wanted) == 0:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"background streams not drained within {within:g}s")


async def decided_count(redis: Redis, requests: Sequence[ApprovalRequest]) -> int:
    """How many of `requests` have a terminal status."""
    async with redis.pipeline(transaction=False) as pipe:
        for request in requests:
            pipe.hget(_request_key(request.request_id), "status")
        statuses = await pipe.execute()
    return sum(1 for s in statuses if s is not None and as_text(s) != "pending")


def _request_key(request_id: str) -> str:
    return Keys(request_id).request(request_id)
