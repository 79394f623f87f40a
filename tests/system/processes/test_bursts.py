"""Bursts beyond the Redis client's 1,024 connections, against a real `countersign serve`
process: more simultaneous API calls than connections are all served (the calls beyond
them wait for a free one), and nothing in the process fails for want of a connection."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from agent_host.durable.crypto import generate_key
from agent_host.durable.redis_server import free_port
from tests.support.processes import CLI, Proc, inherited_env, until
from tests.support.redis_fixtures import RedisServerFactory

TOKEN = "burst-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CALLS = 1500  # above the client's 1,024 connections (agent_host/durable/connections.py)


@pytest.fixture
def server(redis_server_factory: RedisServerFactory, tmp_path: Path) -> Iterator[Proc]:
    redis = redis_server_factory()
    env = inherited_env() | {
        "REDIS_URL": redis.url,
        "COUNTERSIGN_API_TOKEN": TOKEN,
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key(),
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_DEFAULT_CHANNEL": "C0APPROVALS",
        # Slack is a closed local port: posts stay in the outbox, retried
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "signing-secret",
        "SLACK_API_URL": f"http://127.0.0.1:{free_port()}/api/",
    }
    port = free_port()
    args = [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = Proc("serve", args, env, tmp_path / "serve.log", port)
    try:
        yield proc
    finally:
        proc.stop()


async def test_more_simultaneous_api_calls_than_connections_are_all_served(
    server: Proc,
) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def ready() -> bool:
            async with http.get(f"{server.url}/readyz") as resp:
                return resp.status == 200

        await until("readiness", ready, within=20, watch=[server], interval=0.1)

        async def create(n: int) -> int:
            body = {"agent": "billing", "tool": "refund", "arguments": {"order": n}}
            async with http.post(f"{server.url}/api/v1/approvals", json=body, headers=AUTH) as r:
                return r.status

        statuses = Counter(await asyncio.gather(*(create(n) for n in range(CALLS))))
        assert statuses == {201: CALLS}, server.tail()
        async with http.get(f"{server.url}/readyz") as resp:
            assert resp.status == 200
    assert "Too many connections" not in server.log.read_text(errors="replace")
