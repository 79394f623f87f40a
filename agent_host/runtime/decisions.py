"""A human's decision on one pending call, as a tagged union (`kind`).

`call_hash`, when given, is the hash of the call the decider was shown; the runner refuses
a decision whose hash differs from the pending call's (approve what you saw).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

__all__ = [
    "DEFAULT_EXPIRED_MESSAGE",
    "DEFAULT_REJECT_MESSAGE",
    "Answer",
    "Approve",
    "Decision",
    "Expired",
    "Reject",
    "RequestChanges",
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
    # only those that resolve to `route_id` at `severity` or lower (the approval service
    # stamps both from the request it was given on).
    always: bool = False
    route_id: str = ""
    severity: str = ""
    standing_of: str = ""  # set on a call approved by a standing approval: its request id


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


Decision = Annotated[
    Approve | Reject | RequestChanges | Answer | Expired, Field(discriminator="kind")
]
decision_adapter: TypeAdapter[Decision] = TypeAdapter(Decision)
