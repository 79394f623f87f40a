"""Which workspace a Slack request comes from, against the one the bot is installed in.

A workspace install has a team id; an org-wide (Enterprise Grid) install has only an
enterprise id. A request is accepted only when every team it names (the workspace it was
sent from and the clicking user's own team, which differ for a Slack Connect guest) is the
installed one, or, for an org-wide install, when it comes from the installed org. When the
installation says neither, nothing is accepted.
"""

from __future__ import annotations

from typing import Any

__all__ = ["foreign_request", "request_origin"]

CHECKED = ("block_actions", "view_submission")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def request_origin(body: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(the team ids a request names, the enterprise ids it names): the workspace or org it
    was sent from and the clicking user's own, which differ for a Slack Connect guest."""
    if "command" in body:  # a slash command: form fields
        return {_text(body.get("team_id"))} - {""}, {_text(body.get("enterprise_id"))} - {""}
    user = _dict(body.get("user"))
    teams = {_text(_dict(body.get("team")).get("id")), _text(user.get("team_id"))} - {""}
    orgs = {_text(_dict(body.get("enterprise")).get("id")), _text(user.get("enterprise_id"))}
    return teams, orgs - {""}


def foreign_request(body: Any, installation: Any) -> bool:
    """True when a click, form or command must be refused as coming from elsewhere."""
    body = _dict(body)
    if body.get("type") not in CHECKED and "command" not in body:
        return False
    installed_team = _text(getattr(installation, "team_id", None))
    installed_org = _text(getattr(installation, "enterprise_id", None))
    teams, orgs = request_origin(body)
    if installed_team:
        return not teams or any(team != installed_team for team in teams)
    if installed_org:
        return orgs != {installed_org}
    return True
