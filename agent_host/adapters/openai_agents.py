"""Host an OpenAI Agents SDK agent (`pip install 'countersign[openai-agents]'`).

The agent runs unchanged. For each run countersign uses a copy of it whose function tools
all need approval, so the SDK stops on every call of a model turn (`result.interruptions`)
before any of it runs. countersign judges each `ToolApprovalItem`: a tool the agent marks
`needs_approval` (True, or a function: then always, to be safe) asks a person, any other
is let through, unless the operator's policy for it (`policy=`) or its rules say otherwise.
The SDK's serialized `RunState` is the checkpoint; decisions become `state.approve()` and
`state.reject(rejection_message=...)`, and the run goes on with `Runner.run(agent, state)`
in whichever worker picks it up. Every call runs through countersign's call guard: as
approved, at most once. "Approve for this run" is countersign's own (scoped to the route
and severity it was given for), so each later call is still judged and recorded.

`editable={"issue_refund": ["amount"]}` (or `True` for every argument) lets a reviewer edit
those arguments before approving ("Edit & approve"): the edit is checked against the tool's
`params_json_schema` (all the SDK holds of its parameters) and judged again by the policy,
and the call guard invokes the tool with the edited arguments as its JSON input.

    from agents import Agent, function_tool
    from agent_host.adapters.openai_agents import OpenAIAgentsAgent

    support = Agent(name="support", tools=[lookup_order, issue_refund])
    registry.register("support", lambda: OpenAIAgentsAgent(support))
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    MessageOutputItem,
    RunConfig,
    RunHooks,
    Runner,
    RunResult,
)
from agents import RunState as SDKRunState
from agents.items import ItemHelpers, ToolApprovalItem
from agents.tool_context import ToolContext

from agent_host.adapters.gates import editable_by_tool, gates_for
from agent_host.adapters.json_schema import check_arguments
from agent_host.errors import CheckpointError, ConfigurationError, InvalidArguments
from agent_host.runtime.decisions import Approve
from agent_host.runtime.fingerprint import same_json
from agent_host.runtime.hosted import (
    CallGuard,
    Finished,
    GatedCall,
    HostedAgent,
    HostedDecision,
    Interrupted,
    Step,
    ToolGate,
    parse_arguments,
)
from agent_host.runtime.policy import Permission, PermissionFunction, RuleSet

__all__ = ["OpenAIAgentsAgent"]


class OpenAIAgentsAgent(HostedAgent):
    framework = "openai-agents"

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        policy: Mapping[str, ToolGate | Permission | PermissionFunction] | None = None,
        rules: RuleSet | None = None,
        context: Any = None,
        run_config: RunConfig | None = None,
        max_turns: int = 20,
        editable: Mapping[str, bool | Sequence[str]] | None = None,
    ) -> None:
        _check_supported(agent)
        if run_config is not None and getattr(run_config, "sandbox", None) is not None:
            raise ConfigurationError(
                f"agent {agent.name!r}: run_config has a sandbox, whose tools the SDK adds to "
                "each run and would run unseen; countersign cannot gate them yet"
            )
        self.agent = agent
        self.name = name or agent.name
        self.rules = rules or RuleSet()
        self.context = context
        self.run_config = run_config
        self.max_turns = max_turns
        self._tools: dict[str, FunctionTool] = {
            t.name: t for t in agent.tools if isinstance(t, FunctionTool)
        }
        self._gates = gates_for(
            {name: tool.needs_approval is not False for name, tool in self._tools.items()},
            policy,
        )
        self._editable = editable_by_tool(
            self.name, self._tools, editable or {}, lambda tool: tool.params_json_schema
        )
        if guarded := [t for t in self._editable if self._tools[t].tool_input_guardrails]:
            # They check the model's arguments before the call is decided, never the edit.
            raise ConfigurationError(
                f"tools {', '.join(guarded)} of agent {self.name!r} have input guardrails, "
                "which check the model's arguments and not a reviewer's edit: leave them out "
                "of editable=, or check those limits in the tool itself"
            )

    def tool_schemas(self) -> dict[str, dict[str, Any]]:
        return {name: tool.params_json_schema for name, tool in self._tools.items()}

    def gates(self) -> dict[str, ToolGate]:
        return self._gates

    def editable(self) -> dict[str, tuple[str, ...]]:
        return dict(self._editable)

    def validate_arguments(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Checked against the tool's `params_json_schema` (strictly: what the check does
        not know fails it); the SDK's tool validates its input again when invoked."""
        found = self._tools.get(tool)
        if found is None:
            raise InvalidArguments(f"{tool} is not a tool of agent {self.name}")
        return check_arguments(tool, found.params_json_schema, arguments)

    async def start(self, input: str, guard: CallGuard) -> Step:
        guarded, only_guarded = self._guarded(guard)
        result = await Runner.run(
            guarded,
            input,
            context=self.context,
            max_turns=self.max_turns,
            run_config=self.run_config,
            hooks=only_guarded,
        )
        return _step(result)

    async def resume(
        self, state: str, decisions: Sequence[HostedDecision], guard: CallGuard
    ) -> Step:
        guarded, only_guarded = self._guarded(guard)
        try:
            run_state = await SDKRunState.from_string(guarded, state)
        except Exception as exc:
            raise CheckpointError(
                f"the Agents SDK run state in the checkpoint is unreadable: {exc}"
            ) from exc
        _apply(run_state, run_state.get_interruptions(), decisions)
        result = await Runner.run(
            guarded,
            run_state,
            context=self.context,
            max_turns=self.max_turns,
            run_config=self.run_config,
            hooks=only_guarded,
        )
        return _step(result)

    def _guarded(self, guard: CallGuard) -> tuple[Agent[Any], _OnlyGuardedTools]:
        """This run's copy of the agent, whose function tools stop for a decision and run
        through the call guard once decided; and the run hooks that fail the run before
        any other tool runs (one a hook of the agent added, or another kind of tool)."""
        try:  # it may have changed since it was registered: this run fails, saying how
            _check_supported(self.agent)
        except ConfigurationError as exc:
            raise ToolNotGuarded(str(exc)) from None
        tools = [_guarded_tool(t, guard) for t in self.agent.tools if isinstance(t, FunctionTool)]
        only = _OnlyGuardedTools({id(t.on_invoke_tool) for t in tools})
        return self.agent.clone(tools=tools), only


class ToolNotGuarded(RuntimeError):
    """A tool was about to run that countersign did not gate; the run fails instead."""


class _OnlyGuardedTools(RunHooks[Any]):
    """Before any local tool runs: only this run's guarded function tools may."""

    def __init__(self, guarded: set[int]) -> None:
        self.guarded = guarded

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if not (isinstance(tool, FunctionTool) and id(tool.on_invoke_tool) in self.guarded):
            raise ToolNotGuarded(
                f"tool {getattr(tool, 'name', '?')!r} was added to agent {agent.name!r} after "
                "countersign checked it (by a hook, a capability or a sandbox), so it was "
                "not run: declare it with the agent's tools"
            )


def _guarded_tool(tool: FunctionTool, guard: CallGuard) -> FunctionTool:
    invoke_original = tool.on_invoke_tool

    async def invoke(ctx: ToolContext[Any], input: str) -> Any:
        held = parse_arguments(input)  # what the SDK holds: the call as it was shown

        async def run(arguments: dict[str, Any] | str) -> Any:
            # a reviewer's edited arguments as the tool's JSON input; else the SDK's own
            edited = isinstance(arguments, dict) and not same_json(arguments, held)
            return await invoke_original(ctx, json.dumps(arguments) if edited else input)

        return await guard.run(ctx.tool_call_id, tool.name, held, run)

    return dataclasses.replace(tool, needs_approval=True, on_invoke_tool=invoke)


def _apply(
    run_state: SDKRunState[Any, Any],
    items: Sequence[ToolApprovalItem],
    decisions: Sequence[HostedDecision],
) -> None:
    """Approve or reject each interruption by the decisions on the calls with its id; a
    call id the model repeated is approved only if every call with it was (fail closed)."""
    by_id: dict[tuple[str, str], list[HostedDecision]] = {}
    for item in decisions:
        by_id.setdefault((item.call.framework_id, item.call.tool), []).append(item)
    for approval in items:
        decided = by_id.get((approval.call_id or "", approval.tool_name or ""), [])
        if decided and all(isinstance(d.decision, Approve) for d in decided):
            run_state.approve(approval)
            continue
        refusal = next((d for d in decided if not isinstance(d.decision, Approve)), None)
        message = _refusal(refusal.decision) if refusal else "This call was never decided."
        run_state.reject(approval, rejection_message=message)


def _refusal(decision: Any) -> str:
    text = getattr(decision, "text", None)
    return text() if callable(text) else "Tool execution was not approved."


def _step(result: RunResult) -> Step:
    if not result.interruptions:
        output = result.final_output
        return Finished(output if isinstance(output, str) else str(output))
    calls = [
        GatedCall(item.call_id or "", item.tool_name or "", parse_arguments(item.arguments))
        for item in result.interruptions
    ]
    return Interrupted(result.to_state().to_string(), calls, last_words=_last_words(result))


def _last_words(result: RunResult) -> str:
    texts = [
        ItemHelpers.text_message_output(item)
        for item in result.new_items
        if isinstance(item, MessageOutputItem)
    ]
    return texts[-1].strip() if texts else ""


def _check_supported(agent: Agent[Any]) -> None:
    """Only function tools can be gated call by call; refuse what would run unseen."""
    if capabilities := getattr(agent, "capabilities", None):
        names = ", ".join(type(c).__name__ for c in capabilities)
        raise ConfigurationError(
            f"agent {agent.name!r} has capabilities ({names}), whose tools the SDK adds to "
            "each run and would run unseen: countersign cannot gate them yet; use an Agent "
            "with function tools of your own"
        )
    if agent.handoffs:
        raise ConfigurationError(
            f"agent {agent.name!r} has handoffs, which countersign cannot gate yet: the "
            "agents handed to would run their tools unseen; register each agent separately"
        )
    if agent.mcp_servers:
        names = ", ".join(str(getattr(s, "name", "?")) for s in agent.mcp_servers)
        raise ConfigurationError(
            f"agent {agent.name!r} has MCP servers ({names}), whose tools the SDK adds to each "
            "run and would run unseen: countersign cannot gate them yet; call the MCP tools "
            "you need from function tools of your own"
        )
    if others := [t for t in agent.tools if not isinstance(t, FunctionTool)]:
        names = ", ".join(f"{getattr(t, 'name', '?')} ({type(t).__name__})" for t in others)
        raise ConfigurationError(
            f"agent {agent.name!r} has tools countersign cannot gate call by call: {names}; "
            "only function tools can be hosted"
        )
    # A call names its tool; two tools one name (in two namespaces, or twice) would be
    # judged, shown and recorded as one, while the SDK runs whichever the model named.
    spaced = [t.name for t in agent.tools if getattr(t, "_tool_namespace", None)]
    if spaced:
        raise ConfigurationError(
            f"agent {agent.name!r} has tools in namespaces ({', '.join(spaced)}), which "
            "countersign cannot gate yet: a call is judged by its tool's name alone; give "
            "each tool a name of its own instead of a namespace"
        )
    tool_names = [t.name for t in agent.tools]
    if twice := sorted({n for n in tool_names if tool_names.count(n) > 1}):
        raise ConfigurationError(
            f"agent {agent.name!r} has more than one tool named {', '.join(twice)}: a call "
            "is judged by its tool's name, so give each tool a name of its own"
        )
    # `Agent.as_tool()` makes a function tool that runs another agent, whose own tools
    # would run unseen and whose approvals come back as this run's (the SDK marks them).
    if nested := [t.name for t in agent.tools if getattr(t, "_is_agent_tool", False)]:
        raise ConfigurationError(
            f"agent {agent.name!r} has agents as tools ({', '.join(nested)}), which "
            "countersign cannot gate yet: their tools would run unseen; register each agent "
            "separately"
        )
    # The Codex tool runs a coding agent's commands behind one call: unseen, one by one.
    if codex := [t.name for t in agent.tools if getattr(t, "_is_codex_tool", False)]:
        raise ConfigurationError(
            f"agent {agent.name!r} has the Codex tool ({', '.join(codex)}), whose commands "
            "would run unseen behind one approved call; countersign cannot gate it yet"
        )
