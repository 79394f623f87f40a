"""Bolt middleware: clicks, forms, commands and events only from the workspace the bot is
installed in.

A workspace install has a team id; an org-wide (Enterprise Grid) install has only an
enterprise id. A request is accepted only when every team it names (the workspace it was
sent from and the clicking user's own team, which differ for a Slack Connect guest) is the
installed one, or, for an org-wide install, when it comes from the installed org. When the
installation says neither, nothing is accepted. A refused request is answered (an ephemeral
line for a click, an error in the form, a reply to a command) and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.response import BoltResponse

from bot.listeners.after_ack import Replies
from bot.listeners.replies import FOREIGN, form_error
from bot.parsing import first_input, parse_click

__all__ = ["foreign_request", "installed_workspace_only", "request_origin"]

log = logging.getLogger(__name__)

# Slack's handshake, which names no team (Bolt answers it, and `ssl_check`, before any
# middleware runs).
UNCHECKED = ("url_verification",)

Middleware = Callable[[dict[str, Any], AsyncBoltContext, Any], Awaitable[BoltResponse | None]]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def request_origin(body: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(the team ids a request names, the enterprise ids it names): the workspace or org it
    was sent from and the clicking user's own, which differ for a Slack Connect guest.
    Every place Slack puts them is read, whatever the request's type: top level (commands,
    events), and the `team`, `enterprise` and `user` objects (interactivity)."""
    user = _dict(body.get("user"))
    teams = {
        _text(body.get("team_id")),
        _text(_dict(body.get("team")).get("id")),
        _text(user.get("team_id")),
    }
    orgs = {
        _text(body.get("enterprise_id")),
        _text(_dict(body.get("enterprise")).get("id")),
        _text(user.get("enterprise_id")),
    }
    return teams - {""}, orgs - {""}


def foreign_request(body: Any, installation: Any) -> bool:
    """True when a request must be refused as coming from elsewhere: any request but
    Slack's handshakes (a type the app never asked for included: Bolt routes some of them
    to the listeners too, `interactive_message` to an action's listener)."""
    body = _dict(body)
    if body.get("type") in UNCHECKED or body.get("ssl_check"):
        return False
    installed_team = _text(getattr(installation, "team_id", None))
    installed_org = _text(getattr(installation, "enterprise_id", None))
    teams, orgs = request_origin(body)
    if installed_team:
        return not teams or any(team != installed_team for team in teams)
    if installed_org:
        return orgs != {installed_org}
    return True


def installed_workspace_only(replies: Replies) -> Middleware:
    """The middleware: the listeners run only for a request from the installed workspace."""

    async def from_installed_workspace(
        body: dict[str, Any], context: AsyncBoltContext, next: Any
    ) -> BoltResponse | None:
        if not foreign_request(body, context.authorize_result):
            await next()
            return None
        if request_origin(body) == (set(), set()):  # not shaped as Slack sends anything
            return BoltResponse(status=400, body="the request names no Slack workspace")
        log.warning("refused a %s from another workspace", body.get("type") or "command")
        return _refused(body, replies)

    return from_installed_workspace


def _refused(body: dict[str, Any], replies: Replies) -> BoltResponse:
    kind = body.get("type")
    if kind == "block_actions":
        click = parse_click(body)
        if click is not None:
            replies.ephemeral(click.channel, click.user, FOREIGN)
        return BoltResponse(status=200, body="")
    if kind == "view_submission":
        if block_id := first_input(body.get("view")):
            errors = {block_id: form_error(FOREIGN)}
            return BoltResponse(status=200, body={"response_action": "errors", "errors": errors})
        return BoltResponse(status=200, body="")
    if "command" in body:
        return BoltResponse(status=200, body={"response_type": "ephemeral", "text": FOREIGN})
    return BoltResponse(status=200, body="")
