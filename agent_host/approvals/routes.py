"""Routing rules, the values: what a rule matches and where it sends a request, parsed and
validated the same way from `/approvals route add <spec>` (`parse_spec`) and from
`COUNTERSIGN_ROUTES_FILE` (`load_routes_file`). `agent_host.durable.route_book` keeps them in Redis.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import yaml

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, Route
from agent_host.errors import ConfigurationError, CountersignError
from agent_host.runtime.policy import Severity

__all__ = [
    "CHANNEL_ID",
    "MAX_EXPIRY_SECONDS",
    "MAX_QUORUM",
    "RouteRule",
    "RouteSpecError",
    "RoutesFileError",
    "did_you_mean",
    "format_duration",
    "format_rules",
    "load_routes_file",
    "parse_duration",
    "parse_spec",
    "same_rules",
]

MAX_QUORUM = 10
MAX_EXPIRY_SECONDS = 30 * 86400

SPEC_EXAMPLE = "route add tool=issue_refund channel=C0APPROVALS reviewers=U0REVIEWER quorum=1"
FILE_EXAMPLE = """routes:
  - agent: "refund-*"
    tool: "issue_refund"
    min_severity: high
    channel: C0APPROVALS
    reviewers: [U0REVIEWER, S0FINANCE]
    quorum: 2
    expiry: 24h
    remind_after: 30m
    escalate_after: 4h
    escalate_to: C0OPS
    allow_self_approval: false"""

CHANNEL_ID = re.compile(r"^[CG][A-Z0-9]+$")  # a public (C…) or private (G…) channel
_REVIEWER = re.compile(r"^[UWS][A-Z0-9]+$")
_CHANNEL_MENTION = re.compile(r"^<#([A-Z0-9]+)(?:\|[^>]*)?>$")
_USER_MENTION = re.compile(r"^<@([A-Z0-9]+)(?:\|[^>]*)?>$")
_GROUP_MENTION = re.compile(r"^<!subteam\^([A-Z0-9]+)(?:\|[^>]*)?>$")
_DURATION = re.compile(r"^(\d{1,9})\s*([smhd])$")  # (9 digits: past any range checked)
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_GLOB_FORBIDDEN = re.compile(r"[\s<>&`]")
_GLOB_SPECIAL = re.compile(r"[*?\[]")


def _glob_covers(glob: str, other: str) -> bool:
    """Whether every name `other` matches, `glob` matches too (as far as can be told without
    comparing two patterns: `*`, the same pattern, or a plain name it matches)."""
    if glob in ("*", other):
        return True
    return not _GLOB_SPECIAL.search(other) and fnmatch.fnmatchcase(other, glob)


def _globs_overlap(one: str, other: str) -> bool:
    """Whether some name could match both: told for a plain name; for two globs, unless
    their plain starts or ends differ (`refund-*`, `cleanup-*`), they are taken to."""
    if not _GLOB_SPECIAL.search(one):
        return fnmatch.fnmatchcase(one, other)
    if not _GLOB_SPECIAL.search(other):
        return fnmatch.fnmatchcase(other, one)
    if "[" in one + other:  # a character class: not worth telling
        return True
    starts = [re.split(r"[*?]", glob, maxsplit=1)[0] for glob in (one, other)]
    ends = [re.split(r"[*?]", glob)[-1] for glob in (one, other)]
    return _nested(starts[0], starts[1], str.startswith) and _nested(ends[0], ends[1], str.endswith)


def _nested(one: str, other: str, within: Callable[[str, str], bool]) -> bool:
    """Whether one of two plain parts extends the other (`within`: at its start or end)."""
    return within(one, other) or within(other, one)


# A new route's glob is visible ASCII: no character that hides or reorders text, so what
# its listing shows is what it matches (rules stored before are read as they were).
_VISIBLE_GLOB = re.compile(r"^[!-~]{1,200}$")
_TRUE = {"yes", "true", "on", "1", "y"}
_FALSE = {"no", "false", "off", "0", "n"}


class RouteSpecError(CountersignError, ValueError):
    """A route spec or field is malformed; `field` names the offending key when known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RoutesFileError(ConfigurationError):
    """`COUNTERSIGN_ROUTES_FILE` cannot be used; the message names the file, route and field."""


# -- values ---------------------------------------------------------------------------------
def parse_duration(value: Any, *, bare_seconds: bool = False, name: str = "expiry") -> int:
    """`90s`, `30m`, `24h`, `3d` (and plain seconds when `bare_seconds`) -> seconds; errors
    name the field `name` (expiry, remind_after, escalate_after)."""
    if isinstance(value, bool):  # bool is an int; `expiry: yes` is a mistake, not 1 second
        raise RouteSpecError(f"{name} {value!r} is not a duration", name)
    if isinstance(value, int):
        if not bare_seconds:
            raise RouteSpecError(f"{name} {value} needs a unit: s, m, h or d", name)
        seconds = value
    elif not isinstance(value, str):
        raise RouteSpecError(f"{name} {value!r} is not a duration such as 24h", name)
    else:
        text = value.strip().lower()
        match = _DURATION.match(text)
        if match:
            seconds = int(match.group(1)) * _UNITS[match.group(2)]
        elif bare_seconds and text.isdecimal() and len(text) <= 9:
            seconds = int(text)
        else:
            raise RouteSpecError(
                f"{name} {value!r} is not a duration: use a number and a unit s, m, h or d "
                "(90s, 30m, 24h, 3d)",
                name,
            )
    if seconds <= 0 or seconds > MAX_EXPIRY_SECONDS:
        raise RouteSpecError(
            f"{name} {value!r} is out of range: it must be positive and at most 30d", name
        )
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest exact form: 86400 -> `1d`, 5400 -> `90m`, 90 -> `90s`."""
    for unit, size in _UNITS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"  # unreachable: every int is a multiple of 1


def _channel_id(value: str) -> str:
    text = value.strip()
    mention = _CHANNEL_MENTION.match(text)
    channel = mention.group(1) if mention else text
    if not CHANNEL_ID.match(channel):
        raise RouteSpecError(
            f"channel {value!r} is not a Slack channel id: type #channel-name so Slack sends "
            "<#C…|name>, or give the id (C… or G…) from the channel's details",
            "channel",
        )
    return channel


def _reviewer_id(value: str) -> str:
    text = value.strip()
    mention = _USER_MENTION.match(text) or _GROUP_MENTION.match(text)
    reviewer = mention.group(1) if mention else text
    if not _REVIEWER.match(reviewer):
        raise RouteSpecError(
            f"reviewer {value!r} is not a Slack user id (U…/W…) or user-group id (S…): "
            "mention @someone or @group so Slack sends the id, or copy it from the profile",
            "reviewers",
        )
    return reviewer


def _escalation_target(value: str) -> str:
    """Where an escalation goes: a channel (C…/G…), a user group (S…) or a user (U…/W…)."""
    text = value.strip()
    mention = (
        _CHANNEL_MENTION.match(text) or _USER_MENTION.match(text) or _GROUP_MENTION.match(text)
    )
    target = mention.group(1) if mention else text
    if not (CHANNEL_ID.match(target) or _REVIEWER.match(target)):
        raise RouteSpecError(
            f"escalate_to {value!r} is not a Slack channel, user group or user: type "
            "#channel, @group or @someone so Slack sends the id, or give the id (C…, S…, U…)",
            "escalate_to",
        )
    return target


def _reviewer_ids(values: Iterable[str]) -> tuple[str, ...]:
    """The ids named, each once. An empty entry is refused, not skipped: `reviewers=,`
    would otherwise make a route anyone in the channel may decide."""
    values = list(values)
    if any(not value.strip() for value in values):
        raise RouteSpecError(
            "reviewers has an empty entry: list @someone or @group separated by commas, "
            "or leave reviewers out to let anyone in the channel decide",
            "reviewers",
        )
    ids = [_reviewer_id(v) for v in values]
    return tuple(dict.fromkeys(ids))  # de-duplicated, first mention's order kept


def _severity(value: str) -> Severity:
    try:
        return Severity(value.strip().lower())
    except ValueError:
        known = ", ".join(s.value for s in Severity)
        raise RouteSpecError(f"severity {value!r} is not one of {known}", "severity") from None


def _flag(value: str, name: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RouteSpecError(f"{name} {value!r} is not yes or no", name)


def _severity_rank(severity: Severity | str) -> int:
    # An unknown severity ranks as the highest, so it meets the strictest rule, not none.
    try:
        return Severity(severity).rank
    except ValueError:
        return Severity.CRITICAL.rank


def _glob_error(name: str, glob: object) -> RouteSpecError:
    return RouteSpecError(
        f"{name} {glob!r} must be a glob such as refund-* of 1 to 200 visible ASCII "
        "characters, without spaces, invisible characters or <>&`",
        name,
    )


def new_rule(**fields: Any) -> RouteRule:
    """A rule an admin writes now (`route add`, the routes file): as `RouteRule`, and its
    globs visible ASCII."""
    for name in ("agent", "tool"):
        glob = fields.get(name, "*")
        if isinstance(glob, str) and not _VISIBLE_GLOB.match(glob):
            raise _glob_error(name, glob)
    return RouteRule(**fields)


# -- the rule -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RouteRule:
    """One routing rule; `id` ("r1", …) is assigned by `RouteBook.add`."""

    id: str = ""
    agent: str = "*"
    tool: str = "*"
    min_severity: Severity = Severity.LOW
    channel: str
    reviewers: tuple[str, ...] = ()  # user ids U…/W… and user-group ids S…; empty: anyone
    quorum: int = 1
    expiry_seconds: int = DEFAULT_EXPIRY_SECONDS
    allow_self_approval: bool = False
    webhook_completes_quorum: bool = False
    remind_after_seconds: int = 0  # the escalation ladder; 0 / "": off
    escalate_after_seconds: int = 0
    escalate_to: str = ""

    def __post_init__(self) -> None:
        for name in ("agent", "tool"):
            glob = getattr(self, name)
            if not isinstance(glob, str) or not glob or _GLOB_FORBIDDEN.search(glob):
                raise _glob_error(name, glob)
        object.__setattr__(self, "min_severity", _severity(str(self.min_severity)))
        object.__setattr__(self, "channel", _channel_id(str(self.channel)))
        if isinstance(self.reviewers, str):
            raise RouteSpecError("reviewers must be a tuple of ids, not one string", "reviewers")
        object.__setattr__(self, "reviewers", _reviewer_ids(self.reviewers))
        quorum = self.quorum
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= MAX_QUORUM:
            raise RouteSpecError(
                f"quorum {quorum!r} must be a whole number from 1 to {MAX_QUORUM}", "quorum"
            )
        people = [r for r in self.reviewers if not r.startswith("S")]
        if people and len(people) == len(self.reviewers) and quorum > len(people):
            # Only users listed (a group's size is unknown here): the quorum could never be met.
            raise RouteSpecError(
                f"quorum {quorum} needs more approvers than the {len(people)} reviewer(s) "
                "listed: lower the quorum, add reviewers, or add a user group (S…)",
                "quorum",
            )
        expiry = self.expiry_seconds
        if isinstance(expiry, bool) or not isinstance(expiry, int):
            raise RouteSpecError(f"expiry {expiry!r} must be whole seconds", "expiry")
        parse_duration(expiry, bare_seconds=True)  # the range check
        self._check_ladder()
        for flag in ("allow_self_approval", "webhook_completes_quorum"):
            if not isinstance(getattr(self, flag), bool):
                raise RouteSpecError(f"{flag} {getattr(self, flag)!r} must be true or false", flag)

    def _check_ladder(self) -> None:
        """Each step a positive duration before the expiry (a later one would never come);
        an escalation needs both when and where, and somewhere other than the route's own
        channel."""
        expiry = format_duration(self.expiry_seconds)
        for name in ("remind_after", "escalate_after"):
            seconds = getattr(self, f"{name}_seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                raise RouteSpecError(f"{name} {seconds!r} must be whole seconds", name)
            if seconds == 0:
                continue
            parse_duration(seconds, bare_seconds=True, name=name)  # the range check
            if seconds >= self.expiry_seconds:
                raise RouteSpecError(
                    f"{name} {format_duration(seconds)} is not before expiry {expiry}: the "
                    f"request would expire first; make {name} shorter or expiry longer",
                    name,
                )
        if not isinstance(self.escalate_to, str):
            raise RouteSpecError(f"escalate_to {self.escalate_to!r} must be text", "escalate_to")
        if self.escalate_to:
            object.__setattr__(self, "escalate_to", _escalation_target(self.escalate_to))
        if self.escalate_after_seconds and not self.escalate_to:
            raise RouteSpecError(
                "escalate_after needs escalate_to: say where to escalate, e.g. "
                "escalate_to=#ops or escalate_to=@oncall",
                "escalate_to",
            )
        if self.escalate_to and not self.escalate_after_seconds:
            raise RouteSpecError(
                "escalate_to needs escalate_after: say when to escalate, e.g. escalate_after=4h",
                "escalate_after",
            )
        if self.escalate_to == self.channel:
            raise RouteSpecError(
                f"escalate_to {self.escalate_to} is the route's own channel: escalate to "
                "another channel, a user group or a user",
                "escalate_to",
            )

    def matches(self, agent: str, tool: str, severity: Severity | str) -> bool:
        return (
            fnmatch.fnmatchcase(agent, self.agent)
            and fnmatch.fnmatchcase(tool, self.tool)
            and _severity_rank(severity) >= self.min_severity.rank
        )

    def covers(self, other: RouteRule) -> bool:
        """Whether this rule matches every call `other` matches: listed before it, it leaves
        `other` none. Judged on the patterns (a glob covers `*`-free names it matches, and
        itself); a rule that takes only part of `other`'s calls does not cover it."""
        return (
            _glob_covers(self.agent, other.agent)
            and _glob_covers(self.tool, other.tool)
            and self.min_severity.rank <= other.min_severity.rank
        )

    def overlaps(self, other: RouteRule) -> bool:
        """Whether some call could match both rules (when unsure, from two globs, yes)."""
        return _globs_overlap(self.agent, other.agent) and _globs_overlap(self.tool, other.tool)

    def to_route(self) -> Route:
        return Route(
            route_id=self.id,
            destination=self.channel,
            reviewers=self.reviewers,
            quorum=self.quorum,
            expiry_seconds=self.expiry_seconds,
            allow_self_approval=self.allow_self_approval,
            webhook_completes_quorum=self.webhook_completes_quorum,
            remind_after_seconds=self.remind_after_seconds,
            escalate_after_seconds=self.escalate_after_seconds,
            escalate_to=self.escalate_to,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["min_severity"] = self.min_severity.value
        data["reviewers"] = list(self.reviewers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RouteRule:
        return cls(**{**data, "reviewers": tuple(data.get("reviewers", ()))})


# -- the slash command spec -----------------------------------------------------------------
_SPEC_KEYS = (
    "agent",
    "tool",
    "severity",
    "channel",
    "reviewers",
    "quorum",
    "expiry",
    "self",
    "webhook_quorum",
    "remind_after",
    "escalate_after",
    "escalate_to",
)
_SPEC_ALIASES = {
    "min_severity": "severity",
    "allow_self_approval": "self",
    "reviewer": "reviewers",
    "webhook_completes_quorum": "webhook_quorum",
}
_TOKEN = re.compile(r"(?:<[^>]*>|<|[^\s<])+")  # a Slack mention `<…>` never splits a token
_PAIR = re.compile(r"^([A-Za-z_]+)=(.*)$", re.S)


def _with_example(message: str) -> RouteSpecError:
    return RouteSpecError(f"{message}; example: {SPEC_EXAMPLE}")


def same_rules(first: Iterable[RouteRule], second: Iterable[RouteRule]) -> bool:
    """Whether two lists of rules route alike, in the same order (their ids aside)."""
    return [replace(r, id="") for r in first] == [replace(r, id="") for r in second]


def no_agent_called(glob: str, agents: Collection[str]) -> str:
    """'No agent countersign runs is called …' when the agent glob of a route matches none
    of `agents` (this countersign's), with the closest name; "" when it matches one, or
    when there are none to match. Such a route applies only to agents that ask over the
    HTTP API under that name; a mistyped one leaves the agent's calls to another route."""
    if not agents or any(fnmatch.fnmatchcase(a, glob) for a in agents):
        return ""
    return f"no agent countersign runs is called '{glob}'{did_you_mean(glob, agents)}"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """' (did you mean …?)' naming the closest of `known` to `word`, or '' if none is close."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_spec(text: str) -> RouteRule:
    """Parse `/approvals route add <spec>`: `key=value` pairs separated by spaces.

    Keys: agent, tool (globs), severity (minimum), channel (required), reviewers (comma
    separated, or several mentions in a row), quorum, expiry (90s/30m/24h/3d), self (yes/no),
    remind_after, escalate_after (durations) and escalate_to (a channel, user group or user).
    Slack's escaped mentions `<#C…|name>`, `<@U…>` and `<!subteam^S…|@name>` are accepted.
    """
    values: dict[str, str] = {}
    last = ""
    for token in _TOKEN.findall(text):
        pair = _PAIR.match(token)
        if pair is None:
            if last == "reviewers" and token.startswith("<"):  # reviewers=<@U1>, <@U2>
                values["reviewers"] = values["reviewers"].rstrip(",") + f",{token}"
                continue
            raise _with_example(f"{token!r} is not key=value")
        key, value = pair.group(1).lower(), pair.group(2)
        key = _SPEC_ALIASES.get(key, key)
        if key not in _SPEC_KEYS:
            raise _with_example(
                f"unknown key {pair.group(1)!r}{did_you_mean(key, _SPEC_KEYS)}; "
                f"known keys: {', '.join(_SPEC_KEYS)}"
            )
        if key in values:
            raise _with_example(f"{key} is given twice")
        if not value.strip():
            raise _with_example(f"{key} needs a value, e.g. {key}=…")
        values[key] = value
        last = key
    if "channel" not in values:
        raise _with_example("missing channel: say where requests go, e.g. channel=#approvals")
    try:
        fields: dict[str, Any] = {"channel": values["channel"]}
        if "agent" in values:
            fields["agent"] = values["agent"]
        if "tool" in values:
            fields["tool"] = values["tool"]
        if "severity" in values:
            fields["min_severity"] = _severity(values["severity"])
        if "reviewers" in values:
            fields["reviewers"] = tuple(values["reviewers"].split(","))
        if "quorum" in values:
            quorum = values["quorum"].strip()
            # (isdigit takes "²", which int() refuses; past 4,300 digits int() refuses too)
            if not (quorum.isdecimal() and len(quorum) <= 2):
                raise RouteSpecError(
                    f"quorum {quorum!r} must be a whole number from 1 to {MAX_QUORUM}", "quorum"
                )
            fields["quorum"] = int(quorum)
        if "expiry" in values:
            fields["expiry_seconds"] = parse_duration(values["expiry"])
        if "self" in values:
            fields["allow_self_approval"] = _flag(values["self"], "self")
        if "webhook_quorum" in values:
            fields["webhook_completes_quorum"] = _flag(values["webhook_quorum"], "webhook_quorum")
        for name in ("remind_after", "escalate_after"):
            if name in values:
                fields[f"{name}_seconds"] = parse_duration(values[name], name=name)
        if "escalate_to" in values:
            fields["escalate_to"] = values["escalate_to"]
        return new_rule(**fields)
    except RouteSpecError as exc:
        raise _with_example(str(exc)) from None


# -- the routes file ------------------------------------------------------------------------
_FILE_FIELDS = (
    "agent",
    "tool",
    "min_severity",
    "channel",
    "reviewers",
    "quorum",
    "expiry",
    "allow_self_approval",
    "webhook_completes_quorum",
    "remind_after",
    "escalate_after",
    "escalate_to",
)


def load_routes_file(path: str | os.PathLike[str]) -> list[RouteRule]:
    """Read the `COUNTERSIGN_ROUTES_FILE` YAML; any problem raises RoutesFileError."""
    source = f"COUNTERSIGN_ROUTES_FILE {os.fspath(path)}"
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise RoutesFileError(f"{source}: cannot read it ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise RoutesFileError(
            f"{source}: not valid YAML ({exc}); expected e.g.\n{FILE_EXAMPLE}"
        ) from exc
    items = document.get("routes") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise RoutesFileError(
            f"{source}: expected a top-level 'routes:' list, e.g.\n{FILE_EXAMPLE}"
        )
    return [_file_rule(item, f"{source}: route {i + 1}") for i, item in enumerate(items)]


def _file_rule(item: Any, where: str) -> RouteRule:
    if not isinstance(item, dict):
        raise RoutesFileError(f"{where}: expected a mapping of fields, e.g.\n{FILE_EXAMPLE}")
    for name in item:
        if name not in _FILE_FIELDS:
            raise RoutesFileError(
                f"{where}: unknown field {name!r}{did_you_mean(str(name), _FILE_FIELDS)}; "
                f"known fields: {', '.join(_FILE_FIELDS)}"
            )
    if "channel" not in item:
        raise RoutesFileError(f"{where}: field 'channel' is missing, e.g. channel: C0APPROVALS")
    fields: dict[str, Any] = {}
    try:
        for name in ("agent", "tool", "min_severity", "channel", "escalate_to"):
            if name in item:
                fields[name] = _string(item[name], name)
        if "reviewers" in item:
            reviewers = item["reviewers"]
            if not isinstance(reviewers, list) or not all(isinstance(r, str) for r in reviewers):
                raise RouteSpecError(
                    f"must be a list of ids such as [U0REVIEWER, S0FINANCE], not {reviewers!r}",
                    "reviewers",
                )
            fields["reviewers"] = tuple(reviewers)
        if "quorum" in item:
            fields["quorum"] = item["quorum"]
        if "expiry" in item:
            fields["expiry_seconds"] = parse_duration(item["expiry"], bare_seconds=True)
        for flag in ("allow_self_approval", "webhook_completes_quorum"):
            if flag in item:
                fields[flag] = item[flag]
        for name in ("remind_after", "escalate_after"):
            if name in item:
                fields[f"{name}_seconds"] = parse_duration(item[name], bare_seconds=True, name=name)
        return new_rule(**fields)
    except RouteSpecError as exc:
        failing = {"severity": "min_severity"}.get(exc.field or "", exc.field or "?")
        raise RoutesFileError(f"{where}: field '{failing}': {exc}") from None


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise RouteSpecError(f"must be text, not {type(value).__name__} {value!r}", name)
    return value


# -- the listing ----------------------------------------------------------------------------
def _mention(reviewer: str) -> str:
    return f"<!subteam^{reviewer}>" if reviewer.startswith("S") else f"<@{reviewer}>"


def _target(target: str) -> str:
    return f"<#{target}>" if CHANNEL_ID.match(target) else _mention(target)


def _ladder(rule: RouteRule) -> str:
    """The rule's reminder and escalation, for the listing ("" when it has neither)."""
    steps = []
    if rule.remind_after_seconds:
        steps.append(f"reminds after {format_duration(rule.remind_after_seconds)}")
    if rule.escalate_after_seconds:
        steps.append(
            f"escalates to {_target(rule.escalate_to)} after "
            f"{format_duration(rule.escalate_after_seconds)}"
        )
    return "".join(f" · {step}" for step in steps)


def format_rules(rules: Iterable[RouteRule], default_channel: str = "") -> str:
    """The mrkdwn listing for `/approvals routes`: one line per rule, first match wins."""
    fallback = f"<#{default_channel}>" if default_channel else "the default channel (unset)"
    lines = []
    for rule in rules:
        reviewers = ", ".join(_mention(r) for r in rule.reviewers) or "anyone"
        self_approval = "self-approval allowed" if rule.allow_self_approval else "no self-approval"
        if rule.webhook_completes_quorum:
            self_approval += " · a webhook approval completes the quorum"
        lines.append(
            f"• *{rule.id}* agent `{rule.agent}` tool `{rule.tool}` severity ≥ "
            f"{rule.min_severity.value} → <#{rule.channel}> · reviewers {reviewers} · "
            f"quorum {rule.quorum}{_ladder(rule)} · expires after "
            f"{format_duration(rule.expiry_seconds)} · {self_approval}"
        )
    if not lines:
        return f"No routes: every request goes to {fallback}"
    return "\n".join([*lines, f"Anything else goes to {fallback}"])


# -- the Redis-backed book ------------------------------------------------------------------
