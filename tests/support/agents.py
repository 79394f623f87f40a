"""Shared building blocks for the agent_host tests: counting tools, a spying model, registries."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.messages import Message, ModelResponse, ToolCall, ToolSpec
from agent_host.runtime.models.base import Model
from agent_host.runtime.models.scripted import ScriptedModel
from agent_host.runtime.policy import Permission, PermissionFunction, RuleSet
from agent_host.runtime.tools import Tool, ToolContext, tool


@dataclass
class Recorder:
    """Every real invocation of a counting tool: (tool, call id, target)."""

    invocations: list[tuple[str, str, str]] = field(default_factory=list)

    def count(self, tool_name: str | None = None) -> int:
        return sum(1 for name, _, _ in self.invocations if tool_name in (None, name))

    def per_call_id(self) -> Counter[str]:
        return Counter(call_id for _, call_id, _ in self.invocations)

    def targets(self, tool_name: str) -> list[str]:
        return [target for name, _, target in self.invocations if name == tool_name]


def counting_tool(
    recorder: Recorder,
    name: str,
    permission: Permission | PermissionFunction = Permission.ALLOW,
    **options: Any,
) -> Tool:
    """An async tool `name(target: str)` that records each real invocation."""

    async def run(target: str, ctx: ToolContext) -> str:
        recorder.invocations.append((name, ctx.call_id, target))
        return f"{name} done: {target}"

    return tool(name=name, description=f"{name} a target", permission=permission, **options)(run)


def tc(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def scripted(*turns: ModelResponse | list[ToolCall]) -> ScriptedModel:
    return ScriptedModel.from_turns(*turns)


class SpyModel:
    """Wraps a model and keeps a copy of every transcript it was shown."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[list[Message]] = []

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        self.seen.append([m.model_copy(deep=True) for m in messages])
        return await self.inner.respond(messages, tools)

    def last_tool_messages(self) -> dict[str, str]:
        """tool_call_id -> content of the tool messages in the latest transcript shown."""
        return {m.tool_call_id or "": m.content for m in self.seen[-1] if m.role == "tool"}


def registry_of(
    name: str,
    tools: list[Tool],
    model: Model,
    rules: RuleSet | None = None,
    max_turns: int = 20,
) -> AgentRegistry:
    """A registry whose factory builds a fresh Agent (same tools, same model) every time."""

    def factory() -> Agent:
        return Agent(
            name=name,
            instructions=f"You are {name}.",
            tools=list(tools),
            model=model,
            rules=rules or RuleSet(),
            max_turns=max_turns,
        )

    return AgentRegistry({name: factory})


def roundtrip(state: RunState) -> RunState:
    """What a checkpoint store does: JSON out, JSON back in."""
    return RunState.from_json(state.to_json())


def tool_messages(state: RunState) -> dict[str, str]:
    """tool_call_id -> content of every tool message in the transcript."""
    return {m.tool_call_id or "": m.content for m in state.transcript if m.role == "tool"}
