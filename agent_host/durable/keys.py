"""Every Redis key countersign uses, in one place.

Keys are spread over SHARDS hash tags, `{s00}` … `{s15}`. A run lives in one shard, chosen
from its token, and all its keys share that shard's tag together with the shard's indexes
and streams (pending, deadlines, resume, outbox), so every state change is one Lua script
on one Redis Cluster slot, and the same code runs on a single Redis and on a cluster. Ids
carry the token: run `run_<token>`, request `req_<token>_<n>`, so any key can be found from
either id alone. Keys that are not about runs (routes, their audit) share `{global}`.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

__all__ = [
    "AUDIT",
    "CALLBACK_GROUP",
    "OUTBOX_GROUP",
    "RESUME_GROUP",
    "ROTATION",
    "ROUTES",
    "SHARDS",
    "Keys",
    "Shard",
    "decided_by",
    "external_shard",
    "home_seen",
    "is_run_id",
    "metrics_of",
    "new_run_id",
    "new_run_id_in",
    "request_id",
    "seen_once",
    "shards",
    "token_of",
]

PREFIX = "cs"
# Fixed for the life of a deployment's data: a run's shard is derived from its token.
SHARDS = 16

_GLOBAL = f"{PREFIX}:{{global}}"
ROUTES = f"{_GLOBAL}:routes"  # string: JSON list of routing rules
AUDIT = f"{_GLOBAL}:audit"  # stream: changes not tied to a run (routes)
ROTATION = f"{_GLOBAL}:rotation"  # hash shard -> resumable position of `keys rotate`, and
# "key" -> the key those positions rotated to

RESUME_GROUP = "resumers"
OUTBOX_GROUP = "notifiers"
CALLBACK_GROUP = "callbacks"

_ID = re.compile(r"^(?:run|req)_([0-9a-f]{8,64})(?:_\d+)?$")


@dataclass(frozen=True)
class Shard:
    """One shard's indexes and streams; they share the tag of the runs that live in it."""

    number: int

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{s{self.number:02d}}}"

    @property
    def pending(self) -> str:  # zset request_id -> created ms (the pending index)
        return f"{self.tag}:pending"

    def pending_in(self, destination: str) -> str:  # the pending index of one channel
        return f"{self.tag}:pending:{destination or '-'}"

    @property
    def deadlines(self) -> str:  # zset request_id -> expiry ms (the sweeper's work)
        return f"{self.tag}:deadlines"

    @property
    def ladder(self) -> str:  # zset "<step>|<request_id>" -> due ms (reminders, escalations)
        return f"{self.tag}:ladder"

    @property
    def resume(self) -> str:  # stream: one entry per run to start or fully decided turn
        return f"{self.tag}:resume"

    @property
    def outbox(self) -> str:  # stream: notifications for the chat side
        return f"{self.tag}:outbox"

    @property
    def runs(self) -> str:  # zset run_id -> created ms
        return f"{self.tag}:runs"

    @property
    def metrics(self) -> str:  # hash of counters
        return f"{self.tag}:metrics"

    @property
    def deadletter(self) -> str:  # stream: outbox entries the chat side refused for good
        return f"{self.tag}:outbox:deadletter"

    @property
    def callbacks(self) -> str:  # stream: decisions to POST to callers' callback URLs
        return f"{self.tag}:callbacks"

    @property
    def callbacks_dead(self) -> str:  # stream: callbacks that kept failing (dead letters)
        return f"{self.tag}:callbacks:dead"

    def external(self, external_id: str) -> str:  # hash request_id, fingerprint
        """The idempotency key of a caller's `external_id` (see `external_shard`)."""
        digest = hashlib.sha256(external_id.encode()).hexdigest()
        return f"{self.tag}:external:{digest}"


def metrics_of(stream: str) -> str:
    """The counters hash of the shard a stream of it (`Shard.resume`, ...) belongs to."""
    return f"{stream.rpartition(':')[0]}:metrics"


def shards() -> list[Shard]:
    return [Shard(n) for n in range(SHARDS)]


def external_shard(external_id: str) -> Shard:
    """The shard an external request with this caller's id lives in: derived from the id,
    so its idempotency key and the request's own keys share one hash tag."""
    return Shard(int(hashlib.sha256(external_id.encode()).hexdigest()[:8], 16) % SHARDS)


def new_run_id_in(shard: Shard) -> str:
    """A fresh run id whose keys live in `shard` (the shard is the token's first 8 hex
    digits mod SHARDS, so their last digit picks it)."""
    token = secrets.token_hex(10)
    return f"run_{token[:7]}{shard.number:x}{token[8:]}"


_RUN_ID = re.compile(r"^run_[0-9a-f]{8,64}$")


def is_run_id(value: str) -> bool:
    return _RUN_ID.fullmatch(value) is not None


def new_run_id() -> str:
    return f"run_{secrets.token_hex(10)}"


def token_of(run_or_request_id: str) -> str:
    """The token inside a run or request id; ValueError if it is not one of ours."""
    match = _ID.match(run_or_request_id)
    if not match:
        raise ValueError(f"{run_or_request_id!r} is not a countersign run or request id")
    return match.group(1)


def request_id(run_id: str, number: int) -> str:
    # Zero-padded so that the requests of one pause, which share a score in the pending
    # index, list in their natural order.
    return f"req_{token_of(run_id)}_{number:04d}"


class Keys:
    """The keys of one run, and the shard it lives in."""

    def __init__(self, run_or_request_id: str) -> None:
        self.token = token_of(run_or_request_id)
        self.shard = Shard(int(self.token[:8], 16) % SHARDS)
        base = f"{self.shard.tag}:run:{self.token}"
        self.run = base  # hash: status, agent, pause id, counters
        self.checkpoint = f"{base}:checkpoint"  # encrypted RunState of the current pause
        self.requests = f"{base}:requests"  # list of the run's request ids, in order
        self.ledger = f"{base}:ledger"  # hash call_id -> started | done:<result> | failed:<error>
        self.audit = f"{base}:audit"  # stream of the run's state changes
        # hash pause_id, turn, blob: the run as it was right after its latest model response
        # (encrypted), so a worker that takes over replays that response instead of asking
        self.progress = f"{base}:progress"
        self._base = base

    def request(self, request_id: str) -> str:
        return f"{self._base}:req:{request_id}"

    def approvers(self, request_id: str) -> str:
        return f"{self._base}:req:{request_id}:approvers"

    def bulk(self, bulk_id: str) -> str:
        """A hash: one message for many calls of a pause (`approvals.bulk`), by its id."""
        return f"{self._base}:bulk:{bulk_id}"


def seen_once(kind: str, token: str) -> str:
    """A marker that a delivery (a Slack event, by its id) was taken once already. Odd ids
    are hashed, so a sender cannot make long or strange key names."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", token):
        token = hashlib.sha256(token.encode()).hexdigest()
    return f"{_GLOBAL}:seen:{kind}:{token}"


def decided_by(user_id: str) -> str:
    """A zset request_id -> when one reviewer decided it (their latest decisions). Its own
    hash tag per reviewer, so a cluster spreads them."""
    return f"{_reviewer(user_id)}:decided"


def home_seen(user_id: str) -> str:
    """A marker, with a time to live, that the reviewer opened their App Home tab lately
    (in `decided_by`'s hash tag: both are read in one transaction)."""
    return f"{_reviewer(user_id)}:home"


def _reviewer(user_id: str) -> str:
    if not re.fullmatch(r"[A-Z0-9]{1,64}", user_id):
        user_id = hashlib.sha256(user_id.encode()).hexdigest()
    return f"{PREFIX}:{{reviewer:{user_id}}}"
