"""The route book: the routing rules kept in Redis, and the `Router` that reads them.

A rule (`agent_host.approvals.routes`) matches on agent and tool globs and a minimum
severity; the first matching rule in list order wins, and a request no rule matches goes to
the default channel (`COUNTERSIGN_DEFAULT_CHANNEL`) where anyone may decide it. `RouteBook`
keeps the rules in Redis as one JSON list under `keys.ROUTES` and appends every change to
the `keys.AUDIT` stream.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, Route
from agent_host.approvals.routes import (
    MAX_EXPIRY_SECONDS,
    MAX_QUORUM,
    RouteRule,
    RoutesFileError,
    RouteSpecError,
    format_duration,
    format_rules,
    load_routes_file,
    parse_duration,
    parse_spec,
    same_rules,
)
from agent_host.durable import keys
from agent_host.durable.connections import unavailable_on_redis_errors
from agent_host.errors import StoreError

__all__ = [
    "MAX_EXPIRY_SECONDS",
    "MAX_QUORUM",
    "ROUTE_COUNTER",
    "RouteBook",
    "RouteRule",
    "RouteSpecError",
    "RoutesFileError",
    "format_duration",
    "format_rules",
    "load_routes_file",
    "parse_duration",
    "parse_spec",
]

log = logging.getLogger(__name__)

# Next rule number. A counter rather than max(id)+1 so a removed rule's id is never reused
# and an old audit entry about `r3` cannot be mistaken for a later rule. Same hash tag as
# ROUTES, so one transaction may touch both in a Redis Cluster too.
ROUTE_COUNTER = f"{keys.ROUTES}:next_id"

_MAX_ATTEMPTS = 100

# KEYS: routes, counter, audit. ARGV: expected routes (or "" with ARGV[2] == "1" for none),
# expected counter ("" for none), new routes, new counter, then the audit entry's fields.
_SWAP_ROUTES = """
local routes = redis.call('GET', KEYS[1])
if ARGV[2] == '1' then
  if routes then return 0 end
elseif routes ~= ARGV[1] then return 0 end
local counter = redis.call('GET', KEYS[2]) or ''
if counter ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[5])
redis.call('XADD', KEYS[3], '*', 'at', ARGV[6], 'actor', ARGV[7], 'event', ARGV[8],
  'route_id', ARGV[9], 'before', ARGV[10], 'after', ARGV[4])
return 1
"""

# (rules, counter) -> (new rules, new counter, the rule the change is about)
_Mutated = tuple[list[RouteRule], int, RouteRule | None]
Mutation = Callable[[list[RouteRule], int], _Mutated]


@dataclass
class _Change:
    before: list[RouteRule]
    after: list[RouteRule]
    subject: RouteRule | None
    changed: bool = True


def not_in_force(in_file: int, in_redis: int) -> str:
    """Why the routes file's rules are not the ones in force, and how to make them so."""
    return (
        f"COUNTERSIGN_ROUTES_FILE's {in_file} route(s) are not in force: Redis holds "
        f"{in_redis} route(s) of its own, which differ (a routes file fills only a Redis that "
        "never held routes, so that admins' changes survive a restart). To put the file's rules "
        f"in force, change the routes with /approvals route, or delete the key {keys.ROUTES} "
        "and restart"
    )


def _decode(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _dump(rules: Iterable[RouteRule]) -> str:
    return json.dumps([r.to_dict() for r in rules])


@unavailable_on_redis_errors
class RouteBook:
    """The routing rules in Redis; implements `agent_host.approvals.Router`.

    Every change is one WATCH/MULTI transaction over `keys.ROUTES` and `ROUTE_COUNTER`
    (retried if another writer got in first) that also appends to `keys.AUDIT` who changed
    what, when, and the whole rule list before and after, so any change can be undone.
    """

    def __init__(
        self,
        redis: Redis,
        default_channel: str,
        *,
        default_expiry_seconds: int = DEFAULT_EXPIRY_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.default_channel = default_channel
        self.default_route = Route(
            destination=default_channel, expiry_seconds=default_expiry_seconds
        )
        self.clock = clock
        self._swap = redis.register_script(_SWAP_ROUTES)

    async def rules(self) -> list[RouteRule]:
        return self._parse(await self.redis.get(keys.ROUTES))

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        """The first matching rule's route, in list order; otherwise the default channel."""
        for rule in await self.rules():
            if rule.matches(agent, tool, severity):
                return rule.to_route()
        return self.default_route

    async def add(self, rule: RouteRule, actor: str) -> RouteRule:
        """Append `rule` (it goes last, after every existing rule) under the next free id."""

        def append(rules: list[RouteRule], counter: int) -> _Mutated:
            added = replace(rule, id=f"r{counter + 1}")
            return [*rules, added], counter + 1, added

        change = await self._change("route.add", actor, append)
        assert change.subject is not None
        return change.subject

    async def remove(self, rule_id: str, actor: str) -> RouteRule | None:
        """Delete the rule with this id; None (and no audit entry) if there is none."""
        wanted = rule_id.strip().lower()

        def drop(rules: list[RouteRule], counter: int) -> _Mutated:
            gone = next((r for r in rules if r.id.lower() == wanted), None)
            return [r for r in rules if r is not gone], counter, gone

        change = await self._change("route.remove", actor, drop)
        return change.subject

    async def seed(self, rules: Iterable[RouteRule], actor: str = "routes-file") -> bool:
        """Store the routes file's rules only if Redis has never held any routes.

        Once the routes key exists (even as an empty list after an admin removed every rule)
        Redis is the source of truth: a restart must not undo what admins changed with
        `/approvals route …`. To re-apply an edited file, delete `keys.ROUTES` and restart.
        Returns whether the rules were stored.
        """
        wanted = list(rules)
        if not wanted:
            return False  # nothing to seed; leave the key absent so a later file still can

        def fill(current: list[RouteRule], counter: int) -> _Mutated:
            fresh = [replace(r, id=f"r{counter + i + 1}") for i, r in enumerate(wanted)]
            return fresh, counter + len(fresh), None

        change = await self._change("route.seed", actor, fill, only_if_absent=True)
        if not change.changed and same_rules(wanted, change.before):
            log.info("routes file already in Redis: %d rule(s)", len(wanted))
        elif not change.changed:
            log.warning(not_in_force(len(wanted), len(change.before)))
        return change.changed

    # -- internals ------------------------------------------------------------------------
    def _parse(self, raw: Any) -> list[RouteRule]:
        text = _decode(raw)
        if text is None:
            return []
        try:
            return [RouteRule.from_dict(item) for item in json.loads(text)]
        except (ValueError, TypeError, AttributeError) as exc:
            # Fail closed: routing around reviewer rules would let anyone approve.
            raise StoreError(
                f"the routing rules under {keys.ROUTES} are unreadable ({exc}); restore them "
                f"from the last entry of the {keys.AUDIT} stream or delete the key"
            ) from exc

    async def _change(
        self, event: str, actor: str, mutate: Mutation, *, only_if_absent: bool = False
    ) -> _Change:
        # Optimistic: read, change in Python, then write with a compare-and-set script that
        # refuses if another writer changed the rules or the counter meanwhile.
        for _ in range(_MAX_ATTEMPTS):
            raw: Any = await self.redis.get(keys.ROUTES)
            before = self._parse(raw)
            if only_if_absent and raw is not None:
                return _Change(before, before, None, changed=False)
            raw_counter = _decode(await self.redis.get(ROUTE_COUNTER))
            counter = int(raw_counter or 0)
            after, new_counter, subject = mutate(before, counter)
            if after == before and new_counter == counter:
                return _Change(before, after, subject, changed=False)
            written = await self._swap(
                keys=[keys.ROUTES, ROUTE_COUNTER, keys.AUDIT],
                args=[
                    "" if raw is None else _decode(raw) or "",
                    "1" if raw is None else "0",
                    raw_counter or "",
                    _dump(after),
                    new_counter,
                    repr(self.clock()),
                    actor,
                    event,
                    subject.id if subject else "",
                    _dump(before),
                ],
            )
            if written:
                log.info("%s %s by %s", event, subject.id if subject else "", actor)
                return _Change(before, after, subject)
        raise StoreError(
            f"could not change the routing rules after {_MAX_ATTEMPTS} attempts: too many "
            "concurrent changes; try again"
        )
