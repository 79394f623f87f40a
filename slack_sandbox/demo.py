"""`countersign demo`: the whole approval flow on one machine, no Slack workspace needed.

One command starts an embedded Redis (AOF on), the local Slack sandbox (a stand-in for
Slack's Web API plus a page that shows its channels), the bot with the HTTP API, and the
workers. Secrets and keys are generated into the data dir on first start and reused, so
a restarted demo still holds its pending approvals and their buttons still work.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from agent_host.approvals.routes import RouteRule
from agent_host.durable.crypto import generate_key
from agent_host.durable.data_dir import private_dir
from agent_host.errors import ConfigurationError
from bot.composition import build_service
from bot.server import cannot_listen, stop_on_signals
from bot.slack_settings import ServiceSettings
from slack_sandbox import SlackStandIn
from slack_sandbox.persistence import open_workspace

__all__ = ["DEMO_ROUTES", "demo_dir", "demo_secrets", "run_demo"]

log = logging.getLogger(__name__)

# Routes that make the reviewer rules visible in the sandbox's users.
DEMO_ROUTES = [
    RouteRule(
        tool="delete_repo",
        channel="C0OPS",
        reviewers=("S0REVIEWERS",),
        quorum=2,
        expiry_seconds=3600,
    ),
    RouteRule(agent="refund-agent", channel="C0APPROVALS", reviewers=("U0REVIEWER", "U0REVIEWER2")),
]


def _deployment_settings(settings: ServiceSettings) -> list[tuple[str, Any]]:
    """The environment's settings of a real deployment, which the demo does not use."""
    return [
        ("REDIS_URL", settings.redis_url),
        ("SLACK_BOT_TOKEN", settings.slack_bot_token),
        ("SLACK_APP_TOKEN", settings.slack_app_token),
        ("COUNTERSIGN_ENCRYPTION_KEYS", settings.encryption_keys),
        ("COUNTERSIGN_ROUTES_FILE", settings.routes_file),
    ]


def demo_secrets(data_dir: Path) -> dict[str, str]:
    """The demo's tokens and keys: made once, kept in the data dir (mode 0600)."""
    path = data_dir / "demo-secrets.json"
    private_dir(data_dir)
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    made = {
        "SLACK_BOT_TOKEN": "xoxb-sandbox-" + secrets.token_hex(12),
        "SLACK_SIGNING_SECRET": secrets.token_hex(16),
        "COUNTERSIGN_API_TOKEN": secrets.token_urlsafe(24),
        "COUNTERSIGN_WEBHOOK_SECRET": secrets.token_urlsafe(24),
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(made, f, indent=2)
    return made


def demo_dir(settings: ServiceSettings) -> Path:
    """Where the demo keeps everything: its own folder of the data dir, never the data a
    `countersign serve` on the same data dir keeps (its embedded Redis, its keys)."""
    return Path(settings.data_dir) / "demo"  # made absolute by the CLI


async def run_demo(settings: ServiceSettings, port: int, *, host_name: str = "127.0.0.1") -> None:
    """The demo, on its own embedded Redis, tokens, secrets and keys in `demo_dir`: whatever
    the environment says of Redis, Slack or keys (a production `.env` loaded by mistake)
    is not used, so the demo never reads, posts or routes anything of a real deployment.
    The agents (`COUNTERSIGN_AGENTS`) are the environment's: the demo shows them."""
    stop = stop_on_signals()
    data_dir = demo_dir(settings)
    made = demo_secrets(data_dir)
    ignored = [name for name, value in _deployment_settings(settings) if value]
    if ignored:
        log.warning("the demo ignores %s: it runs on its own sandbox", ", ".join(ignored))
    standin = SlackStandIn(
        open_workspace(data_dir / "sandbox"),
        token=made["SLACK_BOT_TOKEN"],
        signing_secret=made["SLACK_SIGNING_SECRET"],
        api_token=made["COUNTERSIGN_API_TOKEN"],
        host=host_name,
        port=port,
    )
    try:
        await standin.start()
    except OSError as exc:  # as `serve` says it, but the demo's port is --port alone
        setting = "--port (0: any free port)"
        raise ConfigurationError(cannot_listen(host_name, port, exc, setting)) from exc
    update: dict[str, Any] = {
        "data_dir": data_dir,
        "redis_url": None,  # its own embedded Redis, in data_dir
        "slack_bot_token": made["SLACK_BOT_TOKEN"],
        "slack_signing_secret": made["SLACK_SIGNING_SECRET"],
        "slack_app_token": None,
        "slack_api_url": standin.url,
        "api_token": made["COUNTERSIGN_API_TOKEN"],
        "webhook_secret": made["COUNTERSIGN_WEBHOOK_SECRET"],
        "encryption_keys": made["COUNTERSIGN_ENCRYPTION_KEYS"],
        "default_channel": "C0APPROVALS",
        "admins": "U0ADMIN",
        "routes_file": None,
        "callback_hosts": "",
    }
    service = await build_service(settings.model_copy(update=update))
    await service.bot.routes.seed(DEMO_ROUTES, actor="demo")
    await service.start(http=(host_name, 0), workers=1)
    bot_url = service.url
    standin.events_url = f"{bot_url}/slack/events"
    standin.api_url = bot_url
    print(
        "\n  countersign demo is running — a LOCAL SANDBOX, not Slack.\n"
        f"  Open {standin.page_url} in your browser.\n"
        f"  Bot and HTTP API: {bot_url} (API token in {data_dir / 'demo-secrets.json'});\n"
        f"  for examples/: COUNTERSIGN_URL={bot_url} "
        f"COUNTERSIGN_API_TOKEN={made['COUNTERSIGN_API_TOKEN']}\n"
        f"  Data (Redis AOF, sandbox messages): {data_dir}\n"
        "  Ctrl-C stops everything; run it again and pending approvals are still there.\n",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        log.info("stopping the demo")
        await service.stop()
        await standin.stop()
