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

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped

from agent_host.approvals import ApprovalService
from agent_host.durable.bulks import BulkBook
from agent_host.durable.seen_once import SeenOnce
from bot import blocks
from bot.home import HomeTab
from bot.library_loggers import bolt_logger
from bot.listeners.after_ack import BackgroundTasks, Replies
from bot.listeners.budget import LISTENER_BUDGET
from bot.listeners.bulk import BULK_ACTIONS, bulk_button_listener, bulk_form_listener
from bot.listeners.buttons import ACTIONS, button_listener, is_decision_click
from bot.listeners.commands import COMMAND, command_listener
from bot.listeners.events import HOME_OPENED, home_opened_listener, once_per_event
from bot.listeners.forms import FORMS, form_listener
from bot.listeners.pages import pages_listener
from bot.listeners.taken_once import taken_once
from bot.member_channels import MemberChannels
from bot.middleware import installed_workspace_only
from bot.slack_notifier import SlackNotifier
from bot.slash_commands import SlashCommands

__all__ = ["LISTENER_BUDGET", "BackgroundTasks", "build_bolt_app"]


class _ClientCarriesTheToken(logging.Filter):
    """Drops Bolt's "`token` will be unused" warning, and only it. Bolt falls back to the
    SLACK_BOT_TOKEN environment variable when no token is passed, and warns whenever a client
    is passed too, even with no token; countersign reads that variable too (it is how its
    settings are given) and passes a client built with that very token and SLACK_API_URL,
    which Bolt cannot take any other way. Nothing is unused, so the warning is noise on
    every start."""

    unused = warning_client_prioritized_and_token_skipped()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.unused


def _bolt_logger() -> logging.Logger:
    """The logger Bolt uses by default (`slack_bolt.AsyncApp`), with that one warning
    filtered; Bolt copies its filters to the loggers of its middleware."""
    logger = bolt_logger()
    if not any(isinstance(f, _ClientCarriesTheToken) for f in logger.filters):
        logger.addFilter(_ClientCarriesTheToken())
    return logger


def build_bolt_app(
    *,
    client: Any,
    notifier: SlackNotifier,
    signing_secret: str,
    approvals: ApprovalService,
    commands: SlashCommands,
    tasks: BackgroundTasks,
    home: HomeTab | None = None,
    seen_events: SeenOnce | None = None,
    bulks: BulkBook | None = None,
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        logger=_bolt_logger(),
        signing_secret=signing_secret,
        # Verified once already, by the endpoint, over the raw bytes (see above).
        request_verification_enabled=False,
        process_before_response=True,
        ignoring_self_events_enabled=False,
    )
    replies = Replies(client, notifier, tasks)
    app.use(installed_workspace_only(replies))
    app.use(taken_once(awaited_by_listener=is_decision_click))  # its listener awaits it
    if seen_events is not None:  # after the team check: only events of this workspace
        app.use(once_per_event(seen_events))
    on_button = button_listener(approvals, replies, home)
    for action_id in ACTIONS:
        app.action(action_id)(on_button)
    channels = home.channels if home is not None else MemberChannels(client)
    on_submit = form_listener(approvals, channels)
    for callback_id in FORMS:
        app.view(callback_id)(on_submit)
    if bulks is not None:  # messages of many calls: Approve all, Reject all, one by one
        on_bulk = bulk_button_listener(approvals, bulks, replies)
        for action_id in BULK_ACTIONS:
            app.action(action_id)(on_bulk)
        on_bulk_form = bulk_form_listener(approvals, bulks, replies, channels)
        app.view(blocks.BULK_REJECT_MODAL)(on_bulk_form)
    app.command(COMMAND)(command_listener(commands))
    app.action(blocks.PENDING_NEXT)(pages_listener(commands, tasks))
    if home is not None:
        app.event(HOME_OPENED)(home_opened_listener(home, tasks))
    return app
