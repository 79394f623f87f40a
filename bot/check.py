"""`countersign check`: the configuration, Redis, the Slack token and every channel
approvals may go to, each reported as one line: ok, or what is wrong and how to fix it.

    settings      the environment parses (ServiceSettings)
    slack         SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET are set
    keys          COUNTERSIGN_ENCRYPTION_KEYS (or the key file) parses
    routes file   COUNTERSIGN_ROUTES_FILE parses
    agents        COUNTERSIGN_AGENTS loads, and every agent builds with a model
    redis         REDIS_URL answers PING (unset: redis-server is installed)
    durability    Redis keeps an AOF (appendonly yes), and what its appendfsync can lose
    eviction      Redis never drops keys when its memory is full (maxmemory-policy noeviction)
    memory        how much of Redis's maxmemory is in use; fails when Redis is full
    keys in use   every waiting run's checkpoint is under a key the ring holds
    slack token   auth.test accepts SLACK_BOT_TOKEN
    channel …     the bot may post in the default channel and every routed one (a route
                  escalating from a private channel to a public one is noted, not failed)

Nothing is written, to Redis or to Slack.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError

from agent_host.approvals.routes import RouteRule, load_routes_file, no_agent_called, same_rules
from agent_host.durable.crypto import KeyRing
from agent_host.durable.eviction import (
    KEEPS_EVERY_KEY,
    Eviction,
    eviction_problem,
    memory_in_use,
)
from agent_host.durable.host import KEY_FILE, load_keyring, load_registry
from agent_host.durable.reach import RedisReach, keys_gone, reach_redis
from agent_host.durable.route_book import not_in_force
from agent_host.errors import ConfigurationError, StoreUnavailable
from bot.delivery import (
    NO_DEFAULT_CHANNEL,
    ChannelFacts,
    channel_facts,
    error_code,
    exposes,
    exposure,
    how_to_fix,
)
from bot.slack_settings import ServiceSettings, load_settings
from bot.socket_client import socket_mode_url
from bot.wiring import require_slack, web_client

__all__ = ["Finding", "run_checks"]

T = TypeVar("T")
_CHANNEL_LINK = re.compile(r"<#([A-Z0-9]+)(?:\|[^>]*)?>")  # Slack's mrkdwn, shown as #C…


@dataclass(frozen=True)
class Finding:
    check: str
    detail: str  # what was found when ok; what is wrong and how to fix it otherwise
    ok: bool = True

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.check}: {self.detail}"


def _fail(check: str, detail: str) -> Finding:
    return Finding(check, detail, ok=False)


async def run_checks() -> list[Finding]:
    """Every check, in order; a check that needs an earlier one's result is skipped when it
    failed, and says so."""
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        return [_fail("settings", str(exc))]
    findings = [Finding("settings", "the environment parses")]
    findings.append(_slack_settings(settings))
    ring, finding = _keys(settings)
    findings.append(finding)
    file_rules, finding = _routes_file(settings)
    findings.append(finding)
    agents, finding = _agents(settings)
    findings.append(finding)
    reach, finding = await _redis(settings)
    findings.append(finding)
    if reach is not None:
        findings.append(_durability(reach.aof, embedded=not settings.redis_url))
        findings.append(_eviction(reach.eviction, embedded=not settings.redis_url))
        if settings.redis_url:  # (the embedded server is not started by a check)
            findings.append(_memory(reach.used_memory, reach.eviction))
    if reach is not None and reach.waiting_under is not None:
        findings.append(_keys_in_use(reach.waiting_under, ring))
    redis_rules = reach.routes if reach is not None else []
    findings += _agentless([*file_rules, *redis_rules], agents)
    kept = reach is not None and reach.routes_kept  # (an empty list too: the file waits)
    if file_rules and kept and not same_rules(file_rules, redis_rules):
        findings = [_noted(f, not_in_force(len(file_rules), len(redis_rules))) for f in findings]
    session, client = web_client(settings)
    try:
        finding = await _auth(client, settings)
        findings.append(finding)
        if settings.slack_app_token:
            findings.append(await _socket_mode(client, settings))
        if finding.ok:
            findings += await _channels(client, settings, [*file_rules, *redis_rules])
        else:
            findings.append(
                _fail("channels", "not checked: auth.test did not succeed (see the line above)")
            )
    finally:
        await session.close()
    return findings


# The scopes of manifest.yml: what the bot calls Slack with (see the manifest's comments).
REQUIRED_SCOPES = ("chat:write", "commands", "usergroups:read", "channels:read", "groups:read")


def _guarded(check: str, probe: Callable[[], T]) -> tuple[T | None, Finding | None]:
    try:
        return probe(), None
    except ConfigurationError as exc:
        return None, _fail(check, str(exc))


def _slack_settings(settings: ServiceSettings) -> Finding:
    _, failed = _guarded("slack settings", lambda: require_slack(settings))
    mode = "Socket Mode (SLACK_APP_TOKEN)" if settings.slack_app_token else "POST /slack/events"
    return failed or Finding("slack settings", f"token and signing secret set; requests: {mode}")


def _keys(settings: ServiceSettings) -> tuple[KeyRing | None, Finding]:
    key_file = settings.data_dir / KEY_FILE
    if not settings.encryption_keys and not key_file.exists():
        return None, Finding(
            "keys",
            f"COUNTERSIGN_ENCRYPTION_KEYS is unset: the first start generates a key into "
            f"{key_file}; set it instead when several processes share Redis",
        )
    ring, failed = _guarded("keys", lambda: load_keyring(settings, create=False))
    if ring is None:
        return None, failed or _fail("keys", "no key ring")
    kids = f"{len(ring.kids)} key(s), new checkpoints under {ring.active_kid!r}"
    return ring, Finding("keys", kids)


def _eviction(eviction: Eviction | None, *, embedded: bool) -> Finding:
    """Whether Redis, its memory full, refuses writes (retried) or drops keys (lost)."""
    if eviction is None and embedded:
        eviction = Eviction(KEEPS_EVERY_KEY, 0)  # the embedded server keeps Redis's default
    if eviction is None:
        return Finding(
            "eviction",
            f"not read (this Redis refuses CONFIG): run it with maxmemory-policy {KEEPS_EVERY_KEY}",
        )
    if (problem := eviction_problem(eviction)) is not None:
        return _fail("eviction", problem)
    if eviction.limit == 0:
        return Finding("eviction", "no maxmemory: Redis never drops keys to make room")
    refuses = f"maxmemory-policy {eviction.policy}: with its memory full, Redis refuses writes"
    return Finding("eviction", refuses)


def _memory(used: int | None, eviction: Eviction | None) -> Finding:
    """How much of Redis's maxmemory is in use; a failure when Redis is full (it then
    refuses every write countersign makes)."""
    if used is None:
        return Finding("memory", "not read (this Redis refuses INFO)")
    said, full = memory_in_use(used, eviction)
    return Finding("memory", said, ok=not full)


def _durability(aof: tuple[str, str] | None, *, embedded: bool) -> Finding:
    """What a restart or a power cut of Redis's machine can lose: the waiting runs, the
    decisions, and the ledger entry that keeps a tool call from running twice."""
    if aof is None and embedded:
        aof = ("yes", "everysec")  # the embedded server's settings
    if aof is None:
        return Finding(
            "durability",
            "not read (this Redis refuses CONFIG): run it with appendonly yes and appendfsync "
            "always (see the README's durability guarantees)",
        )
    appendonly, appendfsync = aof
    if appendonly != "yes":
        return _fail(
            "durability",
            "appendonly is off: a restart of Redis loses every write since its last snapshot "
            "(if it takes any), waiting runs, decisions and the ledger that keeps each tool "
            "call to one run among them; set appendonly yes",
        )
    if appendfsync == "always":
        return Finding("durability", "AOF on, appendfsync always: nothing acknowledged is lost")
    if appendfsync == "everysec":
        return Finding(
            "durability",
            "AOF on, appendfsync everysec: a power cut of Redis's machine can lose the last "
            "second of writes, a tool call's ledger entry among them (that call could run "
            "again); appendfsync always loses nothing acknowledged",
        )
    return _fail(
        "durability",
        f"appendfsync is {appendfsync or 'unknown'}: the system decides when writes reach "
        "disk, and a power cut can lose many seconds of them; set appendfsync always (or "
        "everysec)",
    )


def _keys_in_use(waiting_under: Counter[str], ring: KeyRing | None) -> Finding:
    """Whether every waiting run can be resumed with the ring's keys."""
    waiting = sum(waiting_under.values())
    known = set(ring.kids) if ring is not None else set()
    unreadable = waiting_under.get("", 0)
    if ring is None and waiting:
        return _fail("keys in use", f"{waiting} waiting run(s), but no key ring to open them")
    if (gone := keys_gone(waiting_under, known)) is not None:
        return _fail("keys in use", gone)
    if unreadable:
        return _fail(
            "keys in use",
            f"{unreadable} of {waiting} waiting run(s) have a missing or damaged checkpoint: "
            "they fail when decided; `countersign keys rotate` names them",
        )
    return Finding("keys in use", f"{waiting} waiting run(s), each under a key the ring holds")


def _noted(finding: Finding, note: str) -> Finding:
    """The routes file's line, with `note` after it (it stays ok: admins changing the
    routes in Slack after the file seeded them is the usual course)."""
    if finding.check != "routes file":
        return finding
    return replace(finding, detail=f"{finding.detail}; {note}")


def _routes_file(settings: ServiceSettings) -> tuple[list[RouteRule], Finding]:
    path = settings.routes_file
    if path is None:
        return [], Finding("routes file", "COUNTERSIGN_ROUTES_FILE is unset (none loaded)")
    rules, failed = _guarded("routes file", lambda: load_routes_file(path))
    if rules is None:
        return [], failed or _fail("routes file", "unreadable")
    return rules, Finding("routes file", f"{path}: {len(rules)} route(s)")


def _agents(settings: ServiceSettings) -> tuple[list[str], Finding]:
    registry, failed = _guarded("agents", lambda: load_registry(settings))
    if registry is None:
        return [], failed or _fail("agents", "no registry")
    names = list(registry.names())
    return names, Finding("agents", f"{settings.agents}: {', '.join(names) or 'none'}")


def _agentless(rules: list[RouteRule], agents: list[str]) -> list[Finding]:
    """Not failures (an agent asking over the HTTP API sends a name of its own), but said:
    a route naming no agent countersign runs may be a typo that leaves the agent's calls
    to another route."""
    named: dict[str, list[str]] = {}  # (the routes file's rules are in Redis too, seeded)
    for rule in rules:
        if rule.agent not in named and no_agent_called(rule.agent, agents):
            named[rule.agent] = []
        if rule.agent in named and rule.id not in named[rule.agent]:
            named[rule.agent].append(rule.id)
    return [
        Finding(
            f"routes for agent {glob}",
            f"note: {no_agent_called(glob, agents)} ({_route_ids(ids)}); such a route applies "
            "only to agents that ask over the HTTP API under that name",
        )
        for glob, ids in named.items()
    ]


def _route_ids(ids: list[str]) -> str:
    return ", ".join(i for i in ids if i) or "in the routes file"


async def _redis(settings: ServiceSettings) -> tuple[RedisReach | None, Finding]:
    try:
        reach = await reach_redis(settings)
    except (ConfigurationError, StoreUnavailable) as exc:
        return None, _fail("redis", str(exc))
    return reach, Finding("redis", reach.where)


async def _auth(client: Any, settings: ServiceSettings) -> Finding:
    try:
        reply: Any = await client.auth_test()
    except SlackApiError as exc:
        code = error_code(exc)
        return _fail("slack token", f"Slack refused SLACK_BOT_TOKEN ({code}): {how_to_fix(code)}")
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        return _fail(
            "slack token",
            f"cannot reach Slack at {settings.slack_api_url} ({type(exc).__name__}: {exc}): "
            "check SLACK_API_URL and the network",
        )
    granted = (getattr(reply, "headers", None) or {}).get("x-oauth-scopes")
    if granted is not None:  # as Slack reports the token's scopes with every answer
        missing = sorted(set(REQUIRED_SCOPES) - {s.strip() for s in granted.split(",")})
        if missing:
            return _fail(
                "slack token",
                f"the app lacks the scope(s) {', '.join(missing)} that countersign calls Slack "
                "with: add them under oauth_config in manifest.yml (it lists them) and "
                "reinstall the app",
            )
    return Finding(
        "slack token", f"bot @{reply.get('user')} ({reply.get('user_id')}) in {reply.get('team')}"
    )


async def _socket_mode(client: Any, settings: ServiceSettings) -> Finding:
    """SLACK_APP_TOKEN opens a Socket Mode connection (the URL is asked for, not used)."""
    token = settings.slack_app_token or ""
    try:
        await socket_mode_url(client, token, settings.slack_api_url)
    except ConfigurationError as exc:
        return _fail("socket mode", str(exc))
    return Finding("socket mode", "SLACK_APP_TOKEN opens a Socket Mode connection")


async def _channels(
    client: Any, settings: ServiceSettings, rules: list[RouteRule]
) -> list[Finding]:
    findings = []
    if not settings.default_channel:
        findings.append(_fail("default channel", NO_DEFAULT_CHANNEL))
    wanted: dict[str, str] = {}
    if settings.default_channel:
        wanted[settings.default_channel] = "COUNTERSIGN_DEFAULT_CHANNEL"
    escalating = []
    for rule in rules:
        name = f"route {rule.id or rule.agent + '/' + rule.tool}"
        wanted.setdefault(rule.channel, name)
        if rule.escalate_to[:1] in ("C", "G"):  # a user group or a user is a direct message
            wanted.setdefault(rule.escalate_to, f"{name}'s escalation")
            escalating.append((name, rule))
    facts = {}
    for channel, why in wanted.items():
        facts[channel] = await channel_facts(client, channel, then="run `countersign check` again")
        findings.append(_channel(channel, why, facts[channel]))
    for name, rule in escalating:
        if exposes(facts[rule.channel], facts[rule.escalate_to]):
            findings.append(_exposed(name, rule))
    return findings


def _channel(channel: str, why: str, facts: ChannelFacts) -> Finding:
    check = f"channel {channel} ({why})"
    if facts.problem is None:
        return Finding(check, "the bot can post here")
    return _fail(check, _CHANNEL_LINK.sub(r"#\1", facts.problem))


def _exposed(name: str, rule: RouteRule) -> Finding:
    """Not a failure (it may be meant), but said: who will read the requests."""
    said = _CHANNEL_LINK.sub(r"#\1", exposure(rule.channel, rule.escalate_to))
    return Finding(
        f"{name}'s escalation",
        f"note: it {said} (escalate to a private channel, a user group or a person to keep "
        "them private)",
    )
