"""Decision callbacks: a decided external request's decision, POSTed to its callback URL.

DECIDE queues one entry on the shard's `callbacks` stream in the same step as the decision,
so a crash loses none; this consumer group delivers it at least once. Each POST is signed:

    X-Countersign-Timestamp: <unix seconds>
    X-Countersign-Delivery:  <delivery id, the same on every retry of one delivery>
    X-Countersign-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>",
                                     keyed by COUNTERSIGN_WEBHOOK_SECRET>

A 2xx answer delivers it. Anything else is retried with exponential backoff: the entry is
re-queued with its next attempt and the time before which it waits, in one MULTI with the
acknowledgement of the old one. After `attempts` failures, or when the host is no longer
on COUNTERSIGN_CALLBACK_HOSTS, the delivery goes to the shard's dead-letter stream
(`GET /api/v1/callbacks/dead`, `countersign_callbacks_total` in /metrics). So does one
whose entry failed `poison.POISON_AFTER` times with an error of countersign's own.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from agent_host.approvals.callback_hosts import (
    CALLBACK_HOSTS_VAR,
    callback_refusal,
    parse_callback_hosts,
    unroutable,
)
from agent_host.approvals.external import external_view
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.poison import POISON_AFTER, TRANSIENT
from agent_host.durable.store import RunStore
from agent_host.durable.streams import RetryLater, ShardedConsumer, StreamConsumer
from agent_host.durable.suspects import SuspectGate
from agent_host.settings import Settings

__all__ = [
    "AiohttpSender",
    "CallbackDelivery",
    "CallbackSender",
    "RoutableOnly",
    "dead_callbacks",
    "sign_callback",
]

log = logging.getLogger(__name__)

DEAD_KEPT = 10_000  # per shard; older dead letters are trimmed
SEND_TIMEOUT = 10.0  # seconds for one POST
# Callbacks of all shards sent at once; a backlog never takes more of the Redis client's
# connections than this (see outbox.IN_FLIGHT), and a slow receiver holds up one each.
IN_FLIGHT = 256


class CallbackSender(Protocol):
    async def send(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST `body`; the HTTP status, or an exception if there was no answer."""
        ...


class RoutableOnly(AbstractResolver):
    """aiohttp's resolver, keeping only the addresses a listed host name may lead to
    (`callback_hosts.unroutable`). aiohttp connects to the addresses its resolver answers,
    so a name pointed elsewhere between this check and the connection changes nothing. (An
    address written in the URL is not resolved: it is on the list itself.)"""

    def __init__(self) -> None:
        self._resolver = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        kept = [address for address in found if not unroutable(address["host"])]
        if not kept:
            where = ", ".join(sorted({address["host"] for address in found}))
            raise OSError(  # (aiohttp's error shows the strerror)
                errno.EPERM,
                f"{host} resolves to {where}, where a listed name may not lead: list the "
                f"address itself in {CALLBACK_HOSTS_VAR} to allow it",
            )
        return kept

    async def close(self) -> None:
        await self._resolver.close()


class AiohttpSender:
    """POSTs with aiohttp; redirects are not followed (a listed host may not send the
    signed decision on to one that is not), nor names pointing at loopback and the like
    (`RoutableOnly`)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def send(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        if self._session is None:
            connector = aiohttp.TCPConnector(resolver=RoutableOnly())
            self._session = aiohttp.ClientSession(connector=connector)
        async with self._session.post(
            url,
            data=body,
            headers=headers | {"Content-Type": "application/json"},
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT),
        ) as resp:
            return resp.status

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def delivery_of(request_id: str) -> str:
    """The id of a request's decision callback, the same for each attempt: a request is
    decided once, so it names one delivery (a stream entry's id would not: each shard's
    stream numbers its own, and two shards' entries can share one)."""
    return f"dlv_{request_id}"


def sign_callback(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class CallbackDelivery:
    def __init__(
        self,
        store: RunStore,
        settings: Settings,
        sender: CallbackSender,
        consumer: str,
        *,
        attempts: int = 8,
        backoff: float = 2.0,
        idle_ms: int = 5_000,
        clock: Callable[[], float] = time.time,
        gate: SuspectGate | None = None,
    ) -> None:
        self.store, self.settings, self.sender = store, settings, sender
        self.attempts, self.backoff, self.clock = attempts, backoff, clock
        in_flight = asyncio.Semaphore(IN_FLIGHT)
        shared_gate = gate if gate is not None else SuspectGate()  # its shards share it
        self.consumer = ShardedConsumer(
            [
                StreamConsumer(
                    store.redis,
                    shard.callbacks,
                    K.CALLBACK_GROUP,
                    consumer,
                    self.handle,
                    idle_ms=idle_ms,
                    count=50,
                    concurrent=True,  # one slow receiver must not hold up the others, nor
                    # those whose decisions come after (it finishes behind the poll)
                    in_flight=in_flight,
                    give_up=self._give_up,
                    gate=shared_gate,
                )
                for shard in K.shards()
            ]
        )

    async def handle(self, entry_id: str, fields: dict[str, str]) -> None:
        if float(fields.get("not_before") or 0) > self.clock():
            raise RetryLater("its backoff has not passed yet")
        request = await self.store.get_request(fields.get("request_id", ""))
        if request is None or not request.callback_url:
            return
        delivery_id = fields.get("delivery_id") or delivery_of(request.request_id)
        attempt = int(fields.get("attempt") or 1)
        allowed = parse_callback_hosts(self.settings.callback_hosts)
        if refusal := callback_refusal(request.callback_url, allowed):
            await self._dead(fields, delivery_id, attempt, f"not sent: {refusal}")
            return
        secret = self.settings.webhook_secret
        if not secret:
            reason = "not sent: COUNTERSIGN_WEBHOOK_SECRET is unset, so it cannot be signed"
            await self._dead(fields, delivery_id, attempt, reason)
            return
        # The delivery id goes in the signed body: a receiver deduplicating by it cannot be
        # fooled by a captured delivery sent again under another id.
        view = external_view(request) | {"delivery_id": delivery_id}
        body = json.dumps(view, separators=(",", ":")).encode()
        timestamp = int(self.clock())
        headers = {
            "X-Countersign-Timestamp": str(timestamp),
            "X-Countersign-Delivery": delivery_id,
            "X-Countersign-Signature": sign_callback(secret, timestamp, body),
        }
        try:
            status = await self.sender.send(request.callback_url, body, headers)
            error = "" if 200 <= status < 300 else f"answered HTTP {status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = f"no answer ({type(exc).__name__}: {exc})"
        metrics = K.Keys(request.request_id).shard.metrics
        if not error:
            await self.store.redis.hincrby(metrics, "callbacks:delivered", 1)
            return
        log.info("callback %s of %s failed: %s", delivery_id, request.request_id, error)
        if attempt >= self.attempts:
            await self._dead(fields, delivery_id, attempt, error)
            return
        retry = {
            "request_id": request.request_id,
            "delivery_id": delivery_id,
            "attempt": str(attempt + 1),
            "not_before": repr(self.clock() + self.backoff * 2 ** (attempt - 1)),
            "last_error": error[:500],
        }
        shard = K.Keys(request.request_id).shard
        async with self.store.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(shard.callbacks, retry)  # type: ignore[arg-type]
            pipe.xack(shard.callbacks, K.CALLBACK_GROUP, entry_id)
            pipe.hincrby(metrics, "callbacks:retried", 1)
            await pipe.execute()

    async def _give_up(self, entry_id: str, fields: dict[str, str], exc: Exception) -> None:
        """The entry failed POISON_AFTER times with an error of countersign's own."""
        attempt = fields.get("attempt", "")
        error = (
            f"not sent: failed {POISON_AFTER} times with an error of countersign's own "
            f"({type(exc).__name__}: {exc})"
        )
        delivery_id = fields.get("delivery_id") or delivery_of(fields.get("request_id", entry_id))
        await self._dead(fields, delivery_id, int(attempt) if attempt.isdecimal() else 0, error)

    async def _dead(
        self, fields: dict[str, str], delivery_id: str, attempts: int, error: str
    ) -> None:
        request_id = fields.get("request_id", "")
        try:
            request = await self.store.get_request(request_id)
        except TRANSIENT:
            raise
        except Exception:  # unreadable (what a delivery may be given up for): the letter
            request = None  # says what its entry does
        k = K.Keys(request_id)
        letter = {
            "request_id": request_id,
            "delivery_id": delivery_id,
            "callback_url": request.callback_url if request is not None else "",
            "attempts": str(attempts),
            "error": error[:500],
            "at": repr(self.clock()),
        }
        log.warning("callback %s of %s dead-lettered: %s", delivery_id, request_id, error)
        async with self.store.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(
                k.shard.callbacks_dead,
                letter,  # type: ignore[arg-type]
                maxlen=DEAD_KEPT,
                approximate=True,
            )
            pipe.xadd(
                k.audit,
                {
                    "at": letter["at"],
                    "actor": "countersign",
                    "event": "callback_failed",
                    "request_id": request_id,
                    "detail": error[:500],
                },
            )
            pipe.hincrby(k.shard.metrics, "callbacks:dead", 1)
            await pipe.execute()


async def dead_callbacks(redis: Any, limit: int = 100) -> list[dict[str, str]]:
    """The newest dead-lettered callbacks of every shard, newest first."""
    letters: list[dict[str, str]] = []
    for shard in K.shards():
        entries: Any = await redis.xrevrange(shard.callbacks_dead, count=limit)
        for entry_id, fields in entries:
            letter = {as_text(k): as_text(v) for k, v in fields.items()}
            letters.append(letter | {"id": as_text(entry_id)})
    letters.sort(key=lambda letter: float(letter.get("at") or 0), reverse=True)
    return letters[:limit]
