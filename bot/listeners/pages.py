"""The **Next page** button of `/approvals pending`: the next page replaces the reply it
sits on (through the click's response_url), for the person who clicked only.

The button's value is the sealed page marker (`bot.slash_commands`), sealed to the user it
was given to; a value that does not open for the clicking user is answered as a stale page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncRespond

from agent_host.errors import StoreUnavailable
from bot.listeners.after_ack import BackgroundTasks
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import unreachable
from bot.parsing import parse_click
from bot.slash_commands import CommandReply, SlashCommands

__all__ = ["pages_listener"]

log = logging.getLogger(__name__)

RESPOND_TIMEOUT = 5.0


def pages_listener(
    commands: SlashCommands, tasks: BackgroundTasks
) -> Callable[[AsyncAck, dict[str, Any], AsyncRespond], Awaitable[None]]:
    async def on_next_page(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        click = parse_click(body)
        if click is None:
            log.warning("ignored a malformed Next page click")
            return
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                reply = await commands.next_page(click.user, click.channel, click.request_id)
        except (StoreUnavailable, TimeoutError) as exc:
            reply = unreachable(exc)
        tasks.spawn(_replace(respond, reply))

    return on_next_page


async def _replace(respond: AsyncRespond, reply: str | CommandReply) -> None:
    text, blocks = (reply.text, reply.blocks) if isinstance(reply, CommandReply) else (reply, [])
    try:
        async with asyncio.timeout(RESPOND_TIMEOUT):
            await respond(
                text=text, blocks=blocks or None, replace_original=True, response_type="ephemeral"
            )
    except Exception as exc:  # the person can run the command again
        log.warning("could not show the next page: %s", exc)
