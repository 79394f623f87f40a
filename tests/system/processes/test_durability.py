"""Durability with real processes: a pending approval survives a SIGKILLed `countersign serve`
and a SIGKILLed Redis (AOF replay), and the approved tool runs exactly once afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_host.durable.crypto import generate_key
from agent_host.durable.redis_server import free_port
from tests.support.redis_fixtures import RedisServerFactory

TOKEN = "durability-token"
SECRET = "durability-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEADLINE = 20.0
COMMAND = [sys.executable, "-m", "bot.cli"]  # bot/cli.py has an `if __name__ == "__main__"` guard


class Serve:
    """One `countersign serve` child process."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*COMMAND, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.stop()


async def wait_for(what: str, serve: Serve, check: Any) -> Any:
    """Poll `check()` until it returns a truthy value, at most DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while True:
        assert serve.alive(), (
            f"countersign serve exited while waiting for {what}:\n{serve.log_tail()}"
        )
        try:
            value = await check()
        except (aiohttp.ClientError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{serve.log_tail()}")
        await asyncio.sleep(0.1)


async def wait_healthy(session: aiohttp.ClientSession, serve: Serve) -> None:
    async def healthy() -> bool:
        async with session.get(f"{serve.url}/readyz") as resp:
            return resp.status == 200

    await wait_for("readiness", serve, healthy)


async def run_status(
    session: aiohttp.ClientSession, serve: Serve, run_id: str, status: str
) -> dict[str, Any]:
    async def detail() -> dict[str, Any] | None:
        async with session.get(f"{serve.url}/api/v1/runs/{run_id}", headers=AUTH) as resp:
            body = await resp.json()
            return body if resp.status == 200 and body["status"] == status else None

    result: dict[str, Any] = await wait_for(f"run {run_id} to be {status}", serve, detail)
    return result


def refunds(journal: Path) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    events = [json.loads(line) for line in journal.read_text().splitlines() if line]
    return [e for e in events if e["kind"] == "refund"]


async def test_pending_approval_survives_killed_server_and_killed_redis(
    redis_server_factory: RedisServerFactory, tmp_path: Path, serves: list[Serve]
) -> None:
    redis = redis_server_factory(appendfsync="always")
    journal = tmp_path / "effects.jsonl"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "COUNTERSIGN_", "REDIS_"))
    }
    env |= {
        "REDIS_URL": redis.url,
        "COUNTERSIGN_API_TOKEN": TOKEN,
        "COUNTERSIGN_WEBHOOK_SECRET": SECRET,
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key(),
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_AGENTS": "agent_host.examples:default_registry",
        "COUNTERSIGN_EXAMPLE_JOURNAL": str(journal),
        "COUNTERSIGN_DEFAULT_CHANNEL": "C-approvals",
        # serve requires Slack credentials; Slack itself is unreachable here (a closed local
        # port), so chat notifications just stay in the outbox: approvals go via the webhook
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "signing-secret",
        "SLACK_API_URL": f"http://127.0.0.1:{free_port()}/api/",
    }
    log = tmp_path / "serve.log"

    async with aiohttp.ClientSession() as session:
        first = Serve(env, log, tmp_path)
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

        second = Serve(env, log, tmp_path)
        serves.append(second)
        await wait_healthy(session, second)
        still = await run_status(session, second, run_id, "waiting")
        assert still["approvals"][0]["status"] == "pending"

        raw = json.dumps(
            {"requestId": request_id, "decision": "approved", "decidedBy": "U-approver"}
        ).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
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
