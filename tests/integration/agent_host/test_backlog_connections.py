"""A backlog in every shard (serve restarted after an outage, say) is worked off without
taking the Redis connections a click needs: the outbox and the decision callbacks each
handle a bounded number of entries at once, whatever the backlog."""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent_host.approvals import Route
from agent_host.approvals.notifier import LoggingNotifier
from agent_host.durable import callbacks, outbox
from agent_host.durable import keys as K
from agent_host.durable.callbacks import CallbackDelivery, CallbackSender
from agent_host.durable.connections import open_redis
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.outbox import Outbox
from agent_host.durable.store import RunStore
from agent_host.durable.streams import ShardedConsumer
from agent_host.settings import load_settings
from tests.support.routers import StaticRouter

PER_SHARD = 100  # a full read of each shard's stream: 16 x 100 entries at once


class NeverCalled:
    async def send(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        raise AssertionError("no callback is due: the backlog names no request")


def _absent_request_id() -> str:
    return f"req_{secrets.token_hex(8)}_0001"


async def _backlog(redis: Redis, stream_of: str, kind: str) -> int:
    """PER_SHARD entries in every shard's stream, each naming a request that is not there
    (its handler reads it, finds nothing, and is done)."""
    written = 0
    for shard in K.shards():
        async with redis.pipeline(transaction=False) as pipe:
            for _ in range(PER_SHARD):
                pipe.xadd(
                    getattr(shard, stream_of), {"type": kind, "request_id": _absent_request_id()}
                )
            await pipe.execute()
        written += PER_SHARD
    return written


async def _backlog_left(redis: Redis, stream_of: str, group: str) -> int:
    left = 0
    for shard in K.shards():
        for info in await redis.xinfo_groups(getattr(shard, stream_of)):
            if info["name"].decode() == group:
                left += int(info["pending"]) + int(info["lag"] or 0)
    return left


async def _drain(
    client: Redis, consumer: ShardedConsumer, stream_of: str, group: str
) -> tuple[int, int]:
    """Run the consumers until the backlog is gone while a click's reads go on beside them;
    (the clicks' reads that failed, the most connections Redis saw at once)."""
    stop = asyncio.Event()
    running = asyncio.create_task(consumer.run(stop))
    failed_clicks, most_clients = 0, 0
    try:
        async with asyncio.timeout(30):
            while await _backlog_left(client, stream_of, group):
                try:
                    await client.get("a click's read")
                except Exception:
                    failed_clicks += 1
                clients = (await client.info("clients"))["connected_clients"]
                most_clients = max(most_clients, int(clients))
                await asyncio.sleep(0)
    finally:
        stop.set()
        await running
    return failed_clicks, most_clients


@pytest.mark.parametrize("kind", ["outbox", "callbacks"])
async def test_a_backlog_in_every_shard_never_takes_the_connections_a_click_needs(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    # The client serve itself uses, with its pool of connections.
    client, _ = await open_redis(load_settings({"REDIS_URL": redis_url}))
    try:
        store = RunStore(
            client, KeyRing.parse(generate_key()), StaticRouter(Route("r", "C0GENERAL"))
        )
        consumer: ShardedConsumer
        if kind == "outbox":
            stream_of, group = "outbox", K.OUTBOX_GROUP
            consumer = Outbox(store, LoggingNotifier(), "restarted").consumer
            in_flight = outbox.IN_FLIGHT
            written = await _backlog(client, stream_of, "request_posted")
        else:
            stream_of, group = "callbacks", K.CALLBACK_GROUP
            settings = load_settings({"REDIS_URL": redis_url})
            sender: CallbackSender = NeverCalled()
            consumer = CallbackDelivery(store, settings, sender, "restarted").consumer
            in_flight = callbacks.IN_FLIGHT
            written = await _backlog(client, stream_of, "decided")
        assert written > 1024  # more entries than the client has connections
        await consumer.ensure_groups()

        with caplog.at_level(logging.ERROR, logger="agent_host.durable.streams"):
            failed_clicks, most_clients = await _drain(client, consumer, stream_of, group)

        failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert failures == []  # every entry handled on its first delivery
        assert failed_clicks == 0
        # Connections: the entries in flight, each shard's read and acknowledgements, and
        # this test's own; far below the client's 1024, whatever the backlog.
        assert most_clients <= in_flight + 2 * len(K.shards()) + 4
    finally:
        await client.aclose()
