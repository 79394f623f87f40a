"""`/approvals`: one slash command, ephemeral replies, read from the pending index.

pending [all]                   requests waiting here (or everywhere), newest first; each
                                with its arguments in one line, its age and a link to its
                                message; more behind a **Next page** button
show <request-id>               one request's details and history
routes                          the routing rules
route add <spec>                add a rule (admins)
route remove <id>               remove a rule (admins)
help

A member sees only what bot/visibility.py lets them see: `pending all` lists every request
for admins, and for anyone else the requests they may decide (and those of this channel);
`show` of a request they may not see answers as for an id that does not exist.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from agent_host.approvals.routes import (
    RouteRule,
    RouteSpecError,
    format_rules,
    no_agent_called,
    parse_spec,
)
from agent_host.durable.route_book import RouteBook
from agent_host.durable.store import RunStore, parse_cursor
from agent_host.errors import CheckpointError
from bot.blocks import PENDING_NEXT, mask_secrets
from bot.blocks.limits import FALLBACK_TEXT_MAX, SECTION_TEXT_MAX, plain_within
from bot.blocks.listing import request_line
from bot.delivery import ChannelFacts, exposes, exposure, listing_refused
from bot.mrkdwn import channel_link, date, escape, inline_code, mention, person
from bot.permalinks import Permalinks
from bot.reviewers import SlackReviewerDirectory
from bot.visibility import Viewer, Visibility

__all__ = ["CommandReply", "SlashCommands", "help_text", "within_reply"]

PAGE = 10
REPLY_TEXT_MAX = 39_000  # characters of a text reply (Slack refuses one over 40,000)
LINKS_BUDGET = 0.6  # seconds for the page's chat.getPermalink calls (the reply is due in 3 s)
AGENTS_NAMED = 10  # the agents a note of `route add` names at most
LOOKUPS_WITHIN = 1.5  # seconds for Slack's answers to `route add`, of the command's 2 s
SLACK_TOO_SLOW = (
    ":hourglass: Route not added: Slack did not answer in time when asked about the channels "
    "and user groups it names. Nothing was changed; try again in a moment."
)
ARGUMENTS_MAX = 1500  # characters of a request's arguments shown by `show`
REASON_MAX = 500  # characters of its reason (as code: the words are never formatting)
# A `next:` marker is sealed to its user: a page may end on a request they may not see, and
# a readable marker would name it. The run and request ids of the AEAD's associated data are
# this fixed label and the user, so a marker is no checkpoint and works for no one else.
_CURSOR_LABEL = "slash-pending-cursor"


def help_text() -> str:
    return (
        "*`/approvals` — countersign*\n"
        "• `/approvals pending` — requests waiting in this channel (`pending all`: those you "
        "may decide, in any channel; every request, for admins)\n"
        "• `/approvals show <request-id>` — details and history of one request\n"
        "• `/approvals routes` — where requests go and who may decide them\n"
        "• `/approvals route add agent=<glob> tool=<glob> severity=<min> channel=<#channel> "
        "reviewers=<@user>,<@group> quorum=<n> expiry=<24h> self=<yes|no> remind_after=<30m> "
        "escalate_after=<4h> escalate_to=<#channel|@group|@user>` — admins only\n"
        "• `/approvals route remove <id>` — admins only\n"
        "• `/approvals help` — this text"
    )


# How each command is typed, for one typed another way (said instead of "Unknown command").
USAGE = {
    "pending": "`/approvals pending`, or `/approvals pending all`",
    "show": "`/approvals show <request-id>` (each request's id is in `/approvals pending`)",
    "routes": "`/approvals routes`, with nothing after it",
    "route": "`/approvals route add <spec>` or `/approvals route remove <id>` (admins only)",
}


def _misused(command: str, rest: list[str]) -> str | None:
    """What to type instead, for a known command given what it does not take; else None."""
    if command == "pending":
        fits = all(word == "all" or word.startswith("next:") for word in rest)
    elif command == "show":
        fits = len(rest) == 1
    elif command == "routes":
        fits = not rest
    elif command == "route":
        fits = bool(rest) and rest[0] in ("add", "remove")
    else:
        return None
    if fits:
        return None
    given = inline_code(" ".join([command, *rest]))
    return f"{given} is not how `/approvals {command}` is typed: {USAGE[command]}."


# Whether the bot can post in a channel, and whether it is private: bot.delivery.channel_facts.
ChannelCheck = Callable[[str], Awaitable[ChannelFacts]]


@dataclass(frozen=True)
class CommandReply:
    """A reply with blocks (`text` is then its notification fallback)."""

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)


def within_reply(listing: str, limit: int = REPLY_TEXT_MAX) -> str:
    """`listing` (one line a route, its last line where anything else goes) cut to whole
    lines within `limit` characters, saying how many routes were left out: a reply past
    Slack's limit is refused, and the admin would see no route at all."""
    if len(listing) <= limit:
        return listing
    *lines, last = listing.split("\n")
    room = limit - len(last) - 200  # the note
    shown: list[str] = []
    for line in lines:
        room -= len(line) + 1
        if room < 0:
            break
        shown.append(line)
    note = (
        f"… and {len(lines) - len(shown)} more routes after these, matched in this order, "
        "not shown: the listing is longer than one Slack message"
    )
    return "\n".join([*shown, note, last])


def _shadowed(rule: RouteRule, earlier: list[RouteRule]) -> str:
    """A warning when routes listed before `rule` take its calls (the first matching route
    wins: a route added last never applies where an earlier one matches), or ""."""
    first = next((r for r in earlier if r.covers(rule)), None)
    if first is not None:
        how = f"takes every call this one would, so `{rule.id}` will take none"
    elif (first := next((r for r in earlier if r.overlaps(rule)), None)) is not None:
        how = f"takes the calls both match; for those, `{first.id}` applies, not `{rule.id}`"
    else:
        return ""
    return (
        f"\n:warning: Route `{first.id}` comes first and {how} (the first matching route "
        f"wins). To put `{rule.id}` first, remove `{first.id}` (`/approvals route remove "
        f"{first.id}`) and add it again after this one."
    )


def _exposed(rule: RouteRule, facts: list[ChannelFacts]) -> str:
    """A warning when `rule` escalates from a private channel to a public one (its
    requests, arguments included, would be read by anyone there once escalated), or ""."""
    if len(facts) != 2 or not exposes(*facts):
        return ""
    return (
        f"\n:warning: Route `{rule.id}` {exposure(rule.channel, rule.escalate_to)}. To keep "
        f"them private, remove it (`/approvals route remove {rule.id}`) and add it again "
        "escalating to a private channel, a user group or a person."
    )


def _people_unchecked(rule: RouteRule) -> str:
    """A note when `rule` names people by user id, or "": countersign reads no user
    profiles (no `users:read`), so a mistyped id is added as it is, and its requests would
    wait for someone who does not exist."""
    people = [r for r in (*rule.reviewers, rule.escalate_to) if r[:1] in ("U", "W")]
    if not people:
        return ""
    return (
        "\n:information_source: People are not looked up (countersign reads no user "
        f"profiles): check that {', '.join(mention(p) for p in people)} each show as a "
        f"person above. If one shows as an id, remove the route (`/approvals route remove "
        f"{rule.id}`) and add it again with the right id."
    )


def _agent_unknown(rule: RouteRule, agents: Collection[str]) -> str:
    """A note when `rule` names agents none of this countersign's agents is called, or "":
    a mistyped name would leave the agent's calls to another route (or the default
    channel's people). Agents that run elsewhere and ask over the HTTP API send names of
    their own, so the route is added all the same."""
    if not (unknown := no_agent_called(rule.agent, agents)):
        return ""
    named = sorted(agents)
    known = ", ".join(inline_code(a) for a in named[:AGENTS_NAMED])
    if len(named) > AGENTS_NAMED:
        known += f" and {len(named) - AGENTS_NAMED} more"
    said = escape(unknown[:1].upper() + unknown[1:])
    return (
        f"\n:information_source: {said}; it runs {known}. The route applies to agents that"
        " ask over the HTTP API under that name. If it is a typo, remove it (`/approvals"
        f" route remove {rule.id}`) and add it again."
    )


def _quorum_problem(rule: RouteRule, groups: dict[str, Any]) -> str:
    """Why the route's reviewers, its groups' members counted, are too few for its quorum
    (its requests could only expire), or ""."""
    if rule.quorum == 1 or not any(r.startswith("S") for r in rule.reviewers):
        return ""  # a quorum of listed users alone is checked with the rule itself
    people = {r for r in rule.reviewers if not r.startswith("S")}
    for reviewer in rule.reviewers:
        people |= groups.get(reviewer, frozenset())
    if len(people) >= rule.quorum:
        return ""
    return (
        f"quorum {rule.quorum} needs more approvers than the {len(people)} people its "
        "reviewers name; lower the quorum or add reviewers"
    )


class SlashCommands:
    def __init__(
        self,
        store: RunStore,
        routes: RouteBook,
        admins: Collection[str],
        reviewers: SlackReviewerDirectory,
        channel_check: ChannelCheck | None = None,
        permalinks: Permalinks | None = None,
        agents: Collection[str] = (),
    ) -> None:
        self.store, self.routes, self.admins = store, routes, frozenset(admins)
        self.agents = frozenset(agents)  # the names of the agents this countersign runs
        self.visibility = Visibility(reviewers, self.admins)
        self.directory = reviewers
        self.channel_check = channel_check
        self.permalinks = permalinks

    async def handle(self, user_id: str, channel_id: str, text: str) -> str | CommandReply:
        words = text.strip().split()
        command, rest = (words[0].lower(), words[1:]) if words else ("help", [])
        if command in ("pending", "route"):  # keywords, not ids or specs: any case
            rest = [w.lower() if w.lower() in ("all", "add", "remove") else w for w in rest]
        if (misused := _misused(command, rest)) is not None:
            return misused
        viewer = self.visibility.viewer(user_id, channel_id)
        if command == "pending":
            return await self.pending(viewer, rest)
        if command == "show" and len(rest) == 1:
            return await self.show(viewer, rest[0])
        if command == "routes" and not rest:
            return within_reply(await self.routes_for(user_id, channel_id))
        if command == "route" and rest and rest[0] in ("add", "remove"):
            if user_id not in self.admins:
                return (
                    ":no_entry: Only admins can change routing (COUNTERSIGN_ADMINS). "
                    "Ask one of them, or see `/approvals routes`."
                )
            spec = text.strip().split(None, 2)[2] if len(rest) > 1 else ""
            return await (self.add_route if rest[0] == "add" else self.remove_route)(user_id, spec)
        prefix = "" if command == "help" else f"Unknown command {inline_code(text.strip())}.\n"
        return prefix + help_text()

    async def routes_for(self, user_id: str, channel_id: str) -> str:
        """The routing rules, in the order they match: every one for an admin; for anyone
        else those into the channel the command was typed in and those naming them (a
        route into a private channel, its reviewers and its self-approval are no
        outsider's to read)."""
        rules = await self.routes.rules()
        default = self.routes.default_channel
        if user_id in self.admins:
            return format_rules(rules, default)
        shown = [r for r in rules if r.channel == channel_id or user_id in r.reviewers]
        hidden = len(rules) - len(shown)
        if not hidden:
            return format_rules(shown, default)
        listing = format_rules(shown, default) if shown else "No route here or naming you."
        return (
            f"{listing}\n{hidden} more route{'s' if hidden != 1 else ''}, into other "
            "channels, listed to admins only (COUNTERSIGN_ADMINS); type `/approvals routes` "
            "in a routed channel to see its routes."
        )

    async def pending(self, viewer: Viewer, args: list[str]) -> str | CommandReply:
        everywhere = "all" in args
        # A `next:` marker typed by hand (replies used to show one) still works; pages come
        # from the Next page button now.
        marker = next((a.split(":", 1)[1] for a in args if a.startswith("next:")), None)
        return await self._page(viewer, everywhere, marker)

    async def next_page(self, user_id: str, channel_id: str, value: str) -> str | CommandReply:
        """The page a **Next page** button (`PENDING_NEXT`) names: its value is the scope
        and the sealed marker, `here:<marker>` or `all:<marker>`."""
        scope, _, marker = value.partition(":")
        viewer = self.visibility.viewer(user_id, channel_id)
        return await self._page(viewer, scope == "all", marker if scope in _SCOPES else "")

    async def _page(
        self, viewer: Viewer, everywhere: bool, marker: str | None
    ) -> str | CommandReply:
        cursor = self._unseal(viewer.user_id, marker) if marker is not None else None
        if marker is not None and cursor is None:
            return "That page marker is not one countersign gave you; run `/approvals pending`."
        destination = None if everywhere else viewer.channel_id
        page = await viewer.page(self.store, destination, cursor, PAGE)
        here = channel_link(viewer.channel_id)
        if not everywhere:
            where, hint = f"in {here}", " (`/approvals pending all` looks in every channel)"
        elif viewer.admin:
            where, hint = "anywhere", ""
        else:  # `all` is everything for admins only; a reviewer gets what they may act on
            in_dm = viewer.channel_id.startswith("D")
            where, hint = "that you may decide" + ("" if in_dm else f", or in {here}"), ""
        notes = []
        if viewer.refused:
            notes.append(listing_refused(viewer.refused))
        elif viewer.unsure:
            notes.append(
                ":warning: Slack could not say in time who is in a reviewer group, so requests "
                "for that group may be missing; try again in a moment."
            )
        if not page.requests:
            more = " more" if marker is not None else ""
            return "\n".join([f"Nothing{more} is waiting for a decision {where}{hint}.", *notes])
        links = {}
        if self.permalinks is not None:
            links = await self.permalinks.of_requests(page.requests, LINKS_BUDGET)
        now = time.time()
        title = f"*Waiting for a decision {where}* (newest first):"
        body: list[dict[str, Any]] = [_section(title)]
        body += [_section(request_line(r, now, links.get(r.request_id, ""))) for r in page.requests]
        body += [{"type": "context", "elements": [_mrkdwn(n)]} for n in notes]
        if page.next_cursor:
            scope = "all" if everywhere else "here"
            sealed = self._seal(viewer.user_id, page.next_cursor)
            body.append(
                {
                    "type": "actions",
                    "block_id": "pending_pages",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": PENDING_NEXT,
                            "text": {"type": "plain_text", "text": "Next page"},
                            "value": f"{scope}:{sealed}",
                        }
                    ],
                }
            )
        count = len(page.requests)
        fallback = f"Waiting for a decision {where}: {count} request{'s' if count > 1 else ''}"
        return CommandReply(plain_within(fallback, FALLBACK_TEXT_MAX), body)

    async def show(self, viewer: Viewer, request_id: str) -> str:
        request = await self.store.get_request(request_id)
        # A request this member may not see is answered exactly as one that does not exist.
        if request is None or not await viewer.sees(request):
            return (
                f"No request {inline_code(request_id)}. Request ids look like `req_…`; "
                "`/approvals pending all` lists the open ones you can see."
            )
        arguments = json.dumps(mask_secrets(request.arguments))
        lines = [
            f"{inline_code(request.tool)} requested by {person(request.requested_by)} "
            f"for agent {inline_code(request.agent)} — *{request.status}*",
            f"Reason: {inline_code(request.reason, REASON_MAX)}  •  "
            f"severity {escape(request.severity)}",
            f"Arguments: {inline_code(arguments, ARGUMENTS_MAX)}",
            f"Run {inline_code(request.run_id)}  •  hash {inline_code(request.call_hash[:12])}  •  "
            f"expires {date(request.expires_at)}",
        ]
        if request.route.quorum > 1:
            lines.append(f"Approvals: {len(request.approvals)} of {request.route.quorum}")
        history = [
            e
            for e in await self.store.audit(request.run_id)
            if e.get("request_id") in (None, request.request_id)
        ]
        lines.append("*History*")
        for entry in history[-15:]:
            actor = person(entry.get("actor", ""))
            lines.append(
                f"• {date(float(entry['at']))} {escape(entry.get('event', ''))} by {actor}"
            )
        return "\n".join(lines)

    async def add_route(self, user_id: str, spec: str) -> str:
        try:
            rule = parse_spec(spec)
        except RouteSpecError as exc:
            return f":warning: {escape(str(exc))}"
        # A route into a channel the bot cannot post in would strand every request it takes;
        # one escalating into such a channel would escalate into silence. One escalating
        # from a private channel to a public one is added, with a warning (`_exposed`).
        channels = [rule.channel]
        if rule.escalate_to[:1] in ("C", "G"):
            channels.append(rule.escalate_to)
        checks = [self.channel_check(c) for c in channels] if self.channel_check else []
        # A user group that does not exist, or has nobody in it, would leave its requests to
        # nobody (or escalate them to nobody); too few people for the quorum, to expiry.
        groups = [g for g in (*rule.reviewers, rule.escalate_to) if g.startswith("S")]
        try:  # Slack's answers at once, leaving the budget's rest for the write
            async with asyncio.timeout(LOOKUPS_WITHIN):
                facts, listed = await asyncio.gather(
                    asyncio.gather(*checks),
                    asyncio.gather(*map(self.directory.group_listed, groups)),
                )
        except TimeoutError:
            return SLACK_TOO_SLOW
        for checked in facts:
            if checked.problem:
                return f":warning: Route not added: {checked.problem}"
        for found in listed:
            if isinstance(found, str):
                return f":warning: Route not added: {found}, then add the route again."
        if too_few := _quorum_problem(rule, dict(zip(groups, listed, strict=True))):
            return f":warning: Route not added: {too_few}."
        earlier = await self.routes.rules()
        saved = await self.routes.add(rule, user_id)
        added = f":white_check_mark: Added route `{saved.id}`.\n" + format_rules(
            [saved], self.routes.default_channel
        )
        notes = _exposed(saved, facts) + _people_unchecked(saved)
        return added + _shadowed(saved, earlier) + notes + _agent_unknown(saved, self.agents)

    async def remove_route(self, user_id: str, rule_id: str) -> str:
        rule_id = rule_id.strip()
        if not rule_id:
            return (
                ":warning: Say which route: `/approvals route remove r1` (see `/approvals routes`)."
            )
        removed = await self.routes.remove(rule_id, user_id)
        if removed is None:
            return f":warning: No route {inline_code(rule_id)}; `/approvals routes` lists them."
        return (
            f":wastebasket: Removed route `{removed.id}`. Requests already waiting under it "
            "keep it (its channel, reviewers and ladder) until they are decided or expire."
        )

    def _seal(self, user_id: str, cursor: str) -> str:
        blob = self.store.keyring.encrypt(cursor.encode(), run_id=_CURSOR_LABEL, request_id=user_id)
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def _unseal(self, user_id: str, marker: str) -> str | None:
        """The store cursor inside a `next:` marker given to this user; None for any other."""
        try:
            blob = base64.urlsafe_b64decode(marker + "=" * (-len(marker) % 4))
            cursor = self.store.keyring.decrypt(
                blob, run_id=_CURSOR_LABEL, request_id=user_id
            ).decode()
            parse_cursor(cursor)
        except (binascii.Error, ValueError, CheckpointError):
            return None
        return cursor


_SCOPES = ("here", "all")


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": plain_within(text, SECTION_TEXT_MAX)}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}
