"""Block Kit for approval requests: pure functions from requests to Slack JSON, no I/O.

Everything a user or the model wrote passes through `escape` before it reaches mrkdwn, and
every text is cut to fit Block Kit's documented limits (section text 3000, field 2000,
header 150, button 75, confirm-dialog title 100 and text 300, modal title 24), so a huge or
hostile tool call still produces a message Slack accepts. Lengths are measured in UTF-16
code units, which is never less than the number of characters, to stay on the safe side.

Argument values under secret-looking keys are masked at any depth before they are shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from agent_host.approvals import WEBHOOK, ApprovalRequest
from agent_host.approvals.notifier import RunSummary
from agent_host.runtime.decisions import Approve, Reject
from bot.parsing import modal_metadata

__all__ = [
    "ANSWER",
    "ANSWER_BLOCK",
    "ANSWER_INPUT",
    "ANSWER_MODAL",
    "APPROVE",
    "APPROVE_ALWAYS",
    "MASK",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REJECT",
    "REJECT_MODAL",
    "answer_modal",
    "approval_message",
    "decided_message",
    "escape",
    "mask_secrets",
    "outcome_message",
    "reject_modal",
    "slack_date",
]

Block = dict[str, Any]

# Action ids of the message buttons; every button's value is the request id.
APPROVE = "countersign_approve"
APPROVE_ALWAYS = "countersign_approve_always"
REJECT = "countersign_reject"
ANSWER = "countersign_answer"
# Modal callback ids; private_metadata is `<request id>|<pause id>` (bot.parsing).
REJECT_MODAL = "countersign_reject_modal"
ANSWER_MODAL = "countersign_answer_modal"
# block_id / action_id of the modal inputs (view.state.values[block][action]).
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"
ANSWER_BLOCK = "answer"
ANSWER_INPUT = "answer_input"

MASK = "••••••"

# Block Kit limits (api.slack.com/reference/block-kit).
SECTION_TEXT_MAX = 3000
FIELD_TEXT_MAX = 2000
FIELDS_MAX = 10
HEADER_TEXT_MAX = 150
BUTTON_TEXT_MAX = 75
CONFIRM_TITLE_MAX = 100
CONFIRM_TEXT_MAX = 300
CONTEXT_TEXT_MAX = 3000
MODAL_TITLE_MAX = 24
INPUT_MAX_LENGTH = 3000
PLACEHOLDER_MAX = 150
MESSAGE_BLOCKS_MAX = 50
NAME_MAX = 300  # agent and tool names, ids: shown whole up to this, then cut
FALLBACK_TEXT_MAX = 300  # the notification text; Slack allows far more, people read less
OUTCOME_TEXT_MAX = 3000
OUTCOME_LISTING_MAX = 1500  # the list of calls not run gets at most half of the reply

SEVERITY_EMOJI = {
    "low": ":large_green_circle:",
    "medium": ":large_yellow_circle:",
    "high": ":large_orange_circle:",
    "critical": ":red_circle:",
}
CONFIRM_SEVERITIES = ("high", "critical")

_SECRET_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "credential",
    "privatekey",
)
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_SLACK_GROUP = re.compile(r"^S[A-Z0-9]{2,}$")
_FENCE = "```"


# -- text helpers ---------------------------------------------------------------------------


def actions_block_id(request_id: str) -> str:
    """The block holding a request's buttons: a click names both it and the request."""
    return f"actions:{request_id}"


def escape(text: str) -> str:
    """Escape `&`, `<` and `>` as Slack's mrkdwn requires (`&amp;`, `&lt;`, `&gt;`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _units(text: str) -> int:
    """Length as Slack's clients count it at most: UTF-16 code units."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _fit(raw: str, render: Callable[[str], str], budget: int) -> tuple[str, int]:
    """The longest prefix of `raw` whose rendering fits `budget`: (rendered, characters cut)."""
    rendered = render(raw)
    if _units(rendered) <= budget:
        return rendered, 0
    low, high = 0, len(raw)  # render(raw[:low]) fits, render(raw[:high]) does not
    while high - low > 1:
        middle = (low + high) // 2
        if _units(render(raw[:middle])) <= budget:
            low = middle
        else:
            high = middle
    return render(raw[:low]), len(raw) - low


def _truncation_note(cut: int) -> str:
    return f"\n… (truncated, {cut} more characters)"


def _balance_fences(text: str) -> str:
    return text + "\n" + _FENCE if text.count(_FENCE) % 2 else text


def _mrkdwn(raw: str, limit: int, prefix: str = "", suffix: str = "") -> str:
    """`prefix + escape(raw) + suffix` cut to `limit`, code fences balanced, cut noted.

    `prefix` and `suffix` are trusted mrkdwn (already escaped) and are kept whole.
    """
    whole = _balance_fences(prefix + escape(raw)) + suffix
    if _units(whole) <= limit:
        return whole
    reserve = _units(prefix) + _units(suffix) + len(_FENCE) + 1
    reserve += _units(_truncation_note(len(raw)))
    body, cut = _fit(raw, escape, max(0, limit - reserve))
    return _balance_fences(prefix + body) + _truncation_note(cut) + suffix


def _plain(text: str, limit: int) -> str:
    """Plain text (never escaped) cut to `limit` with an ellipsis."""
    if _units(text) <= limit:
        return text
    body, _ = _fit(text, lambda s: s, limit - 1)
    return body + "…"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(raw: str, limit: int = NAME_MAX) -> str:
    """Escaped mrkdwn of a short value (a name, an id), cut with an ellipsis.

    Runs of backticks are broken up (see `_code`): a name never opens a code block.
    """
    if _units(_code(raw)) <= limit:
        return _code(raw)
    body, _ = _fit(raw, _code, limit - 1)
    return body + "…"


def _who(user: str) -> str:
    """A Slack mention for a user or user-group id, otherwise the escaped name, or a dash."""
    user = user.strip()
    if not user:
        return "—"
    if _SLACK_USER.match(user):
        return f"<@{user}>"
    if _SLACK_GROUP.match(user):
        return f"<!subteam^{user}>"
    return _short(user, 100)


def _who_list(users: list[str], most: int = 10) -> str:
    shown = ", ".join(_who(u) for u in users[:most]) or "—"
    if len(users) > most:
        shown += f" and {len(users) - most} more"
    return shown


def slack_date(timestamp: float | None, token: str = "{date_short_pretty} at {time}") -> str:
    """`<!date^unix^token|fallback>`: shown in each reader's own time zone, UTC as fallback."""
    if timestamp is None:
        return "—"
    try:
        moment = datetime.fromtimestamp(timestamp, UTC)
        unix = int(timestamp)
    except (OverflowError, OSError, ValueError):
        return escape(str(timestamp))
    return f"<!date^{unix}^{token}|{moment:%Y-%m-%d %H:%M} UTC>"


# -- arguments ------------------------------------------------------------------------------
def _is_secret_key(key: object) -> bool:
    folded = re.sub(r"[\s_\-.]", "", str(key).lower())
    return any(word in folded for word in _SECRET_WORDS)


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with the value of every secret-looking key replaced by MASK."""
    if isinstance(value, dict):
        return {k: MASK if _is_secret_key(k) else mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    return value


def _json(value: Any, *, indent: int | None = 2) -> str:
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular references and the like
        return repr(value)


def _code(text: str) -> str:
    """Escaped text safe inside a ``` block: no run of backticks can close it early."""
    return re.sub("`(?=`)", "`\u200b", escape(text))


def _arguments_block(arguments: Any) -> Block:
    raw = _json(mask_secrets(arguments))
    prefix, suffix = "*Arguments*\n```\n", "\n```"
    text = prefix + _code(raw) + suffix
    if _units(text) > SECTION_TEXT_MAX:
        note = _truncation_note(len(raw))
        budget = SECTION_TEXT_MAX - _units(prefix) - _units(suffix) - _units(note)
        body, cut = _fit(raw, _code, budget)
        text = prefix + body + suffix + _truncation_note(cut)
    return _section(text)


def _arguments_summary(arguments: Any, limit: int) -> str:
    """One line of (masked) arguments in plain text, cut to `limit`."""
    return _plain(_one_line(_json(mask_secrets(arguments), indent=None)), limit)


# -- blocks ---------------------------------------------------------------------------------
def _text(text: str, kind: str = "mrkdwn") -> Block:
    if kind == "plain_text":
        return {"type": "plain_text", "text": text, "emoji": True}
    return {"type": "mrkdwn", "text": text}


def _section(text: str) -> Block:
    return {"type": "section", "text": _text(text)}


def _header(text: str) -> Block:
    return {"type": "header", "text": _text(_plain(_one_line(text), HEADER_TEXT_MAX), "plain_text")}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [_text(text)]}


def _field(label: str, value: str) -> Block:
    """A `*label*\\nvalue` field; `value` is trusted, bounded mrkdwn (see `_short`)."""
    return _text(f"*{label}*\n{value}")


def _inline_code(raw: str) -> str:
    """`raw` as inline code, cut to NAME_MAX characters (at most 5x that once escaped)."""
    if not raw:
        return "—"
    if "`" in raw:  # a backtick would end the inline code early: show it as text
        return _short(raw)
    if len(raw) > NAME_MAX:
        raw = raw[: NAME_MAX - 1] + "…"
    return f"`{escape(raw)}`"


def _button(
    label: str,
    action_id: str,
    request_id: str,
    style: str | None = None,
    confirm: Block | None = None,
) -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id,
        "text": _text(_plain(label, BUTTON_TEXT_MAX), "plain_text"),
        "value": request_id,
    }
    if style is not None:
        button["style"] = style
    if confirm is not None:
        button["confirm"] = confirm
    return button


def _severity(severity: str) -> str:
    emoji = SEVERITY_EMOJI.get(severity.lower(), ":white_circle:")
    return f"{emoji} {_short(severity, 100)}"


def _quorum_line(request: ApprovalRequest) -> str:
    quorum = request.route.quorum
    line = f"{len(request.approvals)} of {quorum} approvals"
    if request.approvals:
        line += f" (so far: {_who_list(request.approvals)})"
    return line


def _fields(request: ApprovalRequest) -> Block:
    fields = [
        _field("Agent", _short(request.agent)),
        _field("Tool", _inline_code(request.tool)),
        _field("Severity", _severity(request.severity)),
        _field("Requested by", _who(request.requested_by)),
        _field("Expires", slack_date(request.expires_at)),
        _field("Request id", _inline_code(request.request_id)),
    ]
    return {"type": "section", "fields": fields[:FIELDS_MAX]}


def _question_text(request: ApprovalRequest) -> str:
    return request.question or request.reason


def _body(request: ApprovalRequest, header: str) -> list[Block]:
    """What every rendering of a request shows: header, fields, reason, arguments, hash."""
    blocks = [_header(header), _fields(request)]
    if request.kind == "question":
        blocks.append(_section(_mrkdwn(_question_text(request), SECTION_TEXT_MAX, "*Question*\n")))
    elif request.reason:
        blocks.append(_section(_mrkdwn(request.reason, SECTION_TEXT_MAX, "*Reason*\n")))
    blocks.append(_arguments_block(request.arguments))
    short = _inline_code(request.call_hash[:12])
    blocks.append(_context(f":lock: approve what you see: hash {short}"))
    return blocks


def _pending_header(request: ApprovalRequest) -> str:
    if request.kind == "question":
        return f"Question from {request.agent}"
    return f"Approval needed: {request.tool}"


def _confirm(request: ApprovalRequest) -> Block:
    title = _plain(f"Approve {request.tool}?", CONFIRM_TITLE_MAX)
    lead = f"{request.agent} will run {request.tool} with "
    tail = ". Approve exactly this call?"
    summary_room = max(20, CONFIRM_TEXT_MAX - _units(lead) - _units(tail))
    text = lead + _arguments_summary(request.arguments, summary_room) + tail
    return {
        "title": _text(title, "plain_text"),
        "text": _text(_plain(text, CONFIRM_TEXT_MAX), "plain_text"),
        "confirm": _text("Approve", "plain_text"),
        "deny": _text("Cancel", "plain_text"),
        "style": "danger" if request.severity.lower() == "critical" else "primary",
    }


def _confirm_always(request: ApprovalRequest) -> Block:
    """A standing approval reaches further than the call on screen: say how far."""
    tool = request.tool
    text = (
        f"This approves this call and later calls of {tool} in this run that go to this same "
        f"route at {request.severity} severity or lower, without asking again."
    )
    return {
        "title": _text(_plain("Approve for this run?", CONFIRM_TITLE_MAX), "plain_text"),
        "text": _text(_plain(text, CONFIRM_TEXT_MAX), "plain_text"),
        "confirm": _text("Approve for this run", "plain_text"),
        "deny": _text("Cancel", "plain_text"),
    }


def _actions(request: ApprovalRequest) -> Block:
    rid = request.request_id
    if request.kind == "question":
        elements = [
            _button("Answer", ANSWER, rid, "primary"),
            _button("Reject", REJECT, rid, "danger"),
        ]
    else:
        needs_confirm = request.severity.lower() in CONFIRM_SEVERITIES
        elements = [
            _button(
                "Approve", APPROVE, rid, "primary", _confirm(request) if needs_confirm else None
            )
        ]
        if request.allow_always and request.route.allows_standing_approval:
            elements.append(
                _button("Approve for this run", APPROVE_ALWAYS, rid, None, _confirm_always(request))
            )
        elements.append(_button("Reject", REJECT, rid, "danger"))
    return {"type": "actions", "block_id": actions_block_id(rid), "elements": elements}


def approval_message(request: ApprovalRequest) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a pending request, with its buttons."""
    blocks = _body(request, _pending_header(request))
    if request.route.quorum > 1:
        blocks.append(_context(f":busts_in_silhouette: {_quorum_line(request)}"))
    blocks.append(_actions(request))
    if request.kind == "question":
        fallback = f"Question from {request.agent}: {_one_line(_question_text(request))}"
    else:
        fallback = (
            f"Approval needed: {request.agent} wants to run {request.tool} "
            f"({request.severity}), request {request.request_id}"
        )
    return _short(fallback, FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]


# -- decided --------------------------------------------------------------------------------
_OUTCOME_VERB = {
    "approved": "Approved",
    "rejected": "Rejected",
    "changes_requested": "Changes requested",
    "answered": "Answered",
    "expired": "Expired",
    "pending": "Pending",
}
_OUTCOME_EMOJI = {
    "approved": ":white_check_mark:",
    "rejected": ":x:",
    "changes_requested": ":memo:",
    "answered": ":speech_balloon:",
    "expired": ":hourglass:",
    "pending": ":hourglass_flowing_sand:",
}


def _decision_detail(request: ApprovalRequest) -> str:
    """The free text of the decision: reject message, requested changes, or the answer."""
    decision = request.decision
    for key in ("message", "feedback", "text"):
        value = getattr(decision, key, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _decider(request: ApprovalRequest) -> str:
    """ "by <@U…>", or for a webhook "via webhook" with the name its caller claimed shown
    only as a claim."""
    decision = request.decision
    if request.decided_by == WEBHOOK:
        claimed = decision.note if decision is not None else ""
        return f"via webhook (claimed: {_short(claimed, 80)})" if claimed else "via webhook"
    by = _who(request.decided_by)
    if isinstance(decision, Approve) and decision.standing_of:
        return f"by {by}'s approval for this run ({_inline_code(decision.standing_of)})"
    return f"by {by}"


def _outcome(request: ApprovalRequest) -> tuple[str, str]:
    """(trusted mrkdwn lead, raw detail to escape) stating the decision."""
    status = request.status
    decision = request.decision
    by = _decider(request)
    emoji = _OUTCOME_EMOJI.get(status, ":grey_question:")
    always = isinstance(decision, Approve | Reject) and decision.always
    if status == "approved":
        if request.route.quorum > 1 and request.approvals:
            lead = f"Approved by {_who_list(request.approvals)}"
            lead += f" ({len(request.approvals)} of {request.route.quorum} approvals)"
        else:
            lead = f"Approved {by}"
        if always:
            lead += f", also for later calls of {_inline_code(request.tool)} in this run"
        return f"{emoji} {lead}", ""
    if status == "rejected":
        lead = f"{emoji} Rejected {by}"
        if always:
            lead += f", also for later calls of {_inline_code(request.tool)} in this run"
        detail = _decision_detail(request)
        return (lead + ": " if detail else lead), detail
    if status == "changes_requested":
        detail = _decision_detail(request)
        lead = f"{emoji} Changes requested {by}"
        return (lead + ": " if detail else lead), detail
    if status == "answered":
        detail = _decision_detail(request)
        lead = f"{emoji} Answered {by}"
        return (lead + ": " if detail else lead), detail
    if status == "expired":
        what = (
            "the question went unanswered" if request.kind == "question" else "the call was not run"
        )
        deadline = slack_date(request.expires_at)
        return f"{emoji} Expired — nobody decided before {deadline}; {what}", ""
    if status == "pending":
        return f"{emoji} Waiting for a decision: {_quorum_line(request)}", ""
    return f"{emoji} {_short(status, 100)} {by}", ""


def _decided_header(request: ApprovalRequest) -> str:
    verb = _OUTCOME_VERB.get(request.status, request.status.replace("_", " ").capitalize())
    if request.kind == "question":
        return f"{verb}: question from {request.agent}"
    return f"{verb}: {request.tool}"


def decided_message(request: ApprovalRequest) -> tuple[str, list[Block]]:
    """Fallback text and blocks of a decided request: no buttons, the outcome and its time."""
    blocks = _body(request, _decided_header(request))
    lead, detail = _outcome(request)
    when = ""
    if request.decided_at is not None:
        when = f"\n_Decided {slack_date(request.decided_at)}_"
    blocks.append(_section(_mrkdwn(detail, SECTION_TEXT_MAX, lead, when)))
    fallback = f"{_decided_header(request)}, decided by {request.decided_by or 'nobody'}"
    if detail:
        fallback += f": {_one_line(detail)}"
    return _short(fallback, FALLBACK_TEXT_MAX), blocks[:MESSAGE_BLOCKS_MAX]


# -- modals ---------------------------------------------------------------------------------
def _call_context(request: ApprovalRequest) -> Block:
    lead = f"{_inline_code(request.tool)} for agent {_short(request.agent)} · "
    summary = _arguments_summary(request.arguments, 500)
    return _context(_mrkdwn(summary, CONTEXT_TEXT_MAX, lead))


def _modal(
    request: ApprovalRequest, callback_id: str, title: str, submit: str, blocks: list[Block]
) -> Block:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": modal_metadata(request.request_id, request.pause_id),
        "title": _text(_plain(title, MODAL_TITLE_MAX), "plain_text"),
        "submit": _text(_plain(submit, MODAL_TITLE_MAX), "plain_text"),
        "close": _text("Cancel", "plain_text"),
        "blocks": blocks,
    }


def _input(block_id: str, action_id: str, label: str, placeholder: str, optional: bool) -> Block:
    element: Block = {
        "type": "plain_text_input",
        "action_id": action_id,
        "multiline": True,
        "max_length": INPUT_MAX_LENGTH,
        "placeholder": _text(_plain(placeholder, PLACEHOLDER_MAX), "plain_text"),
    }
    if not optional:
        element["min_length"] = 1
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": _text(label, "plain_text"),
        "element": element,
    }


def reject_modal(request: ApprovalRequest) -> Block:
    """The `views.open` view asking for an optional reason before rejecting."""
    what = "question" if request.kind == "question" else "call"
    blocks = [
        _section(
            f"Reject this {what} from *{_short(request.agent)}*? "
            "The reason, if you give one, becomes the tool's output the model sees."
        ),
        _call_context(request),
        _input(
            REASON_BLOCK,
            REASON_INPUT,
            "Reason (optional)",
            "Why not? The agent sees this.",
            optional=True,
        ),
    ]
    return _modal(request, REJECT_MODAL, "Reject request", "Reject", blocks)


def answer_modal(request: ApprovalRequest) -> Block:
    """The `views.open` view asking for the answer to a question."""
    blocks = [
        _section(_mrkdwn(_question_text(request), SECTION_TEXT_MAX, "*Question*\n")),
        _call_context(request),
        _input(
            ANSWER_BLOCK,
            ANSWER_INPUT,
            "Your answer",
            "The agent receives this as the tool's result.",
            optional=False,
        ),
    ]
    return _modal(request, ANSWER_MODAL, "Answer question", "Send answer", blocks)


# -- run outcome ----------------------------------------------------------------------------
def _not_run_line(request: ApprovalRequest) -> str | None:
    tool = _inline_code(_one_line(request.tool))
    detail = _one_line(_decision_detail(request))
    if request.status == "rejected":
        line = f"• {tool} was rejected by {_who(request.decided_by)}"
    elif request.status == "changes_requested":
        line = f"• {tool}: changes requested by {_who(request.decided_by)}"
    elif request.status == "expired":
        return f"• {tool} expired before anyone decided; it was not run"
    else:
        return None
    if detail:
        line += f": {_short(detail)}"
    return line


def outcome_message(run: RunSummary, requests: Iterable[ApprovalRequest]) -> str:
    """The thread reply for a finished run: its output or error and what was not run."""
    if run.status == "succeeded":
        lead, raw = "Run finished", run.output.strip() or "(no output)"
    elif run.status == "failed":
        lead, raw = "Run failed", run.error.strip() or "(no error message)"
    else:
        lead, raw = f"Run {escape(run.status)}", (run.output or run.error).strip() or "—"
    lines = [line for r in requests if (line := _not_run_line(r)) is not None]
    suffix = ""
    if lines:
        suffix = "\n*Not run:*"
        for index, line in enumerate(lines):
            more = f"\n• … and {len(lines) - index} more"
            if _units(suffix + "\n" + line) > OUTCOME_LISTING_MAX - _units(more):
                suffix += more
                break
            suffix += "\n" + line
    return _mrkdwn(raw, OUTCOME_TEXT_MAX, f"{lead}: ", suffix)
