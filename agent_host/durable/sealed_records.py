"""Which fields of the stored records are sealed, and sealing and opening whole records.

Clear, so that what routes, indexes, counts and decides works without a key: ids, statuses,
kinds, times, counters, agent and tool names, severities, hashes, the route (channel,
reviewers, quorum, expiry), who asked and who decided, message references and delivery
marks — what the Lua scripts, the sweeper, the pending indexes and /metrics read.
`docs/SECURITY.md` says why each is safe to leave clear.

Everything else written into a run's or a request's hash is sealed (`sealed_fields`): a
field added later is sealed unless it is named clear here, so new content is never stored
readable by default. (Name it here if a Lua script must read it.)

Audit entries repeat a sealed value as their `detail`: an entry about a request repeats its
decision, the run's finish repeats its error or its output. Those are opened as that value.
"""

from __future__ import annotations

import json

from agent_host.durable.sealed_fields import FieldSealer, is_sealed, unreadable
from agent_host.errors import MissingKeyError, SealedFieldError

__all__ = ["REQUEST_CLEAR", "RUN_CLEAR", "SealedRecords"]

RUN_CLEAR = frozenset(
    {
        "run_id",
        "agent",
        "requested_by",
        "status",
        "pause_id",
        "created_at",
        "updated_at",
        "decided_at",
        "undecided",  # DECIDE counts it down
        "pause_requests",  # request ids
        "request_seq",
        "origin",
    }
)  # sealed: input, output, error

REQUEST_CLEAR = frozenset(
    {
        "request_id",
        "run_id",
        "call_id",
        "pause_id",
        "agent",
        "tool",
        "kind",
        "severity",
        "call_hash",
        "route",  # route id, channel, reviewer ids, quorum, expiry
        "quorum",
        "allow_always",
        "requested_by",
        "status",
        "decided_by",
        "decided_at",
        "approvals",  # the approvers' user ids
        "created_at",
        "expires_at",
        "message_channel",
        "message_ts",
        "delivery",
        "delivery_error",
        "origin",
        "callback_url",  # DECIDE queues a callback when it is set
        "editable",  # names of the tool's arguments a reviewer may edit (its schema's)
        "reminder_ts",  # Slack references, like message_ts
        "escalations",  # the escalated copies' channels, ts and permalinks; LADDER appends
        "escalation_notes",  # the same of a bulk message's notes
        "sealed_context",  # sealed already, by the store with the checkpoint's key ring
        "bulk_id",  # the request id of the bulk message's first call
        "bulk_channel",
        "bulk_ts",  # Slack references, like message_ts
    }
)  # sealed: arguments, reason, question, decision, and any field not named above

_JSON_FIELDS = frozenset({"arguments"})  # opened as JSON: a stand-in must be JSON too

# The decision that stands in for one that cannot be opened: the recorded status's kind,
# its words replaced by the reason (shown, never resumed: see RunStore.decisions_for).
_DECISION_WORDS = {
    "approved": ("approve", "note"),
    "rejected": ("reject", "message"),
    "changes_requested": ("request_changes", "feedback"),
    "answered": ("answer", "text"),
    "expired": ("expired", "note"),
}


# A record's fields opened, why each that could not be opened could not be, and which of
# those only for want of their key.
Opened = tuple[dict[str, str], dict[str, str], frozenset[str]]


class SealedRecords:
    """The sealed fields of runs, requests and audit entries, sealed and opened whole."""

    def __init__(self, sealer: FieldSealer) -> None:
        self.sealer = sealer

    # -- runs --------------------------------------------------------------------------
    def seal_run(self, fields: dict[str, str]) -> dict[str, str]:
        run_id = fields["run_id"]
        return {
            name: value if name in RUN_CLEAR else self.seal_run_value(run_id, name, value)
            for name, value in fields.items()
        }

    def seal_run_value(self, run_id: str, field: str, value: str) -> str:
        return self.sealer.seal(value, run_id=run_id, record_id=run_id, field=field)

    def open_run(self, raw: dict[str, str]) -> Opened:
        """The fields opened; why each field that could not be opened could not be (such a
        field reads "[unreadable: <why>]"); and which of those only for want of their key."""
        run_id = raw.get("run_id", "")
        opened, problems, keys_missing = dict(raw), {}, set()
        for name, value in raw.items():
            if name in RUN_CLEAR or not is_sealed(value):
                continue
            try:
                opened[name] = self.sealer.open(value, run_id=run_id, record_id=run_id, field=name)
            except SealedFieldError as exc:
                problems[name] = str(exc)
                opened[name] = unreadable(str(exc))
                if isinstance(exc, MissingKeyError):
                    keys_missing.add(name)
        return opened, problems, frozenset(keys_missing)

    # -- requests ----------------------------------------------------------------------
    def seal_request(self, fields: dict[str, str]) -> dict[str, str]:
        run_id, request_id = fields["run_id"], fields["request_id"]
        return {
            name: value
            if name in REQUEST_CLEAR
            else self.sealer.seal(value, run_id=run_id, record_id=request_id, field=name)
            for name, value in fields.items()
        }

    def seal_decision(self, run_id: str, request_id: str, decision_json: str) -> str:
        return self.sealer.seal(
            decision_json, run_id=run_id, record_id=request_id, field="decision"
        )

    def open_request(self, raw: dict[str, str]) -> Opened:
        """As `open_run`; an unreadable `arguments` reads as the JSON string of the mark,
        an unreadable `decision` as a decision of the recorded kind whose words are the mark."""
        run_id, request_id = raw.get("run_id", ""), raw.get("request_id", "")
        opened, problems, keys_missing = dict(raw), {}, set()
        for name, value in raw.items():
            if name in REQUEST_CLEAR or not is_sealed(value):
                continue
            try:
                opened[name] = self.sealer.open(
                    value, run_id=run_id, record_id=request_id, field=name
                )
            except SealedFieldError as exc:
                problems[name] = str(exc)
                opened[name] = _stand_in(name, raw, unreadable(str(exc)))
                if isinstance(exc, MissingKeyError):
                    keys_missing.add(name)
        return opened, problems, frozenset(keys_missing)

    # -- audit entries -----------------------------------------------------------------
    def open_audit_entry(self, run_id: str, entry: dict[str, str]) -> dict[str, str]:
        request_id = entry.get("request_id")
        vote = entry.get("decision", "")  # a quorum vote's entry repeats its decision
        if request_id and is_sealed(vote):
            entry = entry | {
                "decision": self.sealer.open_or_mark(
                    vote, run_id=run_id, record_id=request_id, field="decision"
                )
            }
        detail = entry.get("detail", "")
        if not is_sealed(detail):
            return entry
        if request_id:
            return entry | {
                "detail": self.sealer.open_or_mark(
                    detail, run_id=run_id, record_id=request_id, field="decision"
                )
            }
        reason = ""
        for field in ("error", "output"):  # FINISH repeats the error, or else the output
            try:
                opened = self.sealer.open(detail, run_id=run_id, record_id=run_id, field=field)
            except SealedFieldError as exc:
                reason = reason or str(exc)
                continue
            return entry | {"detail": opened}
        return entry | {"detail": unreadable(reason)}


def _stand_in(name: str, raw: dict[str, str], mark: str) -> str:
    if name in _JSON_FIELDS:
        return json.dumps(mark)
    if name == "decision":
        kind, words = _DECISION_WORDS.get(raw.get("status", ""), ("", ""))
        if not kind:
            return ""
        return json.dumps({"kind": kind, words: mark, "decided_by": raw.get("decided_by", "")})
    return mark
