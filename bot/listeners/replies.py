"""What a listener tells the person who clicked, submitted or typed a command."""

from __future__ import annotations

from agent_host.approvals import ApprovalRequest, DecideResult
from agent_host.errors import StoreFull
from bot.mrkdwn import person

__all__ = [
    "ALREADY_VOTED",
    "FOREIGN",
    "FULL",
    "FULL_CLICK",
    "FULL_COMMAND",
    "FULL_FORM",
    "NOT_FOUND",
    "UNAVAILABLE",
    "UNCONFIRMED",
    "UNREACHABLE",
    "already_decided",
    "form_error",
    "result_text",
    "unavailable",
    "unavailable_in_form",
    "unreachable",
]

UNAVAILABLE = (
    ":hourglass: countersign could not record your decision: its database could not be "
    "used. Nothing was changed; click again in a moment."
)
# Redis refusing writes for want of memory: clicking again changes nothing until an admin
# makes room, so the person is told that (and a form's error, plain and short, keeps it).
FULL = (
    ":warning: countersign could not record your decision: its database (Redis) is full. "
    "Ask an admin to make room, then click again. Nothing was changed."
)
FULL_CLICK = (
    ":warning: countersign could not do this: its database (Redis) is full. Ask an admin to "
    "make room, then click again. Nothing was changed."
)
FULL_FORM = (
    ":warning: countersign could not record this: its database (Redis) is full. Ask an admin "
    "to make room, then submit again. Nothing was changed."
)
UNREACHABLE = ":hourglass: countersign's database is not reachable right now; try again shortly."
FULL_COMMAND = (
    ":warning: countersign's database (Redis) is full, so it cannot take commands now. Ask "
    "an admin to make room in it, then try again."
)
ALREADY_VOTED = (
    "You have already approved this request (or the approval webhook did, in your name); "
    "another reviewer must approve too."
)
UNCONFIRMED = (
    ":warning: countersign could not confirm your decision in time. If the message still "
    "shows its buttons, click again; if your decision was recorded, you will be told so."
)
NOT_FOUND = "This approval request does not exist (any more). Nothing was changed."
FOREIGN = (
    ":no_entry: countersign does not accept decisions or commands from this workspace; "
    "ask someone in the workspace where it is installed."
)
FORM_ERROR_MAX = 150  # a modal's error under an input is plain text, and short


def unavailable(exc: BaseException) -> str:
    """What a person whose decision the database could not take is told (`exc`: why)."""
    return FULL if isinstance(exc, StoreFull) else UNAVAILABLE


def unavailable_in_form(exc: BaseException) -> str:
    """`unavailable`, for a form: submitted again, not clicked (`form_error` makes it an
    input's error)."""
    return FULL_FORM if isinstance(exc, StoreFull) else UNAVAILABLE


def unreachable(exc: BaseException) -> str:
    """What a person whose command the database could not take is told (`exc`: why)."""
    return FULL_COMMAND if isinstance(exc, StoreFull) else UNREACHABLE


def already_decided(request: ApprovalRequest) -> str:
    status = request.status.replace("_", " ")
    who = person(request.decided_by)
    return f"This request was already *{status}* by {who}. Nothing was changed."


def result_text(result: DecideResult) -> str:
    """The answer to a decision, by its outcome; empty when the updated message says it."""
    request = result.request
    if result.outcome == "progress" and request is not None:
        return (
            f":ballot_box_with_check: Your approval is recorded: {result.approvals} of "
            f"{request.route.quorum} approvals."
        )
    if result.outcome == "duplicate_vote":
        return ALREADY_VOTED
    if result.outcome == "already_decided" and request is not None:
        return already_decided(request)
    if result.outcome == "hash_mismatch":
        return "The request changed after it was shown to you; nothing was decided."
    if result.outcome == "past_deadline" and request is not None:
        return (
            ":hourglass: This request's deadline has passed, so it can no longer be approved "
            "or rejected; it is being marked expired and the call will not run."
        )
    if result.outcome in ("refused", "wrong_kind"):
        return f":no_entry: Not allowed: {result.reason}. Nothing was changed."
    if result.outcome == "stale":
        return (
            "This form belongs to an earlier step of the run that is over; nothing was "
            "changed. Close it and use the buttons on the current message."
        )
    if result.outcome == "unknown":
        return UNCONFIRMED
    if result.outcome == "not_found":
        return NOT_FOUND
    return ""


def form_error(text: str) -> str:
    """`text` as a modal's error under an input: plain text (no bold marks), short. A text
    too long ends at its last whole sentence that fits (else its last whole word, then
    "…"), never in the middle of one."""
    plain = text.replace("*", "")
    if len(plain) <= FORM_ERROR_MAX:
        return plain
    head = plain[:FORM_ERROR_MAX]
    if (end := max(head.rfind(". "), head.rfind("; "))) > 0:
        return head[: end + 1] if head[end] == "." else head[:end] + "."
    return head[: FORM_ERROR_MAX - 1].rsplit(" ", 1)[0] + "…"
