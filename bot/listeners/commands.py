"""The `/approvals` slash command's listener: the reply is the ack's ephemeral text.

The command's logic is `bot.slash_commands`; this runs it within the listener budget and turns
an unreachable database into a reply instead of an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck

from agent_host.errors import StoreUnavailable
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.replies import UNREACHABLE, unreachable
from bot.slash_commands import CommandReply, SlashCommands

__all__ = ["COMMAND", "UNREACHABLE", "command_listener"]

COMMAND = "/approvals"
UNFINISHED = (
    ":hourglass: countersign did not finish in time (Slack or its database answered slowly). "
    "A change you asked for may or may not have been made: see `/approvals routes` before "
    "trying again."
)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def command_listener(
    commands: SlashCommands,
) -> Callable[[AsyncAck, dict[str, Any]], Awaitable[None]]:
    async def on_command(ack: AsyncAck, command: dict[str, Any]) -> None:
        user = command.get("user_id")
        if not isinstance(user, str) or not user:
            await ack()
            return
        channel, text_in = _text(command.get("channel_id")), _text(command.get("text"))
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                reply = await commands.handle(user, channel, text_in)
        except StoreUnavailable as exc:
            reply = unreachable(exc)
        except TimeoutError:  # not the database's doing, or not its alone
            reply = UNFINISHED
        if isinstance(reply, CommandReply):
            await ack(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        else:
            await ack(response_type="ephemeral", text=reply)

    return on_command
