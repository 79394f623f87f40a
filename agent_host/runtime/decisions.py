"""A human's decision on one pending call, as a tagged union (`kind`).

`call_hash`, when given, is the hash of the call the decider was shown; the runner refuses
a decision whose hash differs from the pending call's (approve what you saw). An approval
may carry the reviewer's comment, and the arguments they edited before approving: the
decision then keeps the arguments they were shown, the edited ones, who edited, and the hash
of the edited call, and the tool runs with the edited arguments (invariant 19,
docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from agent_host.runtime.fingerprint import same_json

__all__ = [
    "DEFAULT_EXPIRED_MESSAGE",
    "DEFAULT_REJECT_MESSAGE",
    "Answer",
    "Approve",
    "Decision",
    "Expired",
    "Reject",
    "RequestChanges",
    "argument_changes",
    "decision_adapter",
]

DEFAULT_REJECT_MESSAGE = "Tool execution was not approved."
DEFAULT_EXPIRED_MESSAGE = "Tool execution was not approved: the approval request expired."


class _Base(BaseModel):
    decided_by: str = ""  # the identity that counts: a user id, `webhook`, the sweeper
    call_hash: str | None = None
    via: str = ""  # the channel it came through: slack, webhook, api, sweeper, standing
    note: str = ""  # e.g. the name a webhook caller claimed; shown, never counted


class Approve(_Base):
    kind: Literal["approve"] = "approve"
    # "Approve for this run": later calls of this tool in the run are approved too, but
    # only those that resolve to `route_id`, still posted to `destination`, at `severity`
    # or lower (the approval service stamps them from the request it was given on).
    always: bool = False
    route_id: str = ""
    # (not written when empty: only a standing approval has one)
    destination: str = Field("", exclude_if=lambda value: not value)
    severity: str = ""
    standing_of: str = ""  # set on a call approved by a standing approval: its request id
    # The reviewer's words with the approval (seed 003's `feedback` on `approved`): shown on
    # the message, kept in the audit trail, and read by the model with the tool's result.
    comment: str = ""
    # The words of the approvals before this one towards a quorum, (who, comment) in the
    # order given: the model reads them too (filled in when the run resumes).
    earlier_comments: list[tuple[str, str]] = Field(default_factory=list)
    # Edit, then approve: the arguments the tool runs with instead of the model's. Only
    # `edited_arguments` comes from the decider; the approval service sets the rest from the
    # request and its own checks (the arguments shown, who edited, the edited call's hash),
    # and `call_hash` stays the hash of the call the reviewer was shown.
    edited_arguments: dict[str, Any] | None = None
    original_arguments: dict[str, Any] | None = None
    edited_hash: str = ""
    edited_by: str = ""

    @property
    def edited(self) -> bool:
        return self.edited_arguments is not None

    def changes(self) -> list[tuple[str, Any, Any]]:
        """What the edit changed: (argument, before, after), in the arguments' order."""
        if self.edited_arguments is None:
            return []
        return argument_changes(self.original_arguments or {}, self.edited_arguments)


class Reject(_Base):
    kind: Literal["reject"] = "reject"
    message: str = ""
    always: bool = False  # reject every later call of this tool in the run

    def text(self) -> str:
        return self.message.strip() or DEFAULT_REJECT_MESSAGE


class RequestChanges(_Base):
    kind: Literal["request_changes"] = "request_changes"
    feedback: str = ""

    def text(self) -> str:
        return f"The reviewer requested changes instead of running this tool: {self.feedback}"


class Answer(_Base):
    kind: Literal["answer"] = "answer"
    text: str


class Expired(_Base):
    kind: Literal["expired"] = "expired"

    def text(self) -> str:
        return DEFAULT_EXPIRED_MESSAGE


MISSING: Any = None  # an argument absent on one side of a change


def argument_changes(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(argument, before, after) for every argument whose value differs, added or removed."""
    names = list(before) + [name for name in after if name not in before]
    return [
        (name, before.get(name, MISSING), after.get(name, MISSING))
        for name in names
        if name not in before or name not in after or not same_json(before[name], after[name])
    ]


Decision = Annotated[
    Approve | Reject | RequestChanges | Answer | Expired, Field(discriminator="kind")
]
decision_adapter: TypeAdapter[Decision] = TypeAdapter(Decision)
