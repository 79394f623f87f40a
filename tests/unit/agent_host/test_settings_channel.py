"""COUNTERSIGN_DEFAULT_CHANNEL takes a channel id, checked by the rule `/approvals route add`
checks a route's channel by. A channel's name was accepted, and `countersign check` then
said to invite the bot to it, which cannot help: Slack knows no channel by that id."""

from __future__ import annotations

import pytest

from agent_host.errors import ConfigurationError
from agent_host.settings import load_settings


@pytest.mark.parametrize(
    "name", ["general", "#general", "C-approvals", "c0approvals", "<#C0APPROVALS|approvals>"]
)
def test_a_default_channel_that_is_not_a_channel_id_is_refused_saying_where_to_find_one(
    name: str,
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings({"COUNTERSIGN_DEFAULT_CHANNEL": name})

    said = str(refused.value)
    assert f"COUNTERSIGN_DEFAULT_CHANNEL: {name!r} is not a Slack channel id" in said, said
    assert "copy the Channel ID (C… or G…)" in said, said
    assert "invite" not in said


@pytest.mark.parametrize(
    ("given", "kept"),
    [("C0APPROVALS", "C0APPROVALS"), ("G0PRIVATE", "G0PRIVATE"), (" C0OPS ", "C0OPS"), ("", "")],
)
def test_a_channel_id_or_none_is_taken(given: str, kept: str) -> None:
    assert load_settings({"COUNTERSIGN_DEFAULT_CHANNEL": given}).default_channel == kept
