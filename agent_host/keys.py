"""Every Redis key countersign uses, in one place.

All keys of one run share the hash tag `{<run token>}` so they live in one Redis Cluster
slot and a Lua script can touch them together. Ids carry the token: run `run_<token>`,
request `req_<token>_<n>`, so any key can be found from either id alone.
"""

from __future__ import annotations

import re
import secrets

__all__ = [
    "AUDIT",
    "DEADLINES",
    "OUTBOX",
    "PENDING",
    "RESUME",
    "ROUTES",
    "RUNS",
    "Keys",
    "new_run_id",
    "request_id",
    "token_of",
]

PREFIX = "cs"
_GLOBAL = f"{PREFIX}:{{global}}"
PENDING = f"{_GLOBAL}:pending"  # zset request_id -> created ms (the pending index)
DEADLINES = f"{_GLOBAL}:deadlines"  # zset request_id -> expiry ms (the sweeper's work)
RESUME = f"{_GLOBAL}:resume"  # stream: one entry per fully decided turn
OUTBOX = f"{_GLOBAL}:outbox"  # stream: notifications for the chat side
RUNS = f"{_GLOBAL}:runs"  # zset run_id -> created ms
AUDIT = f"{_GLOBAL}:audit"  # stream: changes not tied to a run (routes)
ROUTES = f"{_GLOBAL}:routes"  # string: JSON list of routing rules
METRICS = f"{_GLOBAL}:metrics"  # hash of counters
ROTATION = f"{_GLOBAL}:rotation"  # string: resumable cursor of `keys rotate`

RESUME_GROUP = "resumers"
OUTBOX_GROUP = "notifiers"

_ID = re.compile(r"^(?:run|req)_([0-9a-f]{8,64})(?:_\d+)?$")


def new_run_id() -> str:
    return f"run_{secrets.token_hex(10)}"


def token_of(run_or_request_id: str) -> str:
    """The hash-tag token inside a run or request id; ValueError if it is not one of ours."""
    match = _ID.match(run_or_request_id)
    if not match:
        raise ValueError(f"{run_or_request_id!r} is not a countersign run or request id")
    return match.group(1)


def request_id(run_id: str, number: int) -> str:
    # Zero-padded so that the requests of one pause, which share a score in the pending
    # index, list in their natural order.
    return f"req_{token_of(run_id)}_{number:04d}"


class Keys:
    """The keys of one run."""

    def __init__(self, run_or_request_id: str) -> None:
        self.token = token_of(run_or_request_id)
        base = f"{PREFIX}:{{{self.token}}}"
        self.run = f"{base}:run"  # hash: status, agent, pause id, counters
        self.checkpoint = f"{base}:checkpoint"  # encrypted RunState of the current pause
        self.requests = f"{base}:requests"  # list of the run's request ids, in order
        self.ledger = f"{base}:ledger"  # hash call_id -> started | done:<result>
        self.audit = f"{base}:audit"  # stream of the run's state changes
        self._base = base

    def request(self, request_id: str) -> str:
        return f"{self._base}:req:{request_id}"

    def approvers(self, request_id: str) -> str:
        return f"{self._base}:req:{request_id}:approvers"
