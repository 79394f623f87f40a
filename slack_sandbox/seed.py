"""The default seed of the local Slack sandbox (a stand-in workspace, not a real Slack team).

Ids are fixed so tests and the demo can name them: team ``T0SANDBOX``, bot ``U0BOT`` /
``B0BOT``, five people, three channels and the ``S0REVIEWERS`` user group.
"""

from __future__ import annotations

from slack_sandbox.workspace import BotUser, Channel, Team, User, UserGroup, Workspace

TEAM_ID = "T0SANDBOX"
TEAM_NAME = "countersign sandbox"
TEAM_DOMAIN = "countersign-sandbox"
APP_ID = "A0SANDBOX"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_NAME = "countersign"

REQUESTER = "U0REQUESTER"
REVIEWER = "U0REVIEWER"
REVIEWER2 = "U0REVIEWER2"
ADMIN = "U0ADMIN"
OUTSIDER = "U0OUTSIDER"

APPROVALS = "C0APPROVALS"
OPS = "C0OPS"
GENERAL = "C0GENERAL"

REVIEWERS_GROUP = "S0REVIEWERS"

_CREATED = 1_700_000_000


def seed_users() -> list[User]:
    return [
        User(REQUESTER, "rina.requester", "Rina Requester", "requester"),
        User(REVIEWER, "rev.one", "Rev One", "reviewer"),
        User(REVIEWER2, "rev.two", "Rev Two", "second reviewer"),
        User(ADMIN, "ada.admin", "Ada Admin", "admin", is_admin=True),
        User(OUTSIDER, "otto.outsider", "Otto Outsider", "outsider"),
    ]


def seed_workspace() -> Workspace:
    users = seed_users()
    for user in users:
        user.email = f"{user.name}@{TEAM_DOMAIN}.example"
    everyone = [u.id for u in users] + [BOT_USER_ID]
    channels = [
        Channel(
            APPROVALS, "approvals", _CREATED, list(everyone), purpose="Approve gated tool calls"
        ),
        Channel(OPS, "ops-approvals", _CREATED, list(everyone), purpose="Operations approvals"),
        Channel(GENERAL, "general", _CREATED, list(everyone), is_general=True),
    ]
    groups = [
        UserGroup(
            REVIEWERS_GROUP,
            "reviewers",
            "Reviewers",
            [REVIEWER, REVIEWER2],
            description="People who may approve gated tool calls",
        )
    ]
    return Workspace(
        team=Team(TEAM_ID, TEAM_NAME, TEAM_DOMAIN),
        bot=BotUser(BOT_USER_ID, BOT_ID, APP_ID, BOT_NAME),
        users=users,
        channels=channels,
        usergroups=groups,
    )
