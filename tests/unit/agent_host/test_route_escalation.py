"""The escalation ladder's route fields: `remind_after`, `escalate_after` and `escalate_to`,
parsed alike from `/approvals route add` and the routes file, and refused with a clear
error when they could never work."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_host.approvals.routes import (
    RouteRule,
    RoutesFileError,
    RouteSpecError,
    format_rules,
    load_routes_file,
    parse_spec,
)


def test_a_spec_sets_the_ladder_with_durations_and_slack_mentions() -> None:
    rule = parse_spec(
        "tool=issue_refund channel=<#C0APPROVALS|approvals> reviewers=<@U0REVIEWER> "
        "remind_after=30m escalate_after=4h escalate_to=<#C0OPS|ops-approvals>"
    )
    assert (rule.remind_after_seconds, rule.escalate_after_seconds) == (1800, 4 * 3600)
    assert rule.escalate_to == "C0OPS"
    route = rule.to_route()
    assert (route.remind_after_seconds, route.escalate_after_seconds) == (1800, 14400)
    assert route.escalate_to == "C0OPS"


@pytest.mark.parametrize(
    ("written", "target"),
    [
        ("<!subteam^S0ONCALL|@oncall>", "S0ONCALL"),
        ("<@U0BOSS>", "U0BOSS"),
        ("<@U0BOSS|boss>", "U0BOSS"),
        ("G0PRIVATE", "G0PRIVATE"),
        ("S0ONCALL", "S0ONCALL"),
    ],
)
def test_escalate_to_takes_a_channel_a_user_group_or_a_user(written: str, target: str) -> None:
    rule = parse_spec(f"channel=C0APPROVALS escalate_after=2d escalate_to={written}")
    assert rule.escalate_to == target and rule.escalate_after_seconds == 2 * 86400


def test_the_ladder_is_off_unless_asked_for() -> None:
    rule = parse_spec("channel=C0APPROVALS")
    route = rule.to_route()
    assert (route.remind_after_seconds, route.escalate_after_seconds, route.escalate_to) == (
        0,
        0,
        "",
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("remind_after=soon", "remind_after 'soon' is not a duration"),
        ("remind_after=30", "remind_after '30' is not a duration"),
        ("escalate_after=0m escalate_to=C0OPS", "escalate_after '0m' is out of range"),
        ("remind_after=31d expiry=30d", "remind_after '31d' is out of range"),
        ("remind_after=4d", "remind_after 4d is not before expiry 3d"),
        ("expiry=1h remind_after=1h", "remind_after 1h is not before expiry 1h"),
        ("expiry=1h escalate_after=2h escalate_to=C0OPS", "escalate_after 2h is not before"),
        ("escalate_after=4h", "escalate_after needs escalate_to"),
        ("escalate_to=C0OPS", "escalate_to needs escalate_after"),
        ("escalate_after=4h escalate_to=#ops", "escalate_to '#ops' is not a Slack channel"),
        ("escalate_after=4h escalate_to=<https://evil.example|ops>", "is not a Slack channel"),
        ("escalate_after=4h escalate_to=<!here>", "is not a Slack channel"),
        ("escalate_after=4h escalate_to=C0APPROVALS", "is the route's own channel"),
        ("escalate_after=4h escalate_to=<#C0APPROVALS|approvals>", "is the route's own channel"),
        ("remind=30m", "unknown key 'remind' (did you mean 'remind_after'?)"),
        ("remind_after=30m remind_after=1h", "remind_after is given twice"),
    ],
)
def test_a_bad_ladder_in_a_spec_is_refused_saying_what_to_do(spec: str, says: str) -> None:
    with pytest.raises(RouteSpecError) as refused:
        parse_spec(f"channel=C0APPROVALS {spec}")
    assert says in str(refused.value)
    assert "example: route add" in str(refused.value)


def test_a_rule_made_in_code_is_checked_the_same_way() -> None:
    with pytest.raises(RouteSpecError, match="remind_after True must be whole seconds"):
        RouteRule(channel="C0APPROVALS", remind_after_seconds=True)  # type: ignore[arg-type]
    with pytest.raises(RouteSpecError, match="escalate_to 5 must be text"):
        RouteRule(
            channel="C0APPROVALS",
            escalate_after_seconds=60,
            escalate_to=5,  # type: ignore[arg-type]
        )


def test_a_rule_stored_before_the_ladder_existed_loads_with_it_off() -> None:
    stored = {
        "id": "r1",
        "agent": "*",
        "tool": "*",
        "min_severity": "low",
        "channel": "C0APPROVALS",
        "reviewers": [],
        "quorum": 1,
        "expiry_seconds": 3600,
        "allow_self_approval": False,
        "webhook_completes_quorum": False,
    }
    rule = RouteRule.from_dict(stored)
    assert (rule.remind_after_seconds, rule.escalate_after_seconds, rule.escalate_to) == (0, 0, "")
    again = parse_spec("channel=C0APPROVALS remind_after=1m escalate_after=2m escalate_to=S0X")
    assert RouteRule.from_dict(again.to_dict()) == again


def test_the_listing_shows_the_ladder() -> None:
    rule = parse_spec(
        "channel=C0APPROVALS remind_after=30m escalate_after=4h escalate_to=<!subteam^S0ONCALL>"
    )
    listing = format_rules([rule], "C0GENERAL")
    assert "reminds after 30m · escalates to <!subteam^S0ONCALL> after 4h" in listing
    channel = parse_spec("channel=C0APPROVALS escalate_after=90m escalate_to=C0OPS")
    assert "escalates to <#C0OPS> after 90m" in format_rules([channel])
    assert "remind" not in format_rules([parse_spec("channel=C0APPROVALS")])


def _routes_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "routes.yml"
    path.write_text(body)
    return path


def test_the_routes_file_sets_the_ladder(tmp_path: Path) -> None:
    path = _routes_file(
        tmp_path,
        """routes:
  - tool: issue_refund
    channel: C0APPROVALS
    remind_after: 30m
    escalate_after: 4h
    escalate_to: "<!subteam^S0ONCALL|@oncall>"
  - channel: C0OPS
    expiry: 2h
    remind_after: 90
""",
    )
    first, second = load_routes_file(path)
    assert (first.remind_after_seconds, first.escalate_after_seconds) == (1800, 14400)
    assert first.escalate_to == "S0ONCALL"
    assert second.remind_after_seconds == 90 and second.escalate_to == ""


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ("remind_after: soon", "route 1: field 'remind_after': remind_after 'soon' is not a"),
        ("remind_after: yes", "field 'remind_after': remind_after True is not a duration"),
        ("escalate_after: 4h", "field 'escalate_to': escalate_after needs escalate_to"),
        ("escalate_to: [C0OPS]", "field 'escalate_to': must be text"),
        ("expiry: 1h\n    remind_after: 2h", "remind_after 2h is not before expiry 1h"),
        ("escalate_after: 1h\n    escalate_to: C0APPROVALS", "is the route's own channel"),
        ("remind: 1h", "unknown field 'remind' (did you mean 'remind_after'?)"),
    ],
)
def test_a_bad_ladder_in_the_routes_file_names_the_route_and_field(
    tmp_path: Path, lines: str, says: str
) -> None:
    path = _routes_file(tmp_path, f"routes:\n  - channel: C0APPROVALS\n    {lines}\n")
    with pytest.raises(RoutesFileError) as refused:
        load_routes_file(path)
    assert says in str(refused.value)
