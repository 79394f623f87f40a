"""When Slack refuses a message: retry it, or give up and say what to fix.

Slack answers a failed Web API call with `{"ok": false, "error": <code>}`. A few codes, and
HTTP 429 and 5xx, mean "not now" and are retried; the others are about the request itself
(a channel the bot is not in, an archived channel, a deleted message, a revoked token) and
no retry can change them. Those are raised as agent_host's chat-neutral `DeliveryFailed`,
and the texts here tell people how to fix each one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError

from agent_host.approvals import ApprovalRequest
from agent_host.durable.every import Every
from agent_host.errors import ConfigurationError, DeliveryFailed, RetryLater
from bot.mrkdwn import channel_link, inline_code, mention

__all__ = [
    "APP_REFUSED",
    "APP_REFUSED_SAID_EVERY",
    "PERMANENT",
    "RETRYABLE",
    "ChannelFacts",
    "Refused",
    "admin_alert",
    "app_refused",
    "channel_facts",
    "error_code",
    "exposes",
    "exposure",
    "is_rate_limited",
    "is_retryable",
    "known",
    "listing_refused",
    "lookup_refused",
    "permanent_failure",
    "rerouted_note",
    "retry_after",
    "say_app_refused",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

# "Not now": Slack's rate limit and its own outages (its documented transient errors).
RETRYABLE = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "service_unavailable",
        "fatal_error",
        "internal_error",
        "request_timeout",
    }
)

# "Never": documented chat.* errors that no retry can change. Listed so that the decision
# is visible; an error in neither set is treated as permanent too (and logged), because
# Slack reports its transient conditions with 429, 5xx or the codes above.
PERMANENT = frozenset(
    {
        # the destination
        "not_in_channel",
        "channel_not_found",
        "is_archived",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "team_access_not_granted",
        "ekm_access_denied",
        "user_not_found",
        "user_not_in_channel",
        "messages_tab_disabled",
        # the message
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
        "invalid_blocks",
        "invalid_blocks_format",
        "invalid_attachments",
        "invalid_arguments",
        "msg_too_long",
        "no_text",
        "too_many_attachments",
        "markdown_text_conflict",
        # the token or the app
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "access_denied",
        "not_allowed_token_type",
        "org_login_required",
        "team_added_to_org",
        "two_factor_setup_required",
        "method_deprecated",
        "deprecated_endpoint",
    }
)

# A request of a route naming no reviewers, whose private channel refused it, is not
# rerouted to the default channel (its people would all read and decide it).
NOT_REROUTED = "not_rerouted_private"
_FIX = {
    "not_in_channel": "invite @countersign to it with `/invite @countersign`, or fix the route",
    "channel_not_found": (
        "it does not exist, or it is private and @countersign is not in it: invite the bot "
        "or fix the route"
    ),
    "is_archived": "it is archived: unarchive it or point the route at another channel",
    "invalid_auth": "the bot token is wrong: check SLACK_BOT_TOKEN",
    "not_authed": "no bot token was sent: check SLACK_BOT_TOKEN",
    "token_revoked": "the bot token was revoked: reinstall the app and update SLACK_BOT_TOKEN",
    "account_inactive": "the app was uninstalled or its workspace deleted: reinstall the app",
    "token_expired": "the bot token expired (token rotation): update SLACK_BOT_TOKEN",
    "missing_scope": "the app lacks a scope: reinstall it from manifest.yml",
    "not_allowed_token_type": (
        "SLACK_BOT_TOKEN is not a bot token: set it to the app's xoxb- token (OAuth & Permissions)"
    ),
    "access_denied": (
        "the workspace's admins do not let the app do this: ask them to approve the app, "
        "then reinstall it from manifest.yml"
    ),
    "escalated_to_requester": (
        "it escalates to the run's requester, who may not decide their own request: "
        "escalate the route to someone else"
    ),
    "no_members": "the user group has nobody else in it: add people or escalate elsewhere",
    NOT_REROUTED: (
        "its route names no reviewers and its channel is private (or could not be seen), so "
        "it was not posted to the default channel, whose people could all have read and "
        "decided it: invite @countersign back to its channel, or name the route's reviewers"
    ),
    DeliveryFailed.STOPPED: (
        "every countersign process that took it to post it stopped (killed or crashed) "
        "before it was done, so it was given up: see the logs and the processes' memory"
    ),
}
_FIX_OTHERWISE = "see `/approvals routes` and the countersign logs"
NO_DEFAULT_CHANNEL = (
    "COUNTERSIGN_DEFAULT_CHANNEL is unset: a request no route sends to a channel waits "
    "unposted until it is set, and one its channel refuses has no fallback; set it to a "
    "channel id (C…) the bot is in"
)


def error_code(exc: SlackApiError) -> str:
    response: Any = exc.response
    try:
        code = response.get("error")
    except (AttributeError, TypeError):
        code = None
    return str(code) if code else f"http_{getattr(response, 'status_code', 0)}"


# Slack refused the bot token itself: every message fails alike, none for a reason of its
# own, so none is given up for it; each waits until the token is fixed.
TOKEN_REFUSED = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)
TOKEN_CHECK_SECONDS = 5.0
# Slack's refusals of the app itself, not of one call: asking again changes nothing until
# an admin changes the app (its scopes, its token).
APP_REFUSED_SAID_EVERY = 60.0  # seconds: such a refusal, logged once a minute
APP_REFUSED = frozenset({"missing_scope", "not_allowed_token_type", "access_denied"}) | (
    TOKEN_REFUSED
)


@dataclass(frozen=True)
class Refused:
    """A lookup's answer when Slack refused the app itself (APP_REFUSED): what it said.
    Counts as "Slack could not say" for who may decide (fail closed); what the refused
    person is told comes from it."""

    code: str


def app_refused(exc: BaseException) -> str | None:
    """The code of Slack's refusal of the app itself (APP_REFUSED) that `exc` is, or None."""
    if not isinstance(exc, SlackApiError):
        return None
    code = error_code(exc)
    return code if code in APP_REFUSED else None


def known(found: Mapping[str, T | Refused | None]) -> tuple[dict[str, T | None], str | None]:
    """Lookups' answers as who may decide takes them (a refusal: Slack could not say),
    and the code of the first refusal among them, if any."""
    answers = {k: None if isinstance(v, Refused) else v for k, v in found.items()}
    return answers, next((v.code for v in found.values() if isinstance(v, Refused)), None)


def say_app_refused(said: Every, key: str, what: str, exc: SlackApiError, then: str) -> None:
    """Slack's refusal of the app (`what` was refused) logged as the error an operator must
    act on: what Slack said, the scope it names, the fix and `then` (what stops until
    it is fixed); once a minute per `key`, since every click asks again."""
    if not said.due(key):
        return
    code, needed = error_code(exc), exc.response.get("needed")
    log.error(
        "Slack refused %s (%s%s): %s. %s",
        what,
        code,
        f", needs {needed}" if needed else "",
        how_to_fix(code),
        then,
    )


def lookup_refused(what: str, code: str) -> str:
    """What a reviewer refused for want of a lookup Slack refuses the app is told: who
    must fix what, not to click again."""
    return (
        f"countersign may not {what}: Slack said {inline_code(code)} ({how_to_fix(code)})."
        " Ask a countersign admin to fix it"
    )


def listing_refused(code: str) -> str:
    """The note on a listing (App Home, `/approvals pending`) missing requests because
    Slack refused the app a lookup it needs (a person's channels, a group's members): who
    must fix what, not to look again in a moment."""
    return (
        f":warning: Slack refuses countersign a lookup this list needs: it said "
        f"{inline_code(code)} ({how_to_fix(code)}). Requests may be missing here until a "
        "countersign admin fixes it."
    )


class TokenRefused(RetryLater):
    """Slack refused the bot token itself: nothing can be posted until it is fixed."""


def token_refused(exc: SlackApiError) -> str | None:
    """Slack's refusal of the bot token itself, said with what to do; None for any other."""
    code = error_code(exc)
    if code not in TOKEN_REFUSED:
        return None
    return f"Slack refused SLACK_BOT_TOKEN ({code}): {how_to_fix(code)}"


async def refuse_a_refused_token(client: Any) -> None:
    """At start: a bot token Slack refuses is a ConfigurationError saying what to fix (not
    a process that runs and posts nothing). Slack not answering is said, and the start goes
    on: what is to be posted waits in the outbox until Slack answers."""
    try:
        async with asyncio.timeout(TOKEN_CHECK_SECONDS):
            await client.auth_test()
    except SlackApiError as exc:
        if (refused := token_refused(exc)) is not None:
            raise ConfigurationError(f"{refused}; then start countersign again") from exc
        log.warning("Slack answered auth.test with %s at start; starting", error_code(exc))
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        log.warning(
            "Slack did not answer auth.test at start (%s); starting: messages are posted "
            "once it answers",
            type(exc).__name__,
        )


def retry_after(exc: SlackApiError) -> float:
    """How many seconds Slack asked to wait after a 429 (its Retry-After; 1 if unsaid)."""
    headers = getattr(exc.response, "headers", None) or {}
    try:
        return max(float(headers.get("Retry-After", "1") or 1), 0.0)
    except (TypeError, ValueError):
        return 1.0


def is_rate_limited(exc: SlackApiError) -> bool:
    """Slack's 429: "ratelimited" in the body, or the status alone."""
    status = getattr(exc.response, "status_code", 200)
    return status == 429 or error_code(exc) == "ratelimited"


def is_retryable(exc: SlackApiError) -> bool:
    status = int(getattr(exc.response, "status_code", 200) or 200)
    if status == 429 or status >= 500:
        return True
    code = error_code(exc)
    if code not in RETRYABLE and code not in PERMANENT:
        log.warning("Slack error %r is not a known one; treated as permanent", code)
    return code in RETRYABLE


def permanent_failure(exc: SlackApiError, channel: str) -> DeliveryFailed:
    return DeliveryFailed(error_code(exc), channel)


def how_to_fix(code: str) -> str:
    return _FIX.get(code, _FIX_OTHERWISE)


def rerouted_note(failure: DeliveryFailed) -> str:
    """The line on a request posted to the default channel instead of its own."""
    return (
        f":warning: This request could not be posted to {channel_link(failure.channel)}: "
        f"{inline_code(failure.code)} — {how_to_fix(failure.code)}."
    )


def admin_alert(
    request: ApprovalRequest,
    failure: DeliveryFailed,
    rerouted_to: str | None,
    fallback_error: str = "",
) -> str:
    """The direct message to each admin: what was refused, where it is now, what to do."""
    where = channel_link(failure.channel) if failure.channel else "its channel"
    lines = [
        f":rotating_light: countersign could not post approval request "
        f"{inline_code(request.request_id)} (agent {inline_code(request.agent)}, "
        f"tool {inline_code(request.tool)}) to {where}: "
        f"{inline_code(failure.code)} — {how_to_fix(failure.code)}."
    ]
    if rerouted_to:
        lines.append(
            f"It was posted to {channel_link(rerouted_to)} instead; it can be decided there."
        )
    else:
        why = f" ({inline_code(fallback_error)})" if fallback_error else ""
        where_else = f"It could not be posted anywhere else either{why}"
        if fallback_error == NOT_REROUTED:
            where_else = f"It was not posted to the default channel ({how_to_fix(NOT_REROUTED)})"
        lines.append(
            f"{where_else}: it waits, undeliverable, until "
            f"it expires. See `/approvals show {request.request_id}`, or decide it through "
            "the HTTP API."
        )
    return "\n".join(lines)


def ladder_alert(request: ApprovalRequest, step: str, failures: list[DeliveryFailed]) -> str:
    """The direct message to each admin when a step of a request's ladder (its reminder,
    its escalation) was refused: where, why, how to fix it, and that the request still
    waits, the step not taken again."""
    where = channel_link(request.message_channel) if request.message_channel else "its channel"
    what = "remind the reviewers of" if step == "remind" else "escalate"
    lines = [
        f":warning: countersign could not {what} approval request "
        f"{inline_code(request.request_id)} (agent {inline_code(request.agent)}, "
        f"tool {inline_code(request.tool)}):"
    ]
    for failure in failures:
        to = _destination(failure.channel)
        lines.append(f"• {to}: {inline_code(failure.code)} — {how_to_fix(failure.code)}.")
    if step == "remind":
        lines.append(
            f"Nobody was reminded; it still waits for a decision until it expires, and its "
            f"reviewers may no longer see it in {where}. See `/approvals show "
            f"{request.request_id}`, and the route in `/approvals routes`."
        )
    else:
        lines.append(
            f"It still waits in {where} until it expires; see `/approvals show "
            f"{request.request_id}`, and the route's escalation in `/approvals routes`."
        )
    return "\n".join(lines)


def _destination(target: str) -> str:
    """A channel, a person or a user group, as Slack shows it ("its destination" if none)."""
    if target.startswith(("U", "W")):
        return mention(target)
    if target.startswith("S"):
        return f"<!subteam^{target}>"
    return channel_link(target) if target else "its destination"


LOOKUP_SECONDS = 1.0  # inside the slash command's 2 s budget (LISTENER_BUDGET), under Slack's 3 s


@dataclass(frozen=True)
class ChannelFacts:
    """What `conversations.info` said of a channel: `problem`, why the bot cannot post in
    it, with how to fix it (None when it can); `private`, whether only its members see it
    (a private channel or a direct message; None when Slack did not say)."""

    problem: str | None
    private: bool | None = None


def exposes(channel: ChannelFacts | None, escalation: ChannelFacts | None) -> bool:
    """Whether escalating from `channel` to `escalation` takes requests from a private
    channel to a public one, where anyone reads them, arguments included."""
    return (channel and channel.private, escalation and escalation.private) == (True, False)


def exposure(channel: str, escalation: str) -> str:
    """What a route escalating from the private `channel` to the public `escalation` shows,
    and to whom (mrkdwn; `route add` and `countersign check` both say it)."""
    return (
        f"escalates from the private {channel_link(channel)} to the public "
        f"{channel_link(escalation)}; once escalated, anyone there reads its requests, "
        "arguments included"
    )


async def is_public(client: Any, channel: str) -> bool:
    """Whether `channel` is a public channel, as `conversations.info` says (a private
    channel the bot is not in answers `channel_not_found`); False when Slack cannot say."""
    info = await _lookup(client, channel, "", token_refused_raises=True)
    if isinstance(info, str):  # why it could not be described
        return False
    return info.get("is_private") is False and not info.get("is_im") and not info.get("is_mpim")


async def channel_facts(
    client: Any, channel: str, *, then: str = "add the route again"
) -> ChannelFacts:
    """Whether the bot can post in `channel` (if not, why, how to fix it, and `then` what
    to do once fixed) and whether it is private, from one `conversations.info` call (scopes
    channels:read, groups:read): it says whether the channel exists for the bot, is
    archived, whether the bot is a member (`is_member`), and `is_private`. A private
    channel the bot is not in answers `channel_not_found`."""
    info = await _lookup(client, channel, then)
    if isinstance(info, str):
        return ChannelFacts(info)
    where = channel_link(channel)
    if info.get("is_archived"):
        return ChannelFacts(f"{where} is archived: unarchive it, or choose another channel.")
    if not info.get("is_member") and not info.get("is_im"):
        return ChannelFacts(f"I am not a member of {where}; {_invite(channel, then)}.")
    private = info.get("is_private")
    if info.get("is_im") or info.get("is_mpim"):
        private = True
    return ChannelFacts(None, private if isinstance(private, bool) else None)


async def _lookup(
    client: Any, channel: str, then: str, *, token_refused_raises: bool = False
) -> str | dict[str, Any]:
    """The channel as `conversations.info` describes it, or why it could not be read (with
    `token_refused_raises`, a refused bot token is TokenRefused: it says nothing of the
    channel)."""
    where = channel_link(channel)
    try:
        async with asyncio.timeout(LOOKUP_SECONDS):
            reply: Any = await client.conversations_info(channel=channel)
    except SlackApiError as exc:
        if token_refused_raises and (refused := token_refused(exc)) is not None:
            raise TokenRefused(refused) from exc
        code = error_code(exc)
        if code == "channel_not_found":
            return (
                f"I cannot see {where}: it does not exist, or it is private and I am not "
                f"in it; {_invite(channel, then)}."
            )
        if code == "missing_scope":
            return (
                "I may not look up channels: the app lacks the `channels:read` and "
                f"`groups:read` scopes; reinstall it from manifest.yml, then {then}."
            )
        return (
            f"Slack refused to describe {where} ({inline_code(code)}); "
            f"{_FIX.get(code, 'try again')}."
        )
    except (TimeoutError, OSError, aiohttp.ClientError):
        return f"Slack did not answer whether I can post in {where}; try again in a moment."
    info = reply.get("channel")
    return info if isinstance(info, dict) else {}


def _invite(channel: str, then: str) -> str:
    return f"invite the bot with `/invite @countersign` in {channel_link(channel)}, then {then}"
