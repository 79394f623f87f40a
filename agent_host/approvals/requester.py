"""Who asked for a run or a request (`requested_by`), and telling whether a decider is them.

The requester may not decide their own request unless its route allows it. That rule holds
only if the two ids are compared as the same person would be named: the chat side's user
id, as given. So an id that carries anything else (spaces, a mention's markup) is refused
where it comes in, and ids are compared without regard to case.
"""

from __future__ import annotations

import re

__all__ = ["requester_problem", "same_person", "user_id_problem"]

_USER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,199}")


def requester_problem(value: str) -> str:
    """Why `value` cannot be a requester's id ("" when it can, or is empty: nobody)."""
    return user_id_problem(value, "requested_by", "the requester's")


def user_id_problem(value: str, field: str, whose: str) -> str:
    """Why `value`, given as `field`, cannot be a person's user id ("" when it can, or is
    empty). The same rule for the requester and for a decider someone claims: compared as
    given, an id with a mention's markup or a space would not be the same person."""
    if not value or _USER_ID.fullmatch(value):
        return ""
    return (
        f"{field} must be {whose} user id as the chat side knows it, e.g. "
        "U0123ABCD: letters, digits and . _ @ + - only, at most 200 characters"
    )


def same_person(user_id: str, requested_by: str) -> bool:
    """Whether a decider is the requester (ids compared without regard to case)."""
    return bool(requested_by) and user_id.casefold() == requested_by.casefold()
