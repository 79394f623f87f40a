"""`countersign demo` started with a real deployment's environment loaded (`.env.example`
says to load `.env` before `demo` too): it runs on its own sandbox, never on the
deployment's Redis, Slack token or keys, and says what it ignored."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from agent_host.durable.crypto import generate_key
from agent_host.durable.redis_server import free_port
from tests.support.paths import PROJECT_ROOT
from tests.support.processes import CLI, Proc, inherited_env, until


async def test_the_demo_never_touches_a_deployments_redis(redis_url: str, tmp_path: Path) -> None:
    deployment = Redis.from_url(redis_url)
    await deployment.set("deployment:marker", "a pending approval of the real deployment")
    before = sorted(await deployment.keys("*"))
    env = inherited_env() | {
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONUNBUFFERED": "1",
        "REDIS_URL": redis_url,
        "SLACK_BOT_TOKEN": "xoxb-the-real-workspace",
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key(),
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
    }
    demo = Proc(
        "demo", [*CLI, "demo", "--port", str(free_port())], env, tmp_path / "demo.log", None
    )
    try:

        async def started() -> str | None:
            text = demo.log.read_text(errors="replace")
            return text if "Open http" in text else None

        log = await until("the demo to start", started, within=60, watch=[demo])
        assert "ignores REDIS_URL, SLACK_BOT_TOKEN, COUNTERSIGN_ENCRYPTION_KEYS" in log
        assert sorted(await deployment.keys("*")) == before  # not a key written, routes none
        assert (tmp_path / "data" / "demo" / "demo-secrets.json").exists()  # its own
    finally:
        demo.stop()
        await deployment.aclose()
