"""Connects the Slack bot to the agent host when Slack is configured (filled in with the bot)."""

from __future__ import annotations

from aiohttp import web

from agent_host.approvals import Router
from agent_host.host import Host
from agent_host.notifier import Notifier
from agent_host.settings import Settings

__all__ = ["mount_slack", "slack_parts"]


async def slack_parts(settings: Settings) -> tuple[Notifier | None, Router | None]:
    return None, None


async def mount_slack(app: web.Application, host: Host) -> None:
    return None
