"""Durability with real processes: a pending approval survives a SIGKILLed `countersign serve`
and a SIGKILLed Redis (AOF replay), and the approved tool runs exactly once afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_host.durable.crypto import generate_key
from agent_host.durable.redis_server import free_port
from tests.support.processes import CLI, Proc, inherited_env, until
from tests.support.redis_fixtures import RedisServerFactory
from tests.support.signing import webhook_signature

TOKEN = "durability-token"
SECRET = "durability-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEADLINE = 20.0


def serve(env: dict[str, str], log: Path, number: int) -> Proc:
    """One `countersign serve` child process on a free port."""
    port = free_port()
    args = [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)]
    return Proc(f"serve-{number}", args, env, log, port)


@pytest.fixture
def serves() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


async def wait_healthy(session: aiohttp.ClientSession, serve: Proc) -> None:
    async def healthy() -> bool:
        async with session.get(f"{serve.url}/readyz") as resp:
            return resp.status == 200

    await until("readiness", healthy, within=DEADLINE, watch=[serve], interval=0.1)


async def run_status(
    session: aiohttp.ClientSession, serve: Proc, run_id: str, status: str
) -> dict[str, Any]:
    async def detail() -> dict[str, Any] | None:
        async with session.get(f"{serve.url}/api/v1/runs/{run_id}", headers=AUTH) as resp:
            body = await resp.json()
            return body if resp.status == 200 and body["status"] == status else None

    what = f"run {run_id} to be {status}"
    result: dict[str, Any] = await until(what, detail, within=DEADLINE, watch=[serve], interval=0.1)
    return result


def refunds(journal: Path) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    events = [json.loads(line) for line in journal.read_text().splitlines() if line]
    return [e for e in events if e["kind"] == "refund"]


async def test_pending_approval_survives_killed_server_and_killed_redis(
    redis_server_factory: RedisServerFactory, tmp_path: Path, serves: list[Proc]
) -> None:
    redis = redis_server_factory(appendfsync="always")
    journal = tmp_path / "effects.jsonl"
    env = inherited_env() | {
        "REDIS_URL": redis.url,
        "COUNTERSIGN_API_TOKEN": TOKEN,
        "COUNTERSIGN_WEBHOOK_SECRET": SECRET,
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key(),
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_AGENTS": "agent_host.examples:default_registry",
        "COUNTERSIGN_EXAMPLE_JOURNAL": str(journal),
        "COUNTERSIGN_DEFAULT_CHANNEL": "C0APPROVALS",
        # serve requires Slack credentials; Slack itself is unreachable here (a closed local
        # port), so chat notifications just stay in the outbox: approvals go via the webhook
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "signing-secret",
        "SLACK_API_URL": f"http://127.0.0.1:{free_port()}/api/",
    }
    log = tmp_path / "serve.log"

    async with aiohttp.ClientSession() as session:
        first = serve(env, log, 1)
        serves.append(first)
        await wait_healthy(session, first)
        async with session.post(
            f"{first.url}/api/v1/runs",
            json={"agent": "refund-agent", "input": "refund order 123", "requested_by": "U1"},
            headers=AUTH,
        ) as resp:
            assert resp.status == 202, await resp.text()
            run_id = (await resp.json())["run_id"]
        waiting = await run_status(session, first, run_id, "waiting")
        (approval,) = waiting["approvals"]
        assert approval["tool"] == "issue_refund" and approval["status"] == "pending"
        request_id = approval["request_id"]

        first.kill()  # SIGKILL: no shutdown of any kind
        redis.kill()  # and Redis crashes too: only the fsynced AOF survives
        redis.restart()
        assert refunds(journal) == []

        second = serve(env, log, 2)
        serves.append(second)
        await wait_healthy(session, second)
        still = await run_status(session, second, run_id, "waiting")
        assert still["approvals"][0]["status"] == "pending"

        raw = json.dumps(
            {"requestId": request_id, "decision": "approved", "decidedBy": "U-approver"}
        ).encode()
        signature = webhook_signature(raw, SECRET)
        url = f"{second.url}/api/v1/webhooks/approval-response"
        headers = {"X-Webhook-Signature": signature, "Content-Type": "application/json"}
        async with session.post(url, data=raw, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["status"] == "processed"

        done = await run_status(session, second, run_id, "succeeded")
        assert done["output"].startswith("Done. Refund issued: $42.50 to order 123")
        async with session.post(url, data=raw, headers=headers) as resp:
            body = await resp.json()
            assert body["status"] == "already_processed"
            assert body["decided_by"] == "webhook"  # one identity, whatever it claims

    events = refunds(journal)
    assert len(events) == 1, events
    assert events[0]["order_id"] == "123" and events[0]["key"].startswith(run_id)
