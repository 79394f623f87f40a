"""The permission policy: every tool call is ALLOW, DENY or ASK (seed 000, docs/ORIGINS.md).

A tool's own permission is a constant or a function of the call's arguments and the run
context (seed 001 in docs/ORIGINS.md: only prod deletions need approval). Operators layer
rules on top, kept outside the code (YAML): the first rule whose tool pattern and argument
conditions match decides, so a tool can be tightened or relaxed without a redeploy.
"""

from __future__ import annotations

import enum
import fnmatch
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from agent_host.errors import PolicyRuleError

log = logging.getLogger(__name__)

__all__ = [
    "Permission",
    "PermissionFunction",
    "PolicyRule",
    "RuleSet",
    "Severity",
    "Verdict",
    "confidence_gate",
    "judged",
    "load_rules",
]


class Permission(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


class Severity(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)

    @classmethod
    def rank_of(cls, severity: str, *, unknown: int) -> int:
        """The rank of a severity as stored (any case); `unknown` for anything else, which
        the caller chooses to rank below or above every known severity."""
        try:
            return cls(severity.lower()).rank
        except ValueError:
            return unknown


@dataclass(frozen=True)
class Verdict:
    """The policy's answer for one call, with what a reviewer is shown."""

    permission: Permission
    reason: str = ""
    severity: Severity = Severity.MEDIUM
    allow_always: bool = True  # may a reviewer approve this tool for the rest of the run?

    @classmethod
    def allow(cls, reason: str = "") -> Verdict:
        return cls(Permission.ALLOW, reason)

    @classmethod
    def deny(cls, reason: str) -> Verdict:
        return cls(Permission.DENY, reason)

    @classmethod
    def ask(
        cls, reason: str, severity: Severity | str = Severity.MEDIUM, *, allow_always: bool = True
    ) -> Verdict:
        return cls(Permission.ASK, reason, Severity(severity), allow_always)


# A per-call decision: (arguments, run context) -> Verdict, Permission or bool (True = ASK).
PermissionFunction = Callable[[Mapping[str, Any], Mapping[str, Any]], "Verdict | Permission | bool"]


def confidence_gate(
    threshold: float, field: str = "confidence", severity: Severity | str = Severity.MEDIUM
) -> PermissionFunction:
    """Seed 003's gate: auto-approve at or above `threshold` confidence, otherwise ask."""

    def gate(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Verdict:
        confidence = arguments.get(field, context.get(field))
        if isinstance(confidence, int | float) and confidence >= threshold:
            return Verdict.allow(f"confidence {confidence:.2f} >= {threshold:.2f}")
        shown = f"{confidence:.2f}" if isinstance(confidence, int | float) else "unknown"
        return Verdict.ask(f"confidence {shown} is below {threshold:.2f}", severity)

    gate.__qualname__ = f"confidence_gate({threshold}, {field!r})"
    return gate


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": lambda value, expected: value == expected,
    "not_equals": lambda value, expected: value != expected,
    "contains": lambda value, expected: str(expected) in str(value),
    "matches": lambda value, expected: re.search(str(expected), str(value)) is not None,
    "gt": lambda value, expected: _number(value) > float(expected),
    "gte": lambda value, expected: _number(value) >= float(expected),
    "lt": lambda value, expected: _number(value) < float(expected),
    "lte": lambda value, expected: _number(value) <= float(expected),
    "in": lambda value, expected: value in expected,
}


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")  # comparisons with NaN are false: the condition does not match


@dataclass(frozen=True)
class Condition:
    argument: str
    operator: str
    expected: Any

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        if self.argument not in arguments:
            return False
        return _OPERATORS[self.operator](arguments[self.argument], self.expected)


@dataclass(frozen=True)
class PolicyRule:
    """`tool` is a glob (`delete_*`); every condition must hold for the rule to apply."""

    tool: str
    permission: Permission
    reason: str = ""
    severity: Severity = Severity.MEDIUM
    conditions: tuple[Condition, ...] = ()
    agent: str = "*"

    def matches(self, agent: str, tool: str, arguments: Mapping[str, Any]) -> bool:
        return (
            fnmatch.fnmatchcase(tool, self.tool)
            and fnmatch.fnmatchcase(agent, self.agent)
            and all(c.matches(arguments) for c in self.conditions)
        )

    def verdict(self) -> Verdict:
        reason = self.reason or f"operator rule for {self.tool}"
        return Verdict(self.permission, reason, self.severity)


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[PolicyRule, ...] = field(default_factory=tuple)

    def first_match(self, agent: str, tool: str, arguments: Mapping[str, Any]) -> Verdict | None:
        for rule in self.rules:
            if rule.matches(agent, tool, arguments):
                return rule.verdict()
        return None


_RULE_EXAMPLE = """rules:
  - tool: "issue_refund"
    when: {amount: {gt: 100}}
    permission: ask
    severity: high
    reason: "refunds over 100 need a second pair of eyes\""""


def load_rules(text: str, source: str = "rules") -> RuleSet:
    """Parse operator rules from YAML; a malformed file raises PolicyRuleError saying where."""
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise PolicyRuleError(
            f"{source}: not valid YAML ({exc}); expected e.g.\n{_RULE_EXAMPLE}"
        ) from exc
    items = document.get("rules") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise PolicyRuleError(
            f"{source}: expected a top-level 'rules:' list, e.g.\n{_RULE_EXAMPLE}"
        )
    return RuleSet(
        tuple(_parse_rule(item, f"{source}: rule {i + 1}") for i, item in enumerate(items))
    )


_RULE_KEYS = {"tool", "agent", "permission", "severity", "reason", "when"}


def _parse_rule(item: Any, where: str) -> PolicyRule:
    if not isinstance(item, dict) or "tool" not in item or "permission" not in item:
        raise PolicyRuleError(
            f"{where}: each rule needs 'tool' and 'permission', e.g.\n{_RULE_EXAMPLE}"
        )
    if unknown := sorted(set(item) - _RULE_KEYS):
        # A misspelt key must not silently widen a rule (e.g. `wehn:` dropping its conditions).
        known = ", ".join(sorted(_RULE_KEYS))
        raise PolicyRuleError(f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {known}")
    try:
        permission = Permission(str(item["permission"]).lower())
        severity = Severity(str(item.get("severity", "medium")).lower())
    except ValueError as exc:
        raise PolicyRuleError(
            f"{where}: {exc}; permission is one of allow/deny/ask, "
            "severity one of low/medium/high/critical"
        ) from exc
    return PolicyRule(
        tool=str(item["tool"]),
        agent=str(item.get("agent", "*")),
        permission=permission,
        severity=severity,
        reason=str(item.get("reason", "")),
        conditions=_parse_conditions(item.get("when") or {}, where),
    )


def _parse_conditions(when: Any, where: str) -> tuple[Condition, ...]:
    if not isinstance(when, dict):
        raise PolicyRuleError(f"{where}: 'when' maps argument names to conditions")
    conditions = []
    for argument, test in when.items():
        tests = test if isinstance(test, dict) else {"equals": test}
        for operator, expected in tests.items():
            if operator not in _OPERATORS:
                known = ", ".join(sorted(_OPERATORS))
                raise PolicyRuleError(f"{where}: unknown operator {operator!r}; use one of {known}")
            _check_operand(operator, expected, f"{where}: {argument}.{operator}")
            conditions.append(Condition(str(argument), operator, expected))
    return tuple(conditions)


def _check_operand(operator: str, expected: Any, where: str) -> None:
    """Refuse at load time what would otherwise fail in the middle of a run."""
    if operator in ("gt", "gte", "lt", "lte"):
        if isinstance(expected, bool) or not isinstance(expected, int | float):
            raise PolicyRuleError(f"{where}: needs a number, got {expected!r}")
    elif operator == "matches":
        try:
            re.compile(str(expected))
        except re.error as exc:
            raise PolicyRuleError(f"{where}: not a valid regular expression ({exc})") from exc
    elif operator == "in" and not isinstance(expected, list):
        raise PolicyRuleError(f"{where}: needs a list, e.g. in: [a, b]")


def describe_permission(permission: Permission | PermissionFunction) -> str:
    """A stable text for the agent fingerprint: a constant, or the function's qualified name."""
    if isinstance(permission, Permission):
        return permission.value
    return f"{getattr(permission, '__module__', '?')}.{getattr(permission, '__qualname__', '?')}"


def to_verdict(
    result: Verdict | Permission | bool, default_reason: str, default_severity: Severity
) -> Verdict:
    """Normalise what a permission function returned (True means ASK)."""
    if isinstance(result, Verdict):
        return result if result.reason else replace(result, reason=default_reason)
    if isinstance(result, bool):
        result = Permission.ASK if result else Permission.ALLOW
    if not isinstance(result, Permission):
        raise TypeError(
            f"a permission function returned {result!r}; return a Permission, a Verdict or a bool"
        )
    if result is Permission.ALLOW:
        return Verdict.allow()
    return Verdict(result, default_reason, default_severity)


def judged(judge: Callable[[], Verdict], tool: str, run_id: str) -> Verdict:
    """`judge()`, or, when an operator's permission function fails (raises, or returns
    something else than a verdict), a person decides: ASK at high severity, once."""
    try:
        return judge()
    except Exception as exc:  # only its type: its text may quote the arguments
        error = type(exc).__name__
        log.warning("run %s: the policy for %s raised %s; a person decides", run_id, tool, error)
        reason = f"countersign's policy could not judge these arguments ({error})"
        return Verdict.ask(reason, Severity.HIGH, allow_always=False)
