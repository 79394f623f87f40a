"""Many gated calls of one turn in one message: which calls share one, what that message
binds, and deciding them all through the approval service, one call at a time.

When a pause gates more than a threshold of approval calls routed to the same channel,
they are grouped into a `Bulk`: one message lists them, with **Approve all**, **Reject all**
and **Review one by one**. Each call keeps its own `ApprovalRequest` (id, route, reviewers,
quorum, deadline, audit). The bulk records the exact calls it shows, each with its hash,
and a digest of that list which its buttons carry: a decision made from the message goes to
each call with the hash the message showed, through `ApprovalService.decide`, so the
reviewer rules, self-approval, quorum and "approve what you saw" apply per call (a call
changed since, or a list that is not the one shown, is not decided by it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent_host.approvals.requests import ApprovalRequest, DecideResult
from agent_host.approvals.service import ApprovalService
from agent_host.runtime.decisions import Decision

__all__ = [
    "DEFAULT_BULK_THRESHOLD",
    "Bulk",
    "BulkTally",
    "bulk_digest",
    "decide_each",
    "plan_bulks",
]

DEFAULT_BULK_THRESHOLD = 5  # more calls than this, to one channel in one turn: one message


@dataclass(frozen=True)
class Bulk:
    """One message for many calls of one pause. `bulk_id` is its first call's request id
    (unique for ever, and it names the run's keys). `members` are the calls it shows, each
    `(request id, call hash)`, in order; `digest` binds that list (its buttons carry it).
    `channel`/`ts`: its message once posted. `split_by`: who asked to review the calls one
    by one (each is then posted in the message's thread). `fallback`: the channel refused
    the message for good, so each call was posted on its own instead."""

    bulk_id: str
    run_id: str
    pause_id: str
    agent: str
    destination: str
    members: tuple[tuple[str, str], ...]
    digest: str
    requested_by: str = ""
    channel: str = ""
    ts: str = ""
    split_by: str = ""
    fallback: bool = False

    @property
    def request_ids(self) -> list[str]:
        return [rid for rid, _ in self.members]

    @property
    def hashes(self) -> dict[str, str]:
        return dict(self.members)

    @property
    def posted(self) -> bool:
        return bool(self.ts)

    def to_hash(self) -> dict[str, str]:
        """The fields PAUSE writes (the rest is added as the message is posted and used)."""
        return {
            "bulk_id": self.bulk_id,
            "run_id": self.run_id,
            "pause_id": self.pause_id,
            "agent": self.agent,
            "destination": self.destination,
            "requested_by": self.requested_by,
            "members": json.dumps([list(m) for m in self.members]),
            "digest": self.digest,
        }

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> Bulk:
        members = tuple((str(rid), str(h)) for rid, h in json.loads(raw.get("members") or "[]"))
        return cls(
            bulk_id=raw["bulk_id"],
            run_id=raw["run_id"],
            pause_id=raw.get("pause_id", ""),
            agent=raw.get("agent", ""),
            destination=raw.get("destination", ""),
            members=members,
            digest=raw.get("digest", ""),
            requested_by=raw.get("requested_by", ""),
            channel=raw.get("channel", ""),
            ts=raw.get("ts", ""),
            split_by=raw.get("split_by", ""),
            fallback=raw.get("fallback") == "1",
        )

    def intact(self) -> bool:
        """Its member list is the one its digest was made from."""
        return bool(self.members) and bulk_digest(self.members) == self.digest


def bulk_digest(members: Sequence[tuple[str, str]]) -> str:
    """A digest of the calls a bulk message shows, in order: `<request id>:<call hash>`."""
    text = "\n".join(f"{rid}:{call_hash}" for rid, call_hash in members)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_bulks(requests: Sequence[ApprovalRequest], threshold: int) -> list[Bulk]:
    """The bulks of a new pause: its pending approval calls grouped by the channel they are
    routed to, each group of more than `threshold` calls one bulk (its calls get its id as
    `bulk_id`). Questions, and calls a standing approval already decided, are posted on
    their own. `threshold` 0 turns bulk messages off."""
    if threshold <= 0:
        return []
    groups: dict[str, list[ApprovalRequest]] = {}
    for request in requests:
        if request.kind == "approval" and not request.decided:
            groups.setdefault(request.route.destination, []).append(request)
    bulks = []
    for destination, group in groups.items():
        if len(group) <= threshold:
            continue
        members = tuple((r.request_id, r.call_hash) for r in group)
        first = group[0]
        for request in group:
            request.bulk_id = first.request_id
        bulks.append(
            Bulk(
                bulk_id=first.request_id,
                run_id=first.run_id,
                pause_id=first.pause_id,
                agent=first.agent,
                destination=destination,
                members=members,
                digest=bulk_digest(members),
                requested_by=first.requested_by,
            )
        )
    return bulks


@dataclass
class BulkTally:
    """What one decision for many calls did, call by call."""

    decided: list[ApprovalRequest] = field(default_factory=list)  # decided now, by this
    progress: list[ApprovalRequest] = field(default_factory=list)  # a vote towards a quorum
    already: list[ApprovalRequest] = field(default_factory=list)  # decided before
    voted: list[ApprovalRequest] = field(default_factory=list)  # this decider's vote is in
    refused: list[tuple[ApprovalRequest, str]] = field(default_factory=list)  # left pending
    missing: list[str] = field(default_factory=list)  # request ids that do not exist

    @property
    def recorded(self) -> int:
        return len(self.decided) + len(self.progress)


Maker = Callable[[ApprovalRequest, str], Decision]  # (request, hash shown) -> its decision


async def decide_each(
    approvals: ApprovalService,
    bulk: Bulk,
    requests: Sequence[ApprovalRequest],
    make: Maker,
) -> BulkTally:
    """`make`'s decision on each call of `bulk` that still waits, through the one decision
    path, each bound to the hash the bulk showed for it and to the bulk's pause. A call the
    decider may not decide, or whose hash is not the one shown, stays pending and is
    reported with the reason."""
    tally = BulkTally()
    by_id = {r.request_id: r for r in requests}
    for request_id, shown_hash in bulk.members:
        request = by_id.get(request_id)
        if request is None:
            tally.missing.append(request_id)
            continue
        if request.decided:
            tally.already.append(request)
            continue
        result = await approvals.decide(
            request_id,
            make(request, shown_hash),
            via="slack",
            current=request,
            pause_id=bulk.pause_id,
        )
        _count(tally, request, result)
    return tally


def _count(tally: BulkTally, request: ApprovalRequest, result: DecideResult) -> None:
    current = result.request or request
    if result.outcome == "decided":
        tally.decided.append(current)
    elif result.outcome == "progress":
        tally.progress.append(current)
    elif result.outcome == "already_decided":
        tally.already.append(current)
    elif result.outcome == "duplicate_vote":
        tally.voted.append(current)
    elif result.outcome == "not_found":
        tally.missing.append(request.request_id)
    else:
        tally.refused.append((current, _why(result)))


def _why(result: DecideResult) -> str:
    if result.reason:
        return result.reason
    return {
        "hash_mismatch": "the call changed after the message was posted",
        "past_deadline": "its deadline has passed",
        "stale": "it belongs to an earlier step of the run",
        "unknown": "the decision could not be confirmed in time; try again",
    }.get(result.outcome, result.outcome.replace("_", " "))
