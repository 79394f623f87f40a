"""Agents and the registry that rebuilds them.

Functions do not serialize, so a checkpoint names its agent and the registry rebuilds it
from a factory (seeds 001 and 002). The fingerprint hashes what a reviewer's approval
depends on: the tools, their schemas and their policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_host.errors import ToolDefinitionError, UnknownAgentError
from agent_host.runtime.fingerprint import describe_changes, fingerprint_of
from agent_host.runtime.messages import ToolSpec
from agent_host.runtime.models.base import Model
from agent_host.runtime.policy import Permission, RuleSet, Verdict
from agent_host.runtime.tools import Tool

if TYPE_CHECKING:
    from agent_host.runtime.hosted import HostedAgent

__all__ = ["Agent", "AgentRegistry"]


@dataclass
class Agent:
    name: str
    instructions: str
    tools: list[Tool]
    model: Model
    rules: RuleSet = field(default_factory=RuleSet)  # operator overrides, checked first
    max_turns: int = 20

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            # A call names its tool: the approval's hash would cover one, and the other run.
            raise ToolDefinitionError(
                f"agent {self.name!r} has more than one tool named {', '.join(twice)}; "
                "give each tool a name of its own (tool(name=...))"
            )

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def judge(
        self, tool: Tool, arguments: Mapping[str, Any], context: Mapping[str, Any]
    ) -> Verdict:
        """The policy for one call: the first operator rule that matches, else the tool's own
        permission (the runner plans every call with it; an edit is judged again with it)."""
        verdict = self.rules.first_match(self.name, tool.name, arguments)
        return verdict or tool.judge(arguments, context)

    def editable_tool(self, name: str) -> Tool | None:
        """The tool an edit of one of its calls is checked with (`runtime.editing`)."""
        return self.tool(name)

    def judge_edit(
        self, tool: str, arguments: Mapping[str, Any], context: Mapping[str, Any]
    ) -> Verdict:
        """The policy on a call's edited arguments; a tool no longer here is denied."""
        found = self.tool(tool)
        if found is None:
            return Verdict(Permission.DENY, f"{tool} is not a tool of agent {self.name}")
        return self.judge(found, arguments, context)

    def tool_specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.schema())
            for t in self.tools
        ]

    def fingerprint_parts(self) -> dict[str, Any]:
        return {
            "agent": self.name,
            "tools": {
                t.name: {
                    "schema": t.schema(),
                    "policy": t.describe_policy(),
                    "severity": t.severity,
                }
                for t in self.tools
            },
            "rules": [repr(rule) for rule in self.rules.rules],
        }

    def fingerprint(self) -> str:
        return fingerprint_of(self.fingerprint_parts())

    def describe_changes(self, parts: Mapping[str, Any]) -> str:
        """What differs between these fingerprint parts and this agent's, in words."""
        return describe_changes(parts, self.fingerprint_parts())


AgentFactory = Callable[[], "Agent | HostedAgent"]


class AgentRegistry:
    """Maps agent names to factories; every process builds the same registry at start."""

    def __init__(self, factories: Mapping[str, AgentFactory] | None = None) -> None:
        self._factories: dict[str, AgentFactory] = dict(factories or {})

    def register(self, name: str, factory: AgentFactory) -> None:
        self._factories[name] = factory

    def names(self) -> Iterable[str]:
        return sorted(self._factories)

    def build(self, name: str) -> Agent | HostedAgent:
        factory = self._factories.get(name)
        if factory is None:
            known = ", ".join(self.names()) or "none"
            raise UnknownAgentError(
                f"no agent named {name!r} is registered (known: {known}); "
                "check the agent name or COUNTERSIGN_AGENTS"
            )
        return factory()
