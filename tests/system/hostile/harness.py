"""Shared harness of the hostile tests: a whole countersign stack on loopback, run in a
thread of its own, with a fixed cast of approval requests; raw HTTP; Slack and webhook
signing; and a snapshot of everything a request could change.

The stack is the one of ``tests/support/stack.py`` (real Redis, the Slack stand-in, Bolt, the
HTTP API, workers, sweeper, outbox). It runs in a background thread with its own event loop,
so the tests themselves are plain synchronous Hypothesis tests that talk to it over real
sockets, exactly as Slack, a webhook caller or an API client would. Coroutines that need
the stack's objects (snapshots, seeding) are handed to its loop with :meth:`Hostile.run`.

The snapshot covers every Redis key of the database (strings, hashes, lists, sets, sorted
sets; streams by length and last id, so consumer-group bookkeeping is not mistaken for a
change), the stand-in's messages and views, and every ``chat.*`` / ``views.*`` call the bot
made except ``chat.postEphemeral``: an ephemeral reply to the clicker ("not allowed",
"already decided") is how the contract says a refused click is answered, and it changes
nothing anyone else sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp.helpers import parse_content_type
from hypothesis import HealthCheck, settings
from multidict import CIMultiDict
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from agent_host.approvals import ApprovalRequest
from agent_host.durable.route_book import parse_spec
from agent_host.runtime.decisions import Approve
from bot import blocks
from slack_sandbox import workspace_to_dict
from tests.support import signing
from tests.support.signing import FORM, Header
from tests.support.stack import (
    ADMIN,
    API_TOKEN,
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

__all__ = [
    "ADMIN",
    "API_TOKEN",
    "CHANNEL",
    "OPS",
    "OUTSIDER",
    "REQUESTER",
    "REVIEWER",
    "REVIEWER2",
    "SECRET",
    "TEAM",
    "WEBHOOK_SECRET",
    "Cast",
    "Hostile",
    "Reply",
    "Snapshot",
    "bolt_crashes_before_verifying",
    "fuzz_settings",
    "http",
    "total",
]

T = TypeVar("T")

WEBHOOK_SECRET = "hostile-webhook-secret"
TEAM = "T0SANDBOX"  # the stand-in's team (slack_sandbox/seed.py)
GENERAL = "C0GENERAL"
REDIS_DB = 7  # the hostile stacks' own database: the shared fixtures flush database 0
BUTTONS = (blocks.APPROVE, blocks.APPROVE_ALWAYS, blocks.REJECT, blocks.ANSWER)


_TRIGGERS = itertools.count(1)


def _trigger_id(kind: int) -> str:
    """A trigger id of its own for every payload, as Slack gives (a request sent again is
    a replay, ignored: the same body twice in one second would be one)."""
    return f"{int(time.time())}.{kind}{next(_TRIGGERS)}.hostile"


def fuzz_settings(max_examples: int) -> settings:
    """Moderate, reproducible fuzzing: the same examples on every run, no example database.

    Set HOSTILE_FUZZ_RANDOM=1 to explore with fresh random examples instead.
    """
    explore = os.environ.get("HOSTILE_FUZZ_RANDOM") == "1"
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=not explore,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,  # `before`: one baseline per test, on purpose
        ],
    )


# -- raw HTTP ------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str:
        return (self.headers.get(name.lower()) or [""])[0]

    @property
    def content_type(self) -> str:
        return self.header("content-type").split(";")[0].strip()

    def json(self) -> Any:
        return json.loads(self.body)

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.body[:300]!r}"

    __repr__ = __str__


def _bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def http(
    base_url: str,
    method: str,
    target: str,
    headers: Iterable[Header] = (),
    body: bytes = b"",
    *,
    chunked: bool = False,
    timeout: float = 10.0,
) -> Reply:
    """One HTTP/1.1 request over a fresh socket, with full control over its bytes: headers
    may repeat or carry any byte, and the body is sent as given (Content-Length, or chunked)."""
    url = urllib.parse.urlsplit(base_url)
    lines = [f"{method} {target} HTTP/1.1".encode(), f"Host: {url.netloc}".encode()]
    lines += [_bytes(k) + b": " + _bytes(v) for k, v in headers]
    lines.append(b"Connection: close")
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
        step = 16 * 1024
        payload = b"".join(
            f"{len(body[i : i + step]):x}\r\n".encode() + body[i : i + step] + b"\r\n"
            for i in range(0, len(body), step)
        )
        payload += b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}".encode())
        payload = body
    raw = b"\r\n".join(lines) + b"\r\n\r\n" + payload
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        # The server may answer early (413) and close: then read what it said.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(raw)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return _parse_reply(b"".join(chunks))


def _parse_reply(data: bytes) -> Reply:
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise AssertionError(f"no HTTP response: {data[:200]!r}")
    headers: dict[str, list[str]] = {}
    for line in header_lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    body = rest
    if "chunked" in (headers.get("transfer-encoding") or [""])[0]:
        body, rest = b"", rest
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
    elif "content-length" in headers:
        body = rest[: int(headers["content-length"][0])]
    return Reply(int(parts[1]), headers, body)


# -- signing -------------------------------------------------------------------------------


# The shared signing helpers (tests/support/signing.py) with this stack's secrets by default.


def slack_headers(
    body: bytes, *, at: int | None = None, secret: str = SECRET, content_type: str = FORM
) -> list[Header]:
    return signing.slack_headers(body, secret, at=at, content_type=content_type)


def webhook_signature(body: bytes, secret: str = WEBHOOK_SECRET) -> str:
    return signing.webhook_signature(body, secret)


def bearer(token: str = API_TOKEN) -> Header:
    return signing.bearer(token)


# -- Slack request bodies (the shapes Slack documents; see slack_sandbox/payloads.py) --------


def click_payload(
    user: str,
    channel: str | None,
    message_ts: str,
    action_id: str,
    value: Any,
    *,
    team: str = TEAM,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": "A0SANDBOX",
        "token": "sandbox-verification-token",
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": _trigger_id(1),
        "team": {"id": team, "domain": "countersign-sandbox"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "approvals"},
        "message": {"type": "message", "ts": message_ts, "text": "Approval needed"},
        "state": {"values": {}},
        "response_url": "https://hooks.slack.invalid/actions/T0SANDBOX/1/hostile",
        "actions": [
            {
                "action_id": action_id,
                "block_id": f"actions:{value}",
                "text": {"type": "plain_text", "text": "Approve", "emoji": True},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    if channel is None:
        del payload["channel"]
        del payload["container"]["channel_id"]
    return payload


def click_for(request: ApprovalRequest, user: str, action_id: str = blocks.APPROVE) -> bytes:
    """The body Slack would send when `user` clicks `action_id` on `request`'s message."""
    return payload_body(
        click_payload(
            user, request.message_channel, request.message_ts, action_id, request.request_id
        )
    )


def submission_payload(user: str, callback_id: str, private_metadata: Any, text: str) -> Any:
    block, field_ = (
        (blocks.ANSWER_BLOCK, blocks.ANSWER_INPUT)
        if callback_id == blocks.ANSWER_MODAL
        else (blocks.REASON_BLOCK, blocks.REASON_INPUT)
    )
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "countersign-sandbox"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM},
        "api_app_id": "A0SANDBOX",
        "token": "sandbox-verification-token",
        "trigger_id": _trigger_id(2),
        "view": {
            "id": "V0HOSTILE",
            "type": "modal",
            "callback_id": callback_id,
            "private_metadata": private_metadata,
            "state": {"values": {block: {field_: {"type": "plain_text_input", "value": text}}}},
        },
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_fields(user: str, channel: str, text: str, command: str = "/approvals") -> dict[str, str]:
    return {
        "token": "sandbox-verification-token",
        "team_id": TEAM,
        "team_domain": "countersign-sandbox",
        "channel_id": channel,
        "channel_name": "approvals",
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": "A0SANDBOX",
        "is_enterprise_install": "false",
        "response_url": "https://hooks.slack.invalid/commands/T0SANDBOX/1/hostile",
        "trigger_id": _trigger_id(3),
    }


def form_body(fields: Mapping[str, str]) -> bytes:
    return urllib.parse.urlencode(fields).encode()


def payload_body(payload: Any) -> bytes:
    return form_body({"payload": json.dumps(payload, separators=(",", ":"))})


def bolt_crashes_before_verifying(body: bytes, headers: Iterable[Header]) -> bool:
    """Would `POST /slack/events` fall over before (or while) checking the signature?

    A replica of what bot/wiring.py and Bolt do with a request before the signature is
    known to be good: decode the body with the Content-Type charset (aiohttp's
    ``request.text()``), parse it (``AsyncBoltRequest``: JSON, or a form whose ``payload``
    is JSON), then ``int()`` the timestamp header and ``hmac.compare_digest`` the signature
    header as text. Any exception there is a 500 today (see the BUG tests); the fuzz tests
    tolerate a 5xx exactly where this says so, and nowhere else.
    """
    multi: CIMultiDict[str] = CIMultiDict()
    for name, value in headers:
        multi.add(
            _bytes(name).decode("utf-8", "surrogateescape"),
            _bytes(value).decode("utf-8", "surrogateescape"),
        )
    raw_type = multi.get("Content-Type")
    charset = parse_content_type(raw_type)[1].get("charset") if raw_type is not None else None
    try:
        text = body.decode(charset or "utf-8")
        request = AsyncBoltRequest(body=text, query="", headers=multi)  # type: ignore[arg-type]
    except Exception:
        return True
    if request.body.get("ssl_check") == "1":
        return False  # answered before the signature is looked at
    timestamp = request.headers.get("x-slack-request-timestamp", ["0"])[0]
    signature = request.headers.get("x-slack-signature", [""])[0]
    try:
        SignatureVerifier(SECRET).is_valid(text, timestamp, signature)
    except Exception:
        return True
    return False


# -- the stack, its cast and its snapshots -------------------------------------------------


@dataclass
class Cast:
    """The approval requests every hostile test aims at.

    - ``open``: refund-agent's `issue_refund`, default route in #approvals: anyone in the
      channel may decide it, except its requester.
    - ``guarded``: cleanup-agent's `delete_file`, routed to #ops with reviewers=[U0REVIEWER].
    - ``question``: support-agent's `ask_operator`, default route (a question, answered).
    - ``decided``: a refund already approved by U0REVIEWER; its run has succeeded.
    """

    open: ApprovalRequest
    guarded: ApprovalRequest
    question: ApprovalRequest
    decided: ApprovalRequest

    @property
    def pending(self) -> list[ApprovalRequest]:
        return [self.open, self.guarded, self.question]

    @property
    def all(self) -> list[ApprovalRequest]:
        return [*self.pending, self.decided]


class Snapshot(dict[str, Any]):
    """Everything a request could change (see the module's docstring)."""

    def __repr__(self) -> str:  # short: Hypothesis prints fixtures with a failing example
        return f"Snapshot({len(self)} entries)"


async def snapshot(stack: Stack) -> Snapshot:
    redis = stack.host.redis
    state = Snapshot()
    # Each signed request leaves a marker that it was taken (the replay guard): bookkeeping
    # of the request itself, not a change it made.
    taken = b":seen:slack-request:"
    keys = sorted([key async for key in redis.scan_iter(count=1000) if taken not in key])
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        kinds = [kind.decode() for kind in await pipe.execute()]
    readers = {
        "string": lambda p, k: p.get(k),
        "hash": lambda p, k: p.hgetall(k),
        "list": lambda p, k: p.lrange(k, 0, -1),
        "set": lambda p, k: p.smembers(k),
        "zset": lambda p, k: p.zrange(k, 0, -1, withscores=True),
        "stream": lambda p, k: p.xrevrange(k, count=1),
    }
    async with redis.pipeline(transaction=False) as pipe:
        for key, kind in zip(keys, kinds, strict=True):
            readers.get(kind, lambda p, k: p.exists(k))(pipe, key)
            if kind == "stream":
                pipe.xlen(key)
        results = iter(await pipe.execute())
    for key, kind in zip(keys, kinds, strict=True):
        value: Any = next(results)
        if kind == "hash":
            value = sorted(value.items())
        elif kind == "set":
            value = sorted(value)
        elif kind == "stream":  # length and last id: consumer-group bookkeeping is no change
            value = (next(results), value[0][0] if value else None)
        state[f"redis {kind} {key.decode(errors='replace')}"] = value
    workspace = workspace_to_dict(stack.standin.workspace)
    state["slack messages"] = workspace["messages"]
    state["slack views"] = workspace["views"]
    # Calls that change what Slack shows: not ephemeral answers, nor chat.getPermalink, a
    # read (whether a listing asks for a link depends on what the process has cached).
    state["slack calls"] = [
        (method, json.dumps(params, sort_keys=True, default=str))
        for method, params in stack.standin.calls
        if method.startswith(("chat.", "views."))
        and method not in ("chat.postEphemeral", "chat.getPermalink")
    ]
    return state


def total(state: Snapshot, kind: str, suffix: str) -> int:
    """Entries of all `kind` keys ending in `suffix` ("stream", ":resume" counts resume entries
    over every shard), so that checks do not depend on how keys are laid out."""
    found = 0
    for key, value in state.items():
        if key.startswith(f"redis {kind} ") and key.endswith(suffix):
            found += value[0] if kind == "stream" else len(value)
    return found


def diff(before: Snapshot, after: Snapshot) -> list[str]:
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            changes.append(f"removed: {key}")
        elif key not in before:
            changes.append(f"added: {key} = {str(after[key])[:300]}")
        elif before[key] != after[key]:
            if key == "slack calls":
                new = after[key][len(before[key]) :]
                changes.append(f"changed: {key}: new calls {str(new)[:600]}")
            else:
                changes.append(
                    f"changed: {key}: {str(before[key])[:300]} -> {str(after[key])[:300]}"
                )
    return changes


@dataclass(repr=False)
class Hostile:
    """The running stack, seen from a test's thread."""

    stack: Stack
    cast: Cast
    loop: asyncio.AbstractEventLoop
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(16))

    def __repr__(self) -> str:  # short: Hypothesis prints it with every failing example
        return f"Hostile({self.url})"

    @property
    def url(self) -> str:
        return self.stack.url

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def snapshot(self) -> Snapshot:
        return self.run(snapshot(self.stack))

    def assert_unchanged(self, before: Snapshot, what: object = "") -> None:
        changes = diff(before, self.snapshot())
        assert not changes, f"state changed after {what}:\n" + "\n".join(changes)

    def settle(self, within: float = 15.0) -> Snapshot:
        """Wait until background work is done and two snapshots agree; return the last."""
        deadline = time.monotonic() + within
        self.run(self.stack.bot.tasks.drain(within=30))
        previous = self.snapshot()
        while True:
            time.sleep(0.1)
            self.run(self.stack.bot.tasks.drain(within=30))
            current = self.snapshot()
            if current == previous:
                return current
            if time.monotonic() > deadline:
                raise AssertionError(
                    "the stack did not settle:\n" + "\n".join(diff(previous, current))
                )
            previous = current

    def request(self, request_id: str) -> ApprovalRequest | None:
        return self.run(self.stack.host.store.get_request(request_id))

    def new_pending(
        self, agent: str = "refund-agent", text: str = "refund order 123"
    ) -> ApprovalRequest:
        """A fresh pending request (posted to Slack), for tests that decide legitimately."""

        async def make() -> ApprovalRequest:
            run_id = await self.stack.start_run(agent, text, REQUESTER)
            [request] = await self.stack.pending_requests(run_id)
            return request

        return self.run(make())

    def ephemerals(self, user: str) -> list[str]:
        async def read() -> list[str]:
            await self.stack.bot.tasks.drain(within=30)
            return self.stack.ephemerals(user)

        return self.run(read())

    def slack(self, body: bytes, headers: Iterable[Header]) -> Reply:
        return http(self.url, "POST", "/slack/events", headers, body)

    def parallel(self, calls: list[Any]) -> list[Reply]:
        """Run the given zero-argument callables at once, from a thread pool."""
        return list(self.pool.map(lambda f: f(), calls))


async def _build_cast(stack: Stack) -> Cast:
    stack.host.notifier.pacer.interval = 0.0  # type: ignore[attr-defined]  # no 1 msg/s pacing
    await stack.bot.routes.add(
        parse_spec(f"agent=cleanup-agent channel={OPS} reviewers={REVIEWER}"), ADMIN
    )
    runs = [
        await stack.start_run("refund-agent", "refund order 123", REQUESTER),
        await stack.start_run("cleanup-agent", "delete /tmp/hostile.txt", REQUESTER),
        await stack.start_run("support-agent", "Can I pay in euros?", REQUESTER),
        await stack.start_run("refund-agent", "refund order 123", REQUESTER),
    ]
    found = [(await stack.pending_requests(run_id))[0] for run_id in runs]
    open_, guarded, question, to_decide = found
    assert guarded.message_channel == OPS and open_.message_channel == CHANNEL
    result = await stack.host.store.decide(
        to_decide.request_id, Approve(decided_by=REVIEWER, call_hash=to_decide.call_hash)
    )
    assert result.outcome == "decided", result
    await stack.run_status(to_decide.run_id, "succeeded")
    decided = await eventually(lambda: _decided_and_updated(stack, to_decide))
    return Cast(open_, guarded, question, decided)


async def _decided_and_updated(stack: Stack, request: ApprovalRequest) -> ApprovalRequest | None:
    current = await stack.host.store.get_request(request.request_id)
    if current is None or not current.decided or not stack.standin.calls_to("chat.update"):
        return None
    return current


def _database_url(url: str, db: int) -> str:
    if "?db=" in url:
        return url.split("?db=")[0] + f"?db={db}"
    return url.rsplit("/", 1)[0] + f"/{db}"


@contextmanager
def hostile_stack(redis_server_url: str, tmp_path: Path) -> Iterator[Hostile]:
    """A running stack with its cast, in a thread of its own; stopped on exit."""
    import redis as redis_sync

    url = _database_url(redis_server_url, REDIS_DB)
    with redis_sync.Redis.from_url(url) as client:
        client.flushdb()
    ready: Any = {}
    started = threading.Event()

    async def main() -> None:
        try:
            async with running_stack(
                url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=WEBHOOK_SECRET
            ) as stack:
                stop = asyncio.Event()
                ready["stop"] = stop
                ready["hostile"] = Hostile(
                    stack, await _build_cast(stack), asyncio.get_running_loop()
                )
                started.set()
                await stop.wait()
        except BaseException as exc:
            ready["error"] = exc
            started.set()
            raise

    def thread_main() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported through `ready`
            ready.setdefault("error", exc)

    thread = threading.Thread(target=thread_main, name="hostile-stack", daemon=True)
    thread.start()
    started.wait(60)
    if "hostile" not in ready:
        thread.join(10)
        raise RuntimeError("the hostile stack did not start") from ready.get("error")
    hostile: Hostile = ready["hostile"]
    try:
        yield hostile
    finally:
        hostile.pool.shutdown(wait=True)
        hostile.loop.call_soon_threadsafe(ready["stop"].set)
        thread.join(30)
        if "error" in ready:
            raise RuntimeError("the hostile stack failed") from ready["error"]
