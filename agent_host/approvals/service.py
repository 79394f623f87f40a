"""The one approval service: every decision, from any channel, takes this path.

Slack buttons and modals, the webhook, the HTTP API and the sweeper all call `decide`:

    load -> the form still belongs to the request's pause? -> already decided?
         -> does the decision's kind fit the request? -> may this decider decide it?
         -> edited arguments? valid, and no lower a bar (`edits.ArgumentEditor`)
         -> compare-and-set (the store's DECIDE script) -> result

Nothing here knows Slack or HTTP. Who belongs to a route's reviewers (users, user groups)
is asked of a `ReviewerDirectory`, which the chat side implements. No other code calls the
store's `decide` (invariant 11, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agent_host.approvals.edits import ArgumentEditor
from agent_host.approvals.requester import same_person
from agent_host.approvals.requests import ApprovalRequest, DecideResult
from agent_host.runtime.decisions import Answer, Approve, Decision, Expired, Reject, RequestChanges

__all__ = [
    "WEBHOOK",
    "ApprovalService",
    "Eligibility",
    "ReviewerDirectory",
    "Via",
    "decision_for",
    "kind_refusal",
    "may_decide",
    "self_approval_refusal",
    "unreadable_refusal",
]

Via = Literal["slack", "webhook", "api", "sweeper"]

# The one identity every webhook decision counts as, whatever name the caller claims: one
# secret holder is one approver, so it can neither fake a quorum nor a reviewer's name.
WEBHOOK = "webhook"


@dataclass(frozen=True)
class Eligibility:
    """Whether someone may decide a request, and if not, why (in words for them)."""

    allowed: bool
    reason: str = ""


class ReviewerDirectory(Protocol):
    async def is_reviewer(self, user_id: str, reviewers: tuple[str, ...]) -> Eligibility:
        """Is `user_id` one of `reviewers` (user ids and user-group ids)?"""
        ...


class OpenDirectory:
    """No directory: only routes without named reviewers can be decided by a person."""

    async def is_reviewer(self, user_id: str, reviewers: tuple[str, ...]) -> Eligibility:
        return Eligibility(user_id in reviewers, "no reviewer directory is configured")


def self_approval_refusal(user_id: str, request: ApprovalRequest) -> str:
    """Why the requester may not decide their own request here; empty when they may."""
    if same_person(user_id, request.requested_by) and not request.route.allow_self_approval:
        return (
            "you started this run, and this route does not allow approving your own "
            "request; ask another reviewer"
        )
    return ""


async def may_decide(
    directory: ReviewerDirectory, user_id: str, request: ApprovalRequest
) -> Eligibility:
    """A person's right to decide: not their own request (unless the route allows it),
    and one of the route's reviewers when it names any."""
    route = request.route
    if refusal := self_approval_refusal(user_id, request):
        return Eligibility(False, refusal)
    if not route.reviewers or user_id in route.reviewers:
        return Eligibility(True)
    return await directory.is_reviewer(user_id, route.reviewers)


def decision_for(
    verdict: str,
    request: ApprovalRequest,
    feedback: str = "",
    decided_by: str = "",
    edited_arguments: dict[str, Any] | None = None,
) -> Decision:
    """Seed 003's verdicts (`approved`, `rejected`, `request_changes`) as a decision on this
    request: "approved" on a question answers it with the feedback; on a call, the feedback
    is the approval's comment, and it may carry edited arguments."""
    if verdict == "approved":
        if request.kind == "question":
            return Answer(text=feedback, decided_by=decided_by)
        return Approve(decided_by=decided_by, comment=feedback, edited_arguments=edited_arguments)
    if verdict == "rejected":
        return Reject(message=feedback, decided_by=decided_by)
    if verdict == "request_changes":
        return RequestChanges(feedback=feedback, decided_by=decided_by)
    raise ValueError(f"unknown verdict {verdict!r}: use approved, rejected or request_changes")


def kind_refusal(request: ApprovalRequest, decision: Decision) -> str:
    """Why this kind of decision does not fit this request; empty when it does.

    Approve and request-changes are for approvals, an answer is for a question; a question
    may still be rejected (declined), and anything may expire."""
    if request.kind == "question" and isinstance(decision, Approve | RequestChanges):
        return "this request is a question: answer it or reject it"
    if request.kind == "approval" and isinstance(decision, Answer):
        return "this request is an approval, not a question: approve or reject it"
    if isinstance(decision, Answer) and not decision.text.strip():
        return "an answer needs text; send the answer (the webhook's feedback) or reject"
    return ""


def unreadable_refusal(request: ApprovalRequest, decision: Decision) -> str:
    """Why this decision may not be taken on a request whose content could not be decrypted;
    empty when it may. Nobody saw what such a request would run, so it can only be rejected
    (or expire): approve what you saw."""
    if not request.unreadable or isinstance(decision, Reject | Expired):
        return ""
    fields = ", ".join(sorted(request.unreadable))
    return (
        f"this request's {fields} could not be decrypted, so nobody can see what it would "
        "do; reject it, or ask an operator to restore the encryption key it was sealed with"
    )


class ApprovalService:
    def __init__(
        self,
        store: Store,
        directory: ReviewerDirectory | None = None,
        editor: ArgumentEditor | None = None,
    ) -> None:
        self.store = store
        self.directory: ReviewerDirectory = directory or OpenDirectory()
        self.editor = editor  # None: edited arguments are refused

    async def load(self, request_id: str) -> ApprovalRequest | None:
        return await self.store.get_request(request_id)

    async def may_decide(self, user_id: str, request: ApprovalRequest) -> Eligibility:
        return await may_decide(self.directory, user_id, request)

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        via: Via,
        current: ApprovalRequest | None = None,
        pause_id: str | None = None,
    ) -> DecideResult:
        """Check and record one decision. `current`, when the caller has just loaded the
        request, saves a read; `pause_id`, when the decision comes from a form, must be the
        request's own pause. A caller with a deadline (a Slack listener) wraps this in a
        timeout: the compare-and-set is one atomic step, so nothing is left half-done."""
        return await self._decide(request_id, decision, via, current, pause_id)

    async def _decide(
        self,
        request_id: str,
        decision: Decision,
        via: Via,
        current: ApprovalRequest | None,
        pause_id: str | None,
    ) -> DecideResult:
        request = current if current is not None else await self.load(request_id)
        if request is None or request.request_id != request_id:
            return DecideResult("not_found")
        if pause_id is not None and pause_id != request.pause_id:
            return DecideResult("stale", request)
        if request.decided:
            return DecideResult("already_decided", request)
        if reason := kind_refusal(request, decision):
            return DecideResult("wrong_kind", request, reason=reason)
        decision, refusal = await self._admit(request, decision, via)
        refusal = refusal or unreadable_refusal(request, decision)
        if refusal:
            return DecideResult("refused", request, reason=refusal)
        if isinstance(decision, Approve):
            decision, refused = await self._admit_edit(request, decision)
            if refused is not None:
                return refused
        completes = via == "webhook" and request.route.webhook_completes_quorum
        # A vote a webhook caller says is someone's counts as theirs as well as the
        # webhook's: that person cannot vote again in Slack to fill a quorum alone (ids
        # compared without regard to case, as `same_person` does). A webhook that decides
        # whatever the quorum needs no such count.
        counts_as = decision.note.casefold() if via == "webhook" and not completes else ""
        return await self.store.decide(
            request_id, decision, current=request, completes_quorum=completes, counts_as=counts_as
        )

    async def _admit(
        self, request: ApprovalRequest, decision: Decision, via: Via
    ) -> tuple[Decision, str]:
        """The decision as it will be recorded (identity, channel, scope), or why not."""
        if via == "sweeper":
            if not isinstance(decision, Expired):
                return decision, "the sweeper only expires requests"
            return decision.model_copy(update={"via": via}), ""
        if isinstance(decision, Expired):
            return decision, "only the deadline expires a request"
        if via == "webhook":
            # The caller's claimed name is kept as a note; the identity is the webhook's. A
            # claim is never trusted to decide, only to refuse: the requester named as the
            # decider is refused as in Slack (and a vote claimed for someone is theirs too:
            # `counts_as`).
            note = decision.decided_by if decision.decided_by != WEBHOOK else ""
            if note and (refusal := self_approval_refusal(note, request)):
                return decision, f"the webhook's caller named {note!r} as the decider: {refusal}"
            decision = decision.model_copy(update={"decided_by": WEBHOOK, "note": note, "via": via})
        elif via == "slack":
            eligibility = await self.may_decide(decision.decided_by, request)
            if not eligibility.allowed:
                return decision, eligibility.reason
            decision = decision.model_copy(update={"via": via})
        else:
            decision = decision.model_copy(update={"via": via})
        if isinstance(decision, Approve) and decision.always:
            if not (request.allow_always and request.route.allows_standing_approval):
                return decision, (
                    "this call cannot be approved for the whole run (its route names "
                    "reviewers or needs more than one approval); approve this call only"
                )
            decision = decision.model_copy(
                update={
                    "route_id": request.route.route_id,
                    "destination": request.route.destination,
                    "severity": request.severity,
                    "standing_of": request.request_id,
                }
            )
        return decision, ""

    async def _admit_edit(
        self, request: ApprovalRequest, decision: Approve
    ) -> tuple[Approve, DecideResult | None]:
        """An approval as recorded: its edit checked and completed from the request (what
        the reviewer was shown, who edited, the edited call's hash), never from the caller."""
        plain = decision.model_copy(
            update={
                "edited_arguments": None,
                "original_arguments": None,
                "edited_hash": "",
                "edited_by": "",
            }
        )
        if decision.edited_arguments is None:
            return plain, None
        refusal = ""
        if decision.always:
            refusal = "an edited call is approved once, not for the whole run"
        elif self.editor is None:
            refusal = "editing arguments is not available here"
        if refusal:
            return plain, DecideResult("refused", request, reason=refusal)
        assert self.editor is not None
        check = await self.editor.check(request, decision.edited_arguments)
        if not check.ok:
            reason = check.refusal or "the edited arguments do not fit the tool: " + "; ".join(
                f"{name or 'arguments'}: {problem}" for name, problem in check.errors.items()
            )
            return plain, DecideResult("refused", request, reason=reason, errors=check.errors)
        if not check.changed:
            return plain, None  # nothing changed: a plain approval
        edited = decision.model_copy(
            update={
                # the edit was made on the request's arguments: bound to them, whatever
                # channel it came through (a hash the caller gave must match, in DECIDE)
                "call_hash": decision.call_hash or request.call_hash,
                "edited_arguments": check.arguments,
                "original_arguments": dict(request.arguments),
                "edited_hash": check.edited_hash,
                "edited_by": decision.decided_by,
            }
        )
        return edited, None


class Store(Protocol):
    """What the service needs of the durable store (`durable` implements it with Redis)."""

    async def get_request(self, request_id: str) -> ApprovalRequest | None: ...

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        current: ApprovalRequest | None = None,
        completes_quorum: bool = False,
        counts_as: str = "",
    ) -> DecideResult: ...
