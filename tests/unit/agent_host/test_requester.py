"""The requester's id: refused where it comes in unless it is a plain user id, and the
self-approval rule compares it with a decider's without regard to case."""

from __future__ import annotations

import pytest

from agent_host.approvals.requester import requester_problem, same_person
from agent_host.approvals.routes import Route
from agent_host.approvals.service import self_approval_refusal
from tests.unit.bot.test_blocks import make_request


@pytest.mark.parametrize("value", ["", "U0123ABCD", "W42", "alice@example.com", "svc.bot-1"])
def test_plain_user_ids_are_taken(value: str) -> None:
    assert requester_problem(value) == ""


@pytest.mark.parametrize(
    "value", ["<@U0123ABCD>", " U0123ABCD", "U0123ABCD ", "U01 23", "U0\u200b1", "-U1", "U" * 201]
)
def test_anything_else_is_refused_saying_what_to_send(value: str) -> None:
    assert "requested_by must be the requester's user id" in requester_problem(value)


@pytest.mark.parametrize("decider", ["U0REQUESTER", "u0requester", "U0Requester"])
def test_the_requester_is_refused_whatever_the_case_of_either_id(decider: str) -> None:
    for requested_by in ("U0REQUESTER", "u0requester"):
        request = make_request(requested_by=requested_by)
        assert same_person(decider, requested_by)
        assert "you started this run" in self_approval_refusal(decider, request)
        allowed = make_request(requested_by=requested_by, route=Route(allow_self_approval=True))
        assert self_approval_refusal(decider, allowed) == ""


def test_nobody_is_the_requester_of_a_request_without_one() -> None:
    assert not same_person("U0ANYONE", "")
    assert self_approval_refusal("U0ANYONE", make_request(requested_by="")) == ""
