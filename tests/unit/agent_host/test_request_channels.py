"""The channels a request's messages are in: whose people may decide it when its route
names no reviewers (checked against Slack's `users.conversations` at each decision)."""

from __future__ import annotations

from agent_host.approvals.requests import EscalatedCopy

from .test_request_hash import _request


def test_the_route_destination_until_the_message_is_posted() -> None:
    assert _request().channels() == ["C1"]


def test_the_original_message_first_then_each_escalated_copy_once() -> None:
    copies = [
        EscalatedCopy(to="C2", channel="C2", ts="2.0", link=""),
        EscalatedCopy(to="C0FALLBACK", channel="C0FALLBACK", ts="3.0", link=""),  # again
        EscalatedCopy(to="U9", channel="D9", ts="4.0", link=""),  # a direct message
        EscalatedCopy(to="C2", channel="C2", ts="5.0", link=""),  # escalated there twice
    ]
    request = _request(message_channel="C0FALLBACK", message_ts="1.0", escalations=copies)
    assert request.channels() == ["C0FALLBACK", "C2", "D9"]
    assert all(request.posted_in(channel) for channel in request.channels())
