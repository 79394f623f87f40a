"""The Bolt app: which listener answers which Slack request.

A request's signature is checked once, before Bolt sees it: over the raw bytes by the HTTP
endpoint (`bot.wiring.mount_slack`, 401 on a bad or stale one); Socket Mode needs none
(the websocket is authenticated by the app token). Then the team check (`bot.middleware`)
refuses anything from outside the installed workspace. Each
listener (`bot.listeners`) applies the reviewer rules and the store's compare-and-set and
acks; anything slow (opening a modal, ephemeral replies) runs after the ack as an owned
background task, and message updates and the resume happen through the outbox and the
workers. The app runs with `process_before_response=True`, so Bolt sends the response as
soon as the listener returns instead of polling for the ack every 10 ms.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from agent_host.approvals import ApprovalService
from bot.listeners.after_ack import BackgroundTasks, Replies
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.buttons import ACTIONS, button_listener
from bot.listeners.commands import COMMAND, command_listener
from bot.listeners.forms import FORMS, form_listener
from bot.middleware import installed_workspace_only
from bot.slack_notifier import SlackNotifier
from bot.slash_commands import SlashCommands

__all__ = ["LISTENER_BUDGET", "BackgroundTasks", "build_bolt_app"]


def build_bolt_app(
    *,
    client: Any,
    notifier: SlackNotifier,
    signing_secret: str,
    approvals: ApprovalService,
    commands: SlashCommands,
    tasks: BackgroundTasks,
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        # Verified once already, by the endpoint, over the raw bytes (see above).
        request_verification_enabled=False,
        process_before_response=True,
        ignoring_self_events_enabled=False,
    )
    replies = Replies(client, notifier, tasks)
    app.use(installed_workspace_only(replies))
    on_button = button_listener(approvals, replies)
    for action_id in ACTIONS:
        app.action(action_id)(on_button)
    on_submit = form_listener(approvals)
    for callback_id in FORMS:
        app.view(callback_id)(on_submit)
    app.command(COMMAND)(command_listener(commands))
    return app
