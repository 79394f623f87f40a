"""A local sandbox standing in for Slack's Web API: NOT Slack, never talks to Slack.

The bot under test and the local demo point ``SLACK_API_URL`` at a :class:`SlackStandIn`;
the stand-in answers the Web API methods the bot uses, keeps its workspace in a JSON file,
and plays the Slack side of interactions (button clicks, modal submissions, slash commands)
by POSTing signed requests to the bot's request URL.
"""

from __future__ import annotations

from slack_sandbox.app_client import AppReply, AppUnreachable
from slack_sandbox.persistence import open_workspace, workspace_to_dict
from slack_sandbox.seed import seed_workspace
from slack_sandbox.signing import compute_signature, sign_request
from slack_sandbox.slack_api import SlackStandIn, create_slack_api
from slack_sandbox.workspace import Workspace

__all__ = [
    "AppReply",
    "AppUnreachable",
    "SlackStandIn",
    "Workspace",
    "compute_signature",
    "create_slack_api",
    "open_workspace",
    "seed_workspace",
    "sign_request",
    "workspace_to_dict",
]
