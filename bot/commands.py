"""`/approvals`: one slash command, ephemeral replies, read from the pending index.

pending [all] [next:<cursor>]   requests waiting here (or everywhere), newest first
show <request-id>               one request's details and history
routes                          the routing rules
route add <spec>                add a rule (admins)
route remove <id>               remove a rule (admins)
help
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Collection

from agent_host.approvals import ApprovalRequest
from agent_host.store import RunStore

from .blocks import escape, mask_secrets
from .route_rules import RouteSpecError, format_rules, parse_spec
from .routing import RouteBook

__all__ = ["SlashCommands", "help_text"]

PAGE = 10


def help_text() -> str:
    return (
        "*`/approvals` — countersign*\n"
        "• `/approvals pending` — requests waiting in this channel (`pending all`: everywhere)\n"
        "• `/approvals show <request-id>` — details and history of one request\n"
        "• `/approvals routes` — where requests go and who may decide them\n"
        "• `/approvals route add agent=<glob> tool=<glob> severity=<min> channel=<#channel> "
        "reviewers=<@user>,<@group> quorum=<n> expiry=<24h> self=<yes|no>` — admins only\n"
        "• `/approvals route remove <id>` — admins only\n"
        "• `/approvals help` — this text"
    )


class SlashCommands:
    def __init__(self, store: RunStore, routes: RouteBook, admins: Collection[str]) -> None:
        self.store, self.routes, self.admins = store, routes, frozenset(admins)

    async def handle(self, user_id: str, channel_id: str, text: str) -> str:
        words = text.strip().split()
        command, rest = (words[0].lower(), words[1:]) if words else ("help", [])
        if command in ("pending", "route"):  # keywords, not ids or specs: any case
            rest = [w.lower() if w.lower() in ("all", "add", "remove") else w for w in rest]
        if command == "pending":
            return await self.pending(channel_id, rest)
        if command == "show" and len(rest) == 1:
            return await self.show(rest[0])
        if command == "routes" and not rest:
            return format_rules(await self.routes.list(), self.routes.default_channel)
        if command == "route" and rest and rest[0] in ("add", "remove"):
            if user_id not in self.admins:
                return (
                    ":no_entry: Only admins can change routing (COUNTERSIGN_ADMINS). "
                    "Ask one of them, or see `/approvals routes`."
                )
            spec = text.strip().split(None, 2)[2] if len(rest) > 1 else ""
            return await (self.add_route if rest[0] == "add" else self.remove_route)(user_id, spec)
        prefix = "" if command == "help" else f"Unknown command `{escape(text.strip())}`.\n"
        return prefix + help_text()

    async def pending(self, channel_id: str, args: list[str]) -> str:
        everywhere = "all" in args
        cursor = next((a.split(":", 1)[1] for a in args if a.startswith("next:")), None)
        try:
            page = await self.store.list_pending(None if everywhere else channel_id, cursor, PAGE)
        except ValueError:
            return "That `next:` page marker is not one countersign gave; run `/approvals pending`."
        where = "anywhere" if everywhere else f"in <#{channel_id}>"
        if not page.requests:
            hint = "" if everywhere else " (`/approvals pending all` lists every channel)"
            return f"Nothing is waiting for a decision {where}{hint}."
        lines = [f"*Waiting for a decision {where}* (newest first):"]
        lines += [_line(r) for r in page.requests]
        if page.next_cursor:
            scope = " all" if everywhere else ""
            lines.append(f"More: `/approvals pending{scope} next:{page.next_cursor}`")
        return "\n".join(lines)

    async def show(self, request_id: str) -> str:
        request = await self.store.get_request(request_id)
        if request is None:
            return (
                f"No request `{escape(request_id)}`. Request ids look like `req_…`; "
                "`/approvals pending all` lists the open ones."
            )
        lines = [
            f"*{escape(request.tool)}* requested by {_who(request.requested_by)} "
            f"for agent `{escape(request.agent)}` — *{request.status}*",
            f"Reason: {escape(request.reason)}  •  severity {request.severity}",
            f"Arguments: `{escape(json.dumps(mask_secrets(request.arguments)))[:1500]}`",
            f"Run `{request.run_id}`  •  hash `{request.call_hash[:12]}`  •  "
            f"expires {_date(request.expires_at)}",
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
            actor = _who(entry.get("actor", ""))
            lines.append(
                f"• {_date(float(entry['at']))} {escape(entry.get('event', ''))} by {actor}"
            )
        return "\n".join(lines)

    async def add_route(self, user_id: str, spec: str) -> str:
        try:
            rule = parse_spec(spec)
        except RouteSpecError as exc:
            return f":warning: {escape(str(exc))}"
        saved = await self.routes.add(rule, user_id)
        return f":white_check_mark: Added route `{saved.id}`.\n" + format_rules(
            [saved], self.routes.default_channel
        )

    async def remove_route(self, user_id: str, rule_id: str) -> str:
        rule_id = rule_id.strip()
        if not rule_id:
            return (
                ":warning: Say which route: `/approvals route remove r1` (see `/approvals routes`)."
            )
        removed = await self.routes.remove(rule_id, user_id)
        if removed is None:
            return f":warning: No route `{escape(rule_id)}`; `/approvals routes` lists them."
        return f":wastebasket: Removed route `{removed.id}`."


def _line(request: ApprovalRequest) -> str:
    what = request.question if request.kind == "question" else request.tool
    progress = (
        f" ({len(request.approvals)}/{request.route.quorum})" if request.route.quorum > 1 else ""
    )
    return (
        f"• `{request.request_id}` *{escape(what)}* by `{escape(request.agent)}` "
        f"— {request.severity}{progress}, asked by {_who(request.requested_by)}, "
        f"expires {_date(request.expires_at)}"
    )


def _who(user: str) -> str:
    if user.startswith(("U", "W")) and user.isalnum():
        return f"<@{user}>"
    return escape(user) if user else "—"


def _date(at: float) -> str:
    fallback = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(at)}^{{date_short_pretty}} {{time}}|{fallback}>"
