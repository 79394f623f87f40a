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
from bot.composition import build_service
from bot.server import stop_on_signals
from bot.slack_settings import ServiceSettings
from slack_sandbox import SlackStandIn
from slack_sandbox.persistence import open_workspace

__all__ = ["DEMO_ROUTES", "demo_secrets", "run_demo"]

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


async def run_demo(settings: ServiceSettings, port: int, *, host_name: str = "127.0.0.1") -> None:
    stop = stop_on_signals()
    data_dir = Path(settings.data_dir)  # made absolute by the CLI
    made = demo_secrets(data_dir)
    standin = SlackStandIn(
        open_workspace(data_dir / "sandbox"),
        token=made["SLACK_BOT_TOKEN"],
        signing_secret=made["SLACK_SIGNING_SECRET"],
        api_token=made["COUNTERSIGN_API_TOKEN"],
        host=host_name,
        port=port,
    )
    await standin.start()
    update: dict[str, Any] = {
        "slack_bot_token": made["SLACK_BOT_TOKEN"],
        "slack_signing_secret": made["SLACK_SIGNING_SECRET"],
        "slack_api_url": standin.url,
        "api_token": made["COUNTERSIGN_API_TOKEN"],
        "webhook_secret": settings.webhook_secret or made["COUNTERSIGN_WEBHOOK_SECRET"],
        "encryption_keys": settings.encryption_keys or made["COUNTERSIGN_ENCRYPTION_KEYS"],
        "default_channel": settings.default_channel or "C0APPROVALS",
        "admins": settings.admins or "U0ADMIN",
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
        f"  Bot and HTTP API: {bot_url} (API token in {data_dir / 'demo-secrets.json'})\n"
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
