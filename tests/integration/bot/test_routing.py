"""Routing rules: the slash-command spec, the routes file, matching, and the Redis RouteBook."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_host.approvals import DEFAULT_EXPIRY_SECONDS, Route, Router
from agent_host.approvals.routes import (
    SPEC_EXAMPLE,
    RouteRule,
    RoutesFileError,
    RouteSpecError,
    format_duration,
    format_rules,
    load_routes_file,
    parse_duration,
    parse_spec,
)
from agent_host.durable import keys
from agent_host.durable.route_book import ROUTE_COUNTER, RouteBook
from agent_host.errors import StoreError
from agent_host.runtime.policy import Severity

DEFAULT = "C0DEFAULT"


# -- parse_spec -----------------------------------------------------------------------------
def test_full_spec() -> None:
    rule = parse_spec(
        "agent=refund-* tool=issue_refund severity=high channel=C0APPROVALS "
        "reviewers=U1,S2 quorum=2 expiry=24h self=yes"
    )
    assert rule == RouteRule(
        agent="refund-*",
        tool="issue_refund",
        min_severity=Severity.HIGH,
        channel="C0APPROVALS",
        reviewers=("U1", "S2"),
        quorum=2,
        expiry_seconds=24 * 3600,
        allow_self_approval=True,
    )
    assert rule.id == ""


def test_minimal_spec_takes_the_defaults() -> None:
    rule = parse_spec("channel=C0APPROVALS")
    assert (rule.agent, rule.tool, rule.min_severity) == ("*", "*", Severity.LOW)
    assert (rule.reviewers, rule.quorum) == ((), 1)
    assert rule.expiry_seconds == DEFAULT_EXPIRY_SECONDS == 72 * 3600
    assert rule.allow_self_approval is False


def test_the_documented_example_parses() -> None:
    assert parse_spec(SPEC_EXAMPLE.removeprefix("route add ")).reviewers == ("U0REVIEWER",)


def test_slack_escaped_mentions() -> None:
    # What Slack sends for `channel=#approvals reviewers=@alice,@bob,@finance` (should_escape)
    rule = parse_spec(
        "channel=<#C0APPROVALS|approvals> "
        "reviewers=<@U0ALICE>,<@W0BOB|bob>,<!subteam^S0FIN|@finance> quorum=2"
    )
    assert rule.channel == "C0APPROVALS"
    assert rule.reviewers == ("U0ALICE", "W0BOB", "S0FIN")


def test_mentions_separated_by_spaces_continue_the_reviewers() -> None:
    rule = parse_spec(
        "reviewers=<@U0ALICE> <!subteam^S0FIN|@finance> channel=<#C0APPROVALS> tool=x"
    )
    assert rule.reviewers == ("U0ALICE", "S0FIN")
    assert (rule.channel, rule.tool) == ("C0APPROVALS", "x")
    # as Slack sends `reviewers=@alice, @finance`: a comma, then a space
    rule = parse_spec("reviewers=<@U0ALICE>, <!subteam^S0FIN|@finance> channel=C0APPROVALS")
    assert rule.reviewers == ("U0ALICE", "S0FIN")


def test_spec_details() -> None:
    rule = parse_spec("  CHANNEL=G0PRIVATE   severity=Critical self=no reviewers=U1,U1,U2  ")
    assert rule.channel == "G0PRIVATE"
    assert rule.min_severity is Severity.CRITICAL
    assert rule.reviewers == ("U1", "U2")  # duplicates dropped, order kept
    assert parse_spec("channel=C1 min_severity=medium").min_severity is Severity.MEDIUM


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("24h", 86400), ("3d", 259200), ("30d", 30 * 86400)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert parse_spec(f"channel=C1 expiry={text}").expiry_seconds == seconds
    assert parse_duration(format_duration(seconds)) == seconds


def test_a_digit_that_is_not_a_number_is_not_a_duration() -> None:
    """`²` is a digit to `str.isdigit`, but no number to `int`: refused, never a crash."""
    with pytest.raises(RouteSpecError, match="is not a duration"):
        parse_duration("\u00b2", bare_seconds=True)
    with pytest.raises(RouteSpecError, match="is not a duration"):
        parse_duration("1" * 4301, bare_seconds=True)  # past what int() reads


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("chanel=C0APPROVALS", "unknown key 'chanel' (did you mean 'channel'?); known keys:"),
        ("tool=issue_refund", "missing channel"),
        ("", "missing channel"),
        ("channel=C1 severity=urgent", "severity 'urgent' is not one of low, medium, high"),
        ("channel=C1 reviewers=U1 quorum=0", "quorum 0 must be a whole number from 1 to 10"),
        ("channel=C1 quorum=11", "quorum 11 must be a whole number from 1 to 10"),
        ("channel=C1 quorum=two", "quorum 'two' must be a whole number"),
        ("channel=C1 quorum=\u00b2", "quorum '\u00b2' must be a whole number"),  # isdigit()
        ("channel=C1 quorum=" + "1" * 4301, "must be a whole number from 1 to 10"),
        ("channel=C1 expiry=" + "1" * 4301 + "s", "is not a duration"),
        ("channel=C1 reviewers=U1,U2 quorum=3", "quorum 3 needs more approvers"),
        ("channel=C1 expiry=0s", "expiry '0s' is out of range"),
        ("channel=C1 expiry=31d", "expiry '31d' is out of range"),
        ("channel=C1 expiry=-1h", "expiry '-1h' is not a duration"),
        ("channel=C1 expiry=24", "expiry '24' is not a duration"),
        ("channel=C1 expiry=1w", "expiry '1w' is not a duration"),
        ("channel=general", "channel 'general' is not a Slack channel id"),
        ("channel=#general", "channel '#general' is not a Slack channel id"),
        ("channel=<@U123>", "channel '<@U123>' is not a Slack channel id"),
        ("channel=C1 reviewers=bob", "reviewer 'bob' is not a Slack user id"),
        ("channel=C1 reviewers=U1,@carol", "reviewer '@carol' is not a Slack user id"),
        ("channel=C1 reviewers=u123", "reviewer 'u123' is not a Slack user id"),
        ("channel=C1 reviewers=C0CHAN", "reviewer 'C0CHAN' is not a Slack user id"),
        ("channel=C1 self=maybe", "self 'maybe' is not yes or no"),
        ("channel=C1 channel=C2", "channel is given twice"),
        ("channel=", "channel needs a value"),
        ("channel=C1 refund", "'refund' is not key=value"),
        ("channel=C1 tool=<b>", "tool '<b>' must be a glob"),
        # An empty reviewer would leave a route anyone in the channel may decide.
        ("channel=C1 reviewers=,", "reviewers has an empty entry"),
        ("channel=C1 reviewers=U1,,U2", "reviewers has an empty entry"),
        # A glob that looks like another, or like a name it never matches, is refused.
        ("channel=C1 agent=cleanup-agent\u200b", r"agent 'cleanup-agent\u200b' must be a glob"),
        ("channel=C1 tool=\u202efer_eussi", r"tool '\u202efer_eussi' must be a glob"),
        ("channel=C1 tool=caf\u00e9", "visible ASCII characters"),
        (f"channel=C1 tool={'x' * 201}", "of 1 to 200 visible"),
    ],
)
def test_malformed_specs_say_what_is_wrong_and_show_an_example(spec: str, says: str) -> None:
    with pytest.raises(RouteSpecError) as caught:
        parse_spec(spec)
    message = str(caught.value)
    assert says in message
    assert message.endswith(f"; example: {SPEC_EXAMPLE}")
    assert isinstance(caught.value, ValueError)


def test_the_example_itself_is_valid() -> None:
    assert SPEC_EXAMPLE.startswith("route add ")
    parse_spec(SPEC_EXAMPLE.removeprefix("route add "))


# -- matching -------------------------------------------------------------------------------
def test_matches_agent_and_tool_globs_and_minimum_severity() -> None:
    rule = RouteRule(agent="refund-*", tool="issue_*", min_severity=Severity.HIGH, channel="C1")
    assert rule.matches("refund-agent", "issue_refund", "high")
    assert rule.matches("refund-agent", "issue_credit", Severity.CRITICAL)
    assert not rule.matches("refund-agent", "issue_refund", "medium")
    assert not rule.matches("cleanup-agent", "issue_refund", "high")
    assert not rule.matches("refund-agent", "lookup_order", "critical")
    assert not rule.matches("REFUND-agent", "issue_refund", "high")  # globs are case-sensitive
    # An unknown severity counts as the highest: it meets the strictest rule, not none.
    assert rule.matches("refund-agent", "issue_refund", "catastrophic")


def test_to_route() -> None:
    rule = parse_spec("channel=C1 reviewers=U1,S2 quorum=2 expiry=1h self=yes")
    assert replace_id(rule, "r7").to_route() == Route(
        route_id="r7",
        destination="C1",
        reviewers=("U1", "S2"),
        quorum=2,
        expiry_seconds=3600,
        allow_self_approval=True,
    )


def replace_id(rule: RouteRule, rule_id: str) -> RouteRule:
    return RouteRule.from_dict({**rule.to_dict(), "id": rule_id})


async def test_first_match_wins_and_the_default_channel_catches_the_rest(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT, default_expiry_seconds=600)
    router: Router = book  # the agent host's protocol
    critical = await book.add(
        parse_spec("tool=issue_refund severity=critical channel=C0CRIT"), "U0"
    )
    refunds = await book.add(parse_spec("tool=issue_refund channel=C0REFUND reviewers=U1"), "U0")
    await book.add(parse_spec("agent=refund-* channel=C0LATER"), "U0")

    assert (await router.route("refund-agent", "issue_refund", "critical")).route_id == critical.id
    route = await router.route("refund-agent", "issue_refund", "medium")
    assert route == refunds.to_route()
    assert route.destination == "C0REFUND" and route.reviewers == ("U1",)
    assert (await router.route("refund-agent", "lookup_order", "low")).destination == "C0LATER"

    fallback = await router.route("cleanup-agent", "delete_file", "high")
    assert fallback == Route(route_id="default", destination=DEFAULT, expiry_seconds=600)


async def test_no_rules_routes_everything_to_the_default(redis: Redis) -> None:
    route = await RouteBook(redis, DEFAULT).route("any", "tool", "low")
    assert route == Route(destination=DEFAULT, expiry_seconds=DEFAULT_EXPIRY_SECONDS)


# -- RouteBook ------------------------------------------------------------------------------
async def audit(redis: Redis) -> list[dict[str, str]]:
    entries: Any = await redis.xrange(keys.AUDIT)
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def test_add_list_remove_with_audit(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT, clock=lambda: 1700000000.5)
    first = await book.add(parse_spec("tool=issue_refund channel=C1 reviewers=U1"), "U0ADMIN")
    second = await book.add(parse_spec("tool=delete_* channel=C2"), "U0OTHER")
    assert (first.id, second.id) == ("r1", "r2")
    assert await book.rules() == [first, second]

    assert await book.remove("r1", "U0ADMIN") == first
    assert await book.rules() == [second]
    assert await book.remove("r1", "U0ADMIN") is None  # already gone: no change, no entry
    third = await book.add(parse_spec("channel=C3"), "U0ADMIN")
    assert third.id == "r3", "a removed rule's id is never reused"

    raw: Any = await redis.get(keys.ROUTES)
    stored = json.loads(raw)
    assert [r["id"] for r in stored] == ["r2", "r3"]

    entries = await audit(redis)
    assert [(e["event"], e["actor"], e["route_id"]) for e in entries] == [
        ("route.add", "U0ADMIN", "r1"),
        ("route.add", "U0OTHER", "r2"),
        ("route.remove", "U0ADMIN", "r1"),
        ("route.add", "U0ADMIN", "r3"),
    ]
    assert all(e["at"] == "1700000000.5" for e in entries)
    assert json.loads(entries[0]["before"]) == []
    assert json.loads(entries[0]["after"]) == [first.to_dict()]
    assert json.loads(entries[2]["before"]) == [first.to_dict(), second.to_dict()]
    assert json.loads(entries[2]["after"]) == [second.to_dict()]


async def test_ids_are_unique_under_concurrent_adds(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT)
    added = await asyncio.gather(
        *(book.add(parse_spec(f"tool=t{i} channel=C{i}"), f"U{i}") for i in range(10))
    )
    assert sorted(r.id for r in added) == sorted(f"r{i}" for i in range(1, 11))
    assert sorted(r.id for r in await book.rules()) == sorted(r.id for r in added)
    assert len(await audit(redis)) == 10
    counter: Any = await redis.get(ROUTE_COUNTER)
    assert int(counter) == 10


async def test_seed_fills_an_empty_book_once(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT)
    rules = [parse_spec("tool=a channel=C1"), parse_spec("tool=b channel=C2")]
    assert await book.seed(rules) is True
    assert [(r.id, r.tool) for r in await book.rules()] == [("r1", "a"), ("r2", "b")]
    (entry,) = await audit(redis)
    assert (entry["event"], entry["actor"]) == ("route.seed", "routes-file")
    assert len(json.loads(entry["after"])) == 2


async def test_seed_does_not_overwrite_existing_rules(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT)
    mine = await book.add(parse_spec("tool=admin_made channel=C9"), "U0ADMIN")
    assert await book.seed([parse_spec("tool=from_file channel=C1")]) is False
    assert await book.rules() == [mine]
    assert len(await audit(redis)) == 1


async def test_a_routes_file_not_applied_over_other_rules_is_a_warning_saying_what_to_do(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    book = RouteBook(redis, DEFAULT)
    from_file = [parse_spec("tool=from_file channel=C1 quorum=2")]
    with caplog.at_level(logging.INFO, logger="agent_host.durable.route_book"):
        assert await book.seed(from_file) is True
        assert await book.seed(from_file) is False  # a restart, the file unchanged
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        await book.add(parse_spec("tool=admin_made channel=C9"), "U0ADMIN")
        stricter = [*from_file, parse_spec("tool=issue_refund channel=C1 quorum=3")]
        assert await book.seed(stricter) is False  # a restart with an edited file

    warning = caplog.records[-1]
    assert warning.levelname == "WARNING"
    assert warning.getMessage() == (
        "COUNTERSIGN_ROUTES_FILE's 2 route(s) are not in force: Redis holds 2 route(s) of its "
        "own, which differ (a routes file fills only a Redis that never held routes, so that "
        "admins' changes survive a restart). To put the file's rules in force, change the routes "
        f"with /approvals route, or delete the key {keys.ROUTES} and restart"
    )


async def test_seed_respects_an_admin_who_removed_every_rule(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT)
    assert await book.seed([parse_spec("tool=from_file channel=C1")]) is True
    await book.remove("r1", "U0ADMIN")
    assert await book.seed([parse_spec("tool=from_file channel=C1")]) is False  # a restart
    assert await book.rules() == []


async def test_seeding_nothing_leaves_the_key_absent(redis: Redis) -> None:
    book = RouteBook(redis, DEFAULT)
    assert await book.seed([]) is False
    assert await book.remove("r1", "U0") is None
    assert await redis.exists(keys.ROUTES) == 0  # so a later, non-empty file still seeds
    assert await book.seed([parse_spec("channel=C1")]) is True


async def test_rules_stored_before_the_visible_glob_check_are_still_read(redis: Redis) -> None:
    """A glob a new route may no longer have (not ASCII) in a rule stored before: routing
    goes on as it did, rather than failing closed for every request after an upgrade."""
    old = RouteRule(id="r1", agent="réfund-*", channel="C1")
    await redis.set(keys.ROUTES, json.dumps([old.to_dict()]))
    book = RouteBook(redis, DEFAULT)
    assert await book.rules() == [old]
    assert (await book.route("réfund-bot", "issue_refund", "low")).destination == "C1"
    with pytest.raises(RouteSpecError, match="visible ASCII"):
        parse_spec("agent=réfund-* channel=C1")


async def test_unreadable_rules_fail_closed(redis: Redis) -> None:
    await redis.set(keys.ROUTES, "{not json")
    with pytest.raises(StoreError, match="unreadable"):
        await RouteBook(redis, DEFAULT).route("a", "t", "low")


# -- format_rules ---------------------------------------------------------------------------
def test_format_rules() -> None:
    rules = [
        replace_id(
            parse_spec(
                "agent=refund-* tool=issue_refund severity=high channel=C0APPROVALS "
                "reviewers=U1,S2 quorum=2 expiry=24h self=yes"
            ),
            "r1",
        ),
        replace_id(parse_spec("channel=C2"), "r2"),
    ]
    lines = format_rules(rules, DEFAULT).splitlines()
    assert lines[0] == (
        "• *r1* agent `refund-*` tool `issue_refund` severity ≥ high → <#C0APPROVALS> · "
        "reviewers <@U1>, <!subteam^S2> · quorum 2 · expires after 1d · self-approval allowed"
    )
    assert lines[1] == (
        "• *r2* agent `*` tool `*` severity ≥ low → <#C2> · reviewers anyone · quorum 1 · "
        "expires after 3d · no self-approval"
    )
    assert lines[2] == f"Anything else goes to <#{DEFAULT}>"


def test_format_no_rules() -> None:
    assert format_rules([], DEFAULT) == f"No routes: every request goes to <#{DEFAULT}>"


# -- the routes file ------------------------------------------------------------------------
GOOD_FILE = """
routes:
  - agent: "refund-*"
    tool: issue_refund
    min_severity: high
    channel: C0APPROVALS
    reviewers: [U0ALICE, S0FINANCE]
    quorum: 2
    expiry: 24h
    allow_self_approval: true
  - channel: C0OPS
    expiry: 3600
  - channel: "<#C0ESC|escaped>"
    expiry: "90"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "routes.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_load_a_good_routes_file(tmp_path: Path) -> None:
    first, second, third = load_routes_file(write(tmp_path, GOOD_FILE))
    assert first == parse_spec(
        "agent=refund-* tool=issue_refund severity=high channel=C0APPROVALS "
        "reviewers=U0ALICE,S0FINANCE quorum=2 expiry=24h self=yes"
    )
    assert second == RouteRule(channel="C0OPS", expiry_seconds=3600)
    assert third == RouteRule(channel="C0ESC", expiry_seconds=90)
    assert load_routes_file(write(tmp_path, "routes: []")) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("routes: [\n", "not valid YAML"),
        ("", "expected a top-level 'routes:' list"),
        ("rules: []", "expected a top-level 'routes:' list"),
        ("routes: {channel: C1}", "expected a top-level 'routes:' list"),
        ("routes: [C1]", "route 1: expected a mapping of fields"),
        (
            "routes:\n  - channel: C1\n  - chanel: C2",
            "route 2: unknown field 'chanel' (did you mean 'channel'?)",
        ),
        ("routes:\n  - tool: x", "route 1: field 'channel' is missing"),
        ("routes:\n  - channel: general", "route 1: field 'channel': channel 'general'"),
        ("routes:\n  - channel: 123", "route 1: field 'channel': must be text"),
        ("routes:\n  - {channel: C1, min_severity: huge}", "field 'min_severity': severity"),
        ("routes:\n  - {channel: C1, reviewers: U1}", "field 'reviewers': must be a list"),
        ("routes:\n  - {channel: C1, reviewers: [bob]}", "field 'reviewers': reviewer 'bob'"),
        ("routes:\n  - {channel: C1, quorum: 0}", "field 'quorum': quorum 0"),
        ("routes:\n  - {channel: C1, quorum: '2'}", "field 'quorum': quorum '2'"),
        ("routes:\n  - {channel: C1, quorum: 11}", "field 'quorum': quorum 11"),
        ("routes:\n  - {channel: C1, expiry: 0}", "field 'expiry': expiry 0 is out of range"),
        ("routes:\n  - {channel: C1, expiry: 31d}", "field 'expiry': expiry '31d' is out"),
        ("routes:\n  - {channel: C1, expiry: soon}", "field 'expiry': expiry 'soon' is not"),
        ("routes:\n  - {channel: C1, expiry: true}", "field 'expiry'"),
        ("routes:\n  - {channel: C1, expiry: 1.5}", "field 'expiry': expiry 1.5 is not"),
        (
            "routes:\n  - {channel: C1, allow_self_approval: maybe}",
            "field 'allow_self_approval'",
        ),
        ("routes:\n  - {channel: C1, agent: 7}", "field 'agent': must be text"),
        ("routes:\n  - {channel: C1, reviewers: ['']}", "reviewers has an empty entry"),
    ],
)
def test_bad_routes_files_name_the_file_the_route_and_the_field(
    tmp_path: Path, text: str, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RoutesFileError) as caught:
        load_routes_file(path)
    message = str(caught.value)
    assert message.startswith(f"COUNTERSIGN_ROUTES_FILE {path}: ")
    assert says in message


def test_a_missing_routes_file(tmp_path: Path) -> None:
    with pytest.raises(RoutesFileError, match="cannot read it"):
        load_routes_file(tmp_path / "absent.yml")


@pytest.mark.parametrize(
    ("first", "then", "covers"),
    [
        ("channel=C1", "agent=a tool=t severity=high channel=C2", True),
        ("agent=refund-agent channel=C1", "agent=refund-agent tool=issue_refund channel=C2", True),
        ("agent=refund-* channel=C1", "agent=refund-agent channel=C2", True),
        ("agent=refund-* channel=C1", "agent=refund-* tool=x channel=C2", True),
        ("agent=refund-* channel=C1", "agent=*-agent channel=C2", False),  # only part of it
        ("agent=refund-agent channel=C1", "channel=C2", False),
        ("tool=issue_refund channel=C1", "tool=issue_* channel=C2", False),
        ("severity=high channel=C1", "severity=medium channel=C2", False),
        ("severity=medium channel=C1", "severity=high channel=C2", True),
    ],
)
def test_a_rule_covers_another_when_it_matches_every_call_the_other_does(
    first: str, then: str, covers: bool
) -> None:
    assert parse_spec(first).covers(parse_spec(then)) is covers


@pytest.mark.parametrize(
    ("first", "then", "overlap"),
    [
        ("agent=refund-agent channel=C1", "tool=issue_refund channel=C2", True),
        ("agent=refund-agent channel=C1", "agent=cleanup-agent channel=C2", False),
        ("tool=issue_refund channel=C1", "tool=delete_file channel=C2", False),
        ("tool=issue_* channel=C1", "tool=issue_refund channel=C2", True),
        ("tool=issue_* channel=C1", "tool=delete_* channel=C2", False),  # their starts differ
        ("agent=*-bot channel=C1", "agent=*-agent channel=C2", False),  # their ends differ
        ("agent=refund-* channel=C1", "agent=*-agent channel=C2", True),  # refund-agent
        ("agent=re*nd channel=C1", "agent=ref?nd channel=C2", True),
        ("tool=issue_[ab]* channel=C1", "tool=delete_* channel=C2", True),  # unsure: said so
    ],
)
def test_rules_overlap_when_a_call_could_match_both(first: str, then: str, overlap: bool) -> None:
    assert parse_spec(first).overlaps(parse_spec(then)) is overlap
