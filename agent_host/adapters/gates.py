"""The gate of each tool of a hosted agent: the operator's policy, else the framework's flag."""

from __future__ import annotations

from collections.abc import Mapping

from agent_host.errors import ConfigurationError
from agent_host.runtime.hosted import ToolGate
from agent_host.runtime.policy import Permission, PermissionFunction, Severity

__all__ = ["gates_for"]


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
