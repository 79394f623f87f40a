"""Real processes for the fault tests: `countersign serve` / `worker` children, a dedicated
redis-server, the Slack stand-in served from the test process, and bounded waits.

Every wait here is bounded and fails with the tail of the relevant process log. A `World`
owns everything it starts and stops it on exit, whatever happened.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import re
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

from agent_host.approvals import TERMINAL, ApprovalRequest, FixedRouter, RunRecord
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.redis_server import AppendFsync, RedisServer, free_port
from agent_host.durable.store import RunStore
from bot import blocks
from slack_sandbox import AppReply, SlackStandIn, open_workspace
from slack_sandbox.seed import ADMIN, APPROVALS, OPS, OUTSIDER, REQUESTER, REVIEWER, REVIEWER2
from tests.support.paths import PROJECT_ROOT
from tests.support.processes import CLI, SPAWN_LOCK, Proc, inherited_env, until
from tests.support.signing import webhook_signature

T = TypeVar("T")

__all__ = [
    "ADMIN",
    "APPROVALS",
    "CLI",
    "EARLY_STOP",
    "OPS",
    "OUTSIDER",
    "REQUESTER",
    "REVIEWER",
    "REVIEWER2",
    "SPAWN_LOCK",
    "CallLog",
    "LateAnswer",
    "Proc",
    "RedisProxy",
    "Scenario",
    "World",
    "run_concurrently",
    "start_early",
    "stop_early",
    "until",
    "world",
    "write_file",
]


SLACK_TOKEN = "xoxb-faults-token"
SIGNING_SECRET = "faults-signing-secret"
API_TOKEN = "faults-api-token"
WEBHOOK_SECRET = "faults-webhook-secret"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@dataclass
class World:
    """A dedicated Redis, a Slack stand-in, the countersign processes, and probes on them."""

    tmp: Path
    redis_server: RedisServer
    standin: SlackStandIn
    redis: Redis
    store: RunStore
    http: aiohttp.ClientSession
    keys: str
    journal: Path
    base_env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)
    _names: dict[str, int] = field(default_factory=dict)

    # -- processes ------------------------------------------------------------------------
    def env(self, crash_at: str | None = None, **extra: str) -> dict[str, str]:
        env = dict(self.base_env)
        if crash_at:
            env["COUNTERSIGN_CRASH_AT"] = crash_at
        env.update(extra)
        return env

    def _log(self, kind: str) -> tuple[str, Path]:
        n = self._names[kind] = self._names.get(kind, 0) + 1
        name = f"{kind}-{n}"
        return name, self.tmp / f"{name}.log"

    def serve(
        self,
        crash_at: str | None = None,
        *,
        workers: int = 1,
        cli: Sequence[str] = CLI,
        events: bool = True,
        cwd: Path = PROJECT_ROOT,
        **extra: str,
    ) -> Proc:
        """Start `serve` (in `cwd`); with `events`, the stand-in's clicks go to it from now on."""
        name, log = self._log("serve")
        port = free_port()
        args = [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)]
        args += ["--workers", str(workers)]
        proc = Proc(name, args, self.env(crash_at, **extra), log, port, cwd=cwd)
        self.procs.append(proc)
        if events:
            self.standin.events_url = proc.events_url
        return proc

    def worker(
        self, crash_at: str | None = None, *, cli: Sequence[str] = CLI, **extra: str
    ) -> Proc:
        name, log = self._log("worker")
        proc = Proc(name, [*cli, "worker"], self.env(crash_at, **extra), log, None)
        self.procs.append(proc)
        return proc

    async def ready(self, *procs: Proc, within: float = 30.0) -> None:
        """Each serve answers /readyz 200 (Redis reachable); each worker logged its start."""
        for proc in procs:
            if proc.port:

                async def healthy(p: Proc = proc) -> bool:
                    async with self.http.get(f"{p.url}/readyz") as resp:
                        return resp.status == 200

                await until(f"{proc.name} ready", healthy, within=within, watch=[proc])
            else:

                async def started(p: Proc = proc) -> bool:
                    return "countersign worker started" in p.log.read_text(errors="replace")

                await until(f"{proc.name} started", started, within=within, watch=[proc])

    # -- HTTP API ---------------------------------------------------------------------------
    async def start_run(
        self,
        via: Proc,
        agent: str = "refund-agent",
        text: str = "refund order 123",
        requested_by: str = REQUESTER,
    ) -> str:
        body = {"agent": agent, "input": text, "requested_by": requested_by}
        async with self.http.post(f"{via.url}/api/v1/runs", json=body, headers=AUTH) as resp:
            assert resp.status == 202, await resp.text()
            run_id: str = (await resp.json())["run_id"]
        return run_id

    async def webhook(
        self, via: Proc, request_id: str, decision: str = "approved", decided_by: str = REVIEWER
    ) -> tuple[int, dict[str, Any]]:
        raw = json.dumps(
            {"requestId": request_id, "decision": decision, "decidedBy": decided_by}
        ).encode()
        signature = webhook_signature(raw, WEBHOOK_SECRET)
        headers = {"X-Webhook-Signature": signature, "Content-Type": "application/json"}
        url = f"{via.url}/api/v1/webhooks/approval-response"
        async with self.http.post(url, data=raw, headers=headers) as resp:
            return resp.status, await resp.json()

    # -- Slack stand-in -------------------------------------------------------------------
    async def click(
        self,
        user: str,
        request: ApprovalRequest,
        action_id: str = blocks.APPROVE,
        *,
        via: Proc | None = None,
        ts: str | None = None,
    ) -> tuple[AppReply, float]:
        """A signed click through the stand-in (to `via`'s /slack/events); reply and seconds."""
        if via is not None:
            self.standin.events_url = via.events_url
        started = time.monotonic()
        reply = await self.standin.click(
            user, request.message_channel, ts or request.message_ts, action_id
        )
        return reply, time.monotonic() - started

    async def at_once(self, *sends: tuple[Proc, Callable[[], Awaitable[AppReply]]]) -> list[Any]:
        """Interactions sent concurrently, each to its own replica's /slack/events.

        The stand-in reads its `events_url` when it sends; each send is started (and allowed
        to reach its first await, past that read) before the URL is switched for the next.
        Returns each reply, or the exception it raised.
        """
        tasks = []
        for via, send in sends:
            self.standin.events_url = via.events_url
            tasks.append(asyncio.ensure_future(send()))
            await asyncio.sleep(0)
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    def top_level_posts(self, channel: str = APPROVALS) -> list[Any]:
        """Messages the stand-in accepted at the top level of `channel` (approval messages)."""
        return [
            m
            for m in self.standin.workspace.messages
            if m.channel == channel and m.thread_ts in (None, m.ts)
        ]

    def thread_replies(self, channel: str, ts: str) -> list[Any]:
        return [
            m
            for m in self.standin.workspace.messages
            if m.channel == channel and m.thread_ts == ts and m.ts != ts
        ]

    def ephemerals(self, user: str) -> list[str]:
        return [e.text for e in self.standin.workspace.ephemerals if e.user == user]

    def message(self, channel: str, ts: str) -> Any:
        found = self.standin.workspace.message(channel, ts)
        assert found is not None, f"no message {channel}/{ts} in the stand-in"
        return found

    # -- the Redis server -------------------------------------------------------------------
    async def kill_redis(self) -> None:
        """SIGKILL the Redis server (only what its AOF fsynced survives)."""
        self.redis_server.kill()
        await self.redis.connection_pool.disconnect()

    async def start_redis(self) -> None:
        """Start it again on the same port and dir (the AOF is replayed)."""
        with SPAWN_LOCK:
            self.redis_server.start()
        await self.redis.connection_pool.disconnect()

    # -- Redis probes -----------------------------------------------------------------------
    async def request(self, request_id: str) -> ApprovalRequest:
        found = await self.store.get_request(request_id)
        assert found is not None, f"request {request_id} is gone from Redis"
        return found

    async def run_info(self, run_id: str) -> RunRecord:
        info = await self.store.run_info(run_id)
        assert info is not None, f"run {run_id} does not exist"
        return info

    async def only_request(
        self, run_id: str, *, posted: bool = False, **wait: Any
    ) -> ApprovalRequest:
        """Wait until the run has its (single) request, saved with its message ts if `posted`."""

        async def found() -> ApprovalRequest | None:
            requests = await self.store.run_requests(run_id)
            if len(requests) == 1 and (requests[0].message_ts or not posted):
                return requests[0]
            return None

        what = f"run {run_id}'s request" + (" posted" if posted else "")
        return await until(what, found, **wait)

    async def run_reaches(self, run_id: str, *statuses: str, **wait: Any) -> RunRecord:
        async def reached() -> RunRecord | None:
            info = await self.run_info(run_id)
            return info if info.status in statuses else None

        return await until(f"run {run_id} to be {'/'.join(statuses)}", reached, **wait)

    async def terminal_events(self, request_id: str) -> list[dict[str, str]]:
        """The audit entries that decided `request_id` (there must be exactly one)."""
        return [
            e
            for e in await self.store.audit(request_id)
            if e.get("request_id") == request_id and e.get("event") in TERMINAL
        ]

    async def indexed(self, request_id: str) -> tuple[bool, bool]:
        """Is the request in its shard's pending index, and in its deadlines?"""
        shard = K.Keys(request_id).shard
        pending = await self.redis.zscore(shard.pending, request_id)
        deadline = await self.redis.zscore(shard.deadlines, request_id)
        return pending is not None, deadline is not None

    async def resume_entries(self, run_id: str) -> list[dict[str, str]]:
        """The `resume` (not `start`) entries of the run's shard's resume stream, for it."""
        entries: Any = await self.redis.xrange(K.Keys(run_id).shard.resume)
        out = []
        for _, raw in entries:
            fields = {as_text(k): as_text(v) for k, v in raw.items()}
            if fields.get("type") == "resume" and fields.get("run_id") == run_id:
                out.append(fields)
        return out

    def refunds(self) -> list[dict[str, Any]]:
        return self.effects("refund")

    def effects(self, kind: str) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        events = [json.loads(line) for line in self.journal.read_text().splitlines() if line]
        return [e for e in events if e["kind"] == kind]

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.procs)


def make_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_file(path: Path, text: str) -> Path:
    """For set-up files (a routes file) written from async scenarios."""
    make_dir(path.parent)
    path.write_text(text)
    return path


@asynccontextmanager
async def world(
    tmp: Path,
    *,
    appendfsync: AppendFsync = "always",
    rate_limit: float | None = None,
    middlewares: Sequence[Any] = (),
    env: Mapping[str, str] | None = None,
    **more_env: str,
) -> AsyncIterator[World]:
    """Start a dedicated redis-server and the stand-in; stop everything started, on exit.

    `middlewares` are added to the stand-in's aiohttp app before it starts (fault shapes
    its FaultQueue cannot express, such as "applied, then the answer is late")."""
    make_dir(tmp)
    with SPAWN_LOCK:
        server = RedisServer(tmp / "redis", appendfsync=appendfsync).start()
    standin = SlackStandIn(
        open_workspace(tmp / "slack"),
        token=SLACK_TOKEN,
        signing_secret=SIGNING_SECRET,
        rate_limit_per_channel=rate_limit,
    )
    standin.app.middlewares.extend(middlewares)
    redis: Redis | None = None
    http: aiohttp.ClientSession | None = None
    w: World | None = None
    try:
        await standin.start()
        keys = generate_key("faults")
        journal = tmp / "effects.jsonl"
        base = inherited_env()
        base |= {
            "PYTHONUNBUFFERED": "1",
            "REDIS_URL": server.url,
            "SLACK_API_URL": standin.url,
            "SLACK_BOT_TOKEN": SLACK_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "COUNTERSIGN_API_TOKEN": API_TOKEN,
            "COUNTERSIGN_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "COUNTERSIGN_ENCRYPTION_KEYS": keys,
            "COUNTERSIGN_DATA_DIR": str(tmp / "data"),
            "COUNTERSIGN_AGENTS": "agent_host.examples:default_registry",
            "COUNTERSIGN_EXAMPLE_JOURNAL": str(journal),
            "COUNTERSIGN_DEFAULT_CHANNEL": APPROVALS,
            "COUNTERSIGN_ADMINS": ADMIN,
            **(env or {}),
            **more_env,
        }
        redis = Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
        store = RunStore(redis, KeyRing.parse(keys), FixedRouter(APPROVALS))
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        w = World(tmp, server, standin, redis, store, http, keys, journal, base)
        yield w
    finally:
        if w is not None:
            for proc in w.procs:
                with contextlib.suppress(Exception):
                    proc.stop()
        if http is not None:
            await http.close()
        if redis is not None:
            await redis.aclose()
        await standin.stop()
        server.stop()


# -- scenarios run concurrently ---------------------------------------------------------------

Scenario = Callable[[Path], Coroutine[Any, Any, Any]]


@contextmanager
def run_concurrently(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scenarios: Mapping[str, tuple[Scenario, float]],
    *,
    max_workers: int = 3,
) -> Iterator[dict[str, concurrent.futures.Future[Any]]]:
    """Start, in threads (one event loop each), the scenarios that the tests of this module
    selected in this session (their `scenario` parameter), the longest (estimate) first.

    The scenarios mostly wait (on reclaim timers, Slack client timeouts), so running them
    side by side keeps the suite short; each test then collects its own scenario's result,
    or its exception, with `future.result()`.
    """
    wanted: list[str] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None:
            key = callspec.params.get("scenario")
            if key in scenarios and key not in wanted:
                wanted.append(key)
    wanted.sort(key=lambda key: -scenarios[key][1])
    pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="scenario")

    def run(key: str, tmp: Path) -> Any:
        return asyncio.run(scenarios[key][0](tmp))

    futures = {}
    for key in wanted:
        tmp = tmp_path_factory.mktemp(re.sub(r"[^\w.-]+", "-", key)[:40])
        futures[key] = pool.submit(run, key, tmp)
    try:
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class CallLog:
    """An aiohttp middleware for the stand-in: when (monotonic) each Web API call arrived and
    what it answered, so a test can check e.g. that Retry-After was waited out."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int]] = []

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.monotonic()
        response: web.StreamResponse = await handler(request)
        if request.path.startswith("/api/"):
            method = request.path.removeprefix("/api/")
            self.calls.append((method, started, response.status))
        return response

    def of(self, method: str) -> list[tuple[float, int]]:
        return [(at, status) for name, at, status in self.calls if name == method]


class LateAnswer:
    """An aiohttp middleware for the stand-in: the next `times` calls of `method` are
    *applied* and then answered only after `delay` s, longer than the bot's client timeout.
    That is "Slack accepted, the answer was lost", which the stand-in's FaultQueue (whose
    faults are never applied) cannot express: the case where at-least-once is unavoidable."""

    def __init__(self, method: str, delay: float, times: int = 1) -> None:
        self.method, self.delay, self.left = method, delay, times
        self.applied = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        late = self.left > 0 and request.path == f"/api/{self.method}"
        if late:
            self.left -= 1
        response: web.StreamResponse = await handler(request)
        if late:
            self.applied += 1
            await asyncio.sleep(self.delay)
        return response


class RedisProxy:
    """A TCP proxy in front of a Redis server, in the test's event loop.

    `hold_reply_to(marker, seconds)`: the next command containing `marker` (e.g. a script's
    SHA in its EVALSHA) is forwarded at once, so Redis executes it, but the reply on that
    connection is held back `seconds`: a network stall *after* the write, which a client-side
    timeout cannot tell from one before it.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._marker: bytes | None = None
        self._hold = 0.0
        self.held = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> RedisProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def hold_reply_to(self, marker: bytes, seconds: float) -> None:
        self._marker, self._hold = marker, seconds

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        hold_until = [0.0]

        async def upstream() -> None:
            while data := await reader.read(65536):
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    self.held += 1
                    hold_until[0] = time.monotonic() + self._hold
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                wait = hold_until[0] - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)


# -- one long scenario started early, in the background ---------------------------------------

_EARLY: dict[str, concurrent.futures.Future[Any]] = {}
_EARLY_POOL: list[concurrent.futures.ThreadPoolExecutor] = []
EARLY_STOP = threading.Event()  # set at session end: a background scenario stops early


def start_early(key: str, scenario: Scenario, tmp: Path) -> concurrent.futures.Future[Any]:
    """Start `scenario` in a background thread (once per session) and return its future."""
    if key not in _EARLY:
        if not _EARLY_POOL:
            _EARLY_POOL.append(concurrent.futures.ThreadPoolExecutor(2, "early"))
        _EARLY[key] = _EARLY_POOL[0].submit(lambda: asyncio.run(scenario(tmp)))
    return _EARLY[key]


def stop_early() -> None:
    EARLY_STOP.set()
    for pool in _EARLY_POOL:
        pool.shutdown(wait=True, cancel_futures=True)
    _EARLY_POOL.clear()
