"""What the operator sets per tool of a hosted agent: its gate (the operator's policy, else
the framework's flag) and the arguments a reviewer may edit."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agent_host.errors import ConfigurationError
from agent_host.runtime.hosted import ToolGate
from agent_host.runtime.policy import Permission, PermissionFunction, Severity
from agent_host.runtime.tools import editable_names

__all__ = ["editable_by_tool", "gates_for"]

_Tool = TypeVar("_Tool")


def editable_by_tool(
    agent: str,
    tools: Mapping[str, _Tool],
    editable: Mapping[str, bool | Sequence[str]],
    schema_of: Callable[[_Tool], Mapping[str, Any]],
) -> dict[str, tuple[str, ...]]:
    """The adapter's `editable=` by tool, checked against each tool's parameters (the
    `properties` of its JSON schema, `schema_of(tool)`)."""
    names: dict[str, tuple[str, ...]] = {}
    for tool, wanted in editable.items():
        found = tools.get(tool)
        if found is None:
            raise ConfigurationError(
                f"agent {agent!r}: editable names tool {tool!r}, which it does not have "
                f"({', '.join(sorted(tools)) or 'no function tools'})"
            )
        properties = list((schema_of(found).get("properties") or {}).keys())
        if chosen := editable_names(tool, properties, wanted, error=ConfigurationError):
            names[tool] = chosen
    return names


def gates_for(
    needs_approval: Mapping[str, bool],
    policy: Mapping[str, ToolGate | Permission | PermissionFunction] | None,
) -> dict[str, ToolGate]:
    """A tool the framework marks as needing approval asks a person (medium severity);
    any other is let through. `policy` overrides either, per tool name."""
    policy = dict(policy or {})
    if unknown := sorted(set(policy) - set(needs_approval)):
        known = ", ".join(sorted(needs_approval)) or "none"
        raise ConfigurationError(
            f"policy names tool(s) {', '.join(unknown)} that the agent does not have "
            f"(its tools: {known}); fix the names in policy="
        )
    gates = {
        name: ToolGate(
            Permission.ASK, Severity.MEDIUM, "the agent marks this tool as needing approval"
        )
        if needed
        else ToolGate(Permission.ALLOW)
        for name, needed in needs_approval.items()
    }
    for name, given in policy.items():
        gates[name] = given if isinstance(given, ToolGate) else ToolGate(given)
    return gates
