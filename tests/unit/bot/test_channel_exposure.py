"""Which escalations take requests from a private channel to a public one: only that
pair, and nothing when Slack did not say whether a channel is private."""

from __future__ import annotations

import pytest

from bot.delivery import ChannelFacts, exposes

PRIVATE, PUBLIC, UNSAID = ChannelFacts(None, True), ChannelFacts(None, False), ChannelFacts(None)


@pytest.mark.parametrize(
    ("channel", "escalation", "exposed"),
    [
        (PRIVATE, PUBLIC, True),
        (PUBLIC, PRIVATE, False),
        (PRIVATE, PRIVATE, False),
        (PUBLIC, PUBLIC, False),
        (UNSAID, PUBLIC, False),
        (PRIVATE, UNSAID, False),
        (None, PUBLIC, False),
        (PRIVATE, None, False),
    ],
)
def test_only_private_to_public_exposes(
    channel: ChannelFacts | None, escalation: ChannelFacts | None, exposed: bool
) -> None:
    assert exposes(channel, escalation) is exposed
