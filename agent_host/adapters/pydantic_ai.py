"""Host a Pydantic AI agent (`pip install 'countersign[pydantic-ai]'`).

The agent runs unchanged. For each run countersign puts one toolset around all of the
agent's tools, which defers every call of a model turn (`ApprovalRequired`), so the turn
ends in `DeferredToolRequests` before any of it runs. countersign judges each call: a tool
made with `requires_approval=True` asks a person, any other is let through, unless the
operator's policy for it (`policy=`) or its rules say otherwise. The checkpoint is the
message history (`ModelMessagesTypeAdapter`); decisions become `DeferredToolResults`
(`ToolApproved`, `ToolDenied(message)`); a tool that defers a call itself (`CallDeferred`)
asks a person a question, and the answer is the call's result. Every call then runs
through countersign's call guard: as approved, at most once.

`editable={"issue_refund": ["amount"]}` (or `True` for every argument) lets a reviewer edit
those arguments before approving ("Edit & approve"): the edit is validated by the tool's own
Pydantic validator and judged again by the policy, and the call guard runs the tool with the
edited arguments (`ToolApproved()` as for any approval: the guard alone decides what runs).

    from pydantic_ai import Agent
    from agent_host.adapters.pydantic_ai import PydanticAIAgent

    support = Agent("openai:gpt-5", tools=[...])
    registry.register("support", lambda: PydanticAIAgent(support, name="support"))
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.capabilities import (
    AbstractCapability,
    CombinedCapability,
    DynamicCapability,
    Hooks,
    Instrumentation,
    WrapperCapability,
)
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.native_tools import (
    AbstractNativeTool,
    CodeExecutionTool,
    MCPServerTool,
    MemoryTool,
)
from pydantic_ai.tools import RunContext, ToolApproved, ToolDefinition
from pydantic_ai.toolsets import CombinedToolset, FunctionToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset
from pydantic_core import ValidationError, to_jsonable_python

from agent_host.adapters.gates import editable_by_tool, gates_for
from agent_host.errors import CheckpointError, ConfigurationError, InvalidArguments
from agent_host.runtime.decisions import Answer, Approve
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

__all__ = ["PydanticAIAgent"]


class PydanticAIAgent(HostedAgent):
    framework = "pydantic-ai"

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        policy: Mapping[str, ToolGate | Permission | PermissionFunction] | None = None,
        rules: RuleSet | None = None,
        deps: Any = None,
        max_turns: int = 20,
        editable: Mapping[str, bool | Sequence[str]] | None = None,
    ) -> None:
        _check_supported(agent)
        self.agent = agent
        self.name = name or agent.name or "pydantic-ai-agent"
        self.rules = rules or RuleSet()
        self.deps = deps
        self.max_turns = max_turns
        self._tools = _declared_tools(agent)
        self._gates = gates_for(
            {name: tool.requires_approval for name, tool in self._tools.items()}, policy
        )
        self._editable = _editable(self.name, self._tools, editable or {}, agent.root_capability)

    def tool_schemas(self) -> dict[str, dict[str, Any]]:
        return {name: tool.tool_def.parameters_json_schema for name, tool in self._tools.items()}

    def gates(self) -> dict[str, ToolGate]:
        return self._gates

    def editable(self) -> dict[str, tuple[str, ...]]:
        return dict(self._editable)

    def validate_arguments(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's own Pydantic validator, as Pydantic AI runs it on a model's call; the
        result in its JSON form, as a call is shown, hashed and matched."""
        found = self._tools.get(tool)
        if found is None:
            raise InvalidArguments(f"{tool} is not a tool of agent {self.name}")
        try:
            valid = found.function_schema.validator.validate_python(arguments)
        except ValidationError as exc:
            raise _invalid(tool, exc) from exc
        return dict(to_jsonable_python(valid))

    async def start(self, input: str, guard: CallGuard) -> Step:
        return await self._run(guard, user_prompt=input)

    async def resume(
        self, state: str, decisions: Sequence[HostedDecision], guard: CallGuard
    ) -> Step:
        try:
            saved = json.loads(state)
            history = ModelMessagesTypeAdapter.validate_python(saved["messages"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"the Pydantic AI message history in the checkpoint is unreadable: {exc}"
            ) from exc
        return await self._run(guard, message_history=history, results=_results(decisions))

    async def _run(
        self,
        guard: CallGuard,
        *,
        user_prompt: str | None = None,
        message_history: Any = None,
        results: DeferredToolResults | None = None,
    ) -> Step:
        guarded = _GuardedToolset(CombinedToolset(list(self.agent.toolsets)), guard=guard)
        with self.agent.override(tools=[], toolsets=[guarded]):
            result: Any = await self.agent.run(
                user_prompt,
                message_history=message_history,
                deferred_tool_results=results,
                output_type=[self.agent.output_type, DeferredToolRequests],
                deps=self.deps,
            )
        if not isinstance(result.output, DeferredToolRequests):
            output = result.output
            return Finished(output if isinstance(output, str) else _as_json(output))
        requests = result.output
        messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        calls = [
            GatedCall(part.tool_call_id, part.tool_name, guarded.arguments(part))
            for part in requests.approvals
        ]
        calls += [
            GatedCall(
                part.tool_call_id,
                part.tool_name,
                guarded.arguments(part),
                kind="question",
                question=_question(
                    part.tool_name, part.args, requests.metadata.get(part.tool_call_id)
                ),
            )
            for part in requests.calls
        ]
        return Interrupted(
            json.dumps({"messages": messages}),
            calls,
            last_words=_last_words(result.all_messages()),
        )


@dataclasses.dataclass
class _GuardedToolset(WrapperToolset[Any]):
    """Every call deferred until decided; a decided call runs through the call guard.

    A call is judged, shown and matched at resume by the arguments it will run with: the
    ones Pydantic AI validated (an int where a float is declared becomes a float, a date
    string a `date`, a nested object a model), in their JSON form. The model's raw
    arguments differ from those whenever validation converts anything, so an approval of
    the raw ones would never match the call that then runs.
    """

    guard: CallGuard = dataclasses.field(kw_only=True)
    validated: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict, kw_only=True)

    def arguments(self, part: ToolCallPart) -> dict[str, Any] | str:
        """The validated arguments of a deferred call (the raw ones if it never got here)."""
        if part.tool_call_id in self.validated:
            return self.validated[part.tool_call_id]
        return parse_arguments(part.args)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """Tools marked as needing approval are deferred here, in `call_tool`, like all
        others, not by Pydantic AI before validation hands over their arguments."""
        tools = await super().get_tools(ctx)
        return {
            name: dataclasses.replace(tool, tool_def=_gated_here(tool.tool_def))
            for name, tool in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call_id = ctx.tool_call_id or ""
        arguments: dict[str, Any] = to_jsonable_python(tool_args)
        if not ctx.tool_call_approved:
            self.validated[call_id] = arguments
            raise ApprovalRequired()
        # A call the policy let through runs as unapproved, so a tool that asks for approval
        # itself (raising ApprovalRequired) still does; a person's approval is passed on.
        inner = ctx if not self.guard.approved_by_policy(call_id) else _unapproved(ctx)

        async def invoke(run_with: dict[str, Any] | str) -> Any:
            # a reviewer's edited arguments (checked in JSON form) validated back into what
            # the tool takes, by the tool's own validator; else the framework's, as they are
            edited = not same_json(run_with, arguments)
            valid = _python_args(tool, run_with) if edited else tool_args
            return await self.wrapped.call_tool(name, valid, inner, tool)

        try:
            return await self.guard.run(call_id, name, arguments, invoke)
        except (ApprovalRequired, CallDeferred):
            self.validated[call_id] = arguments  # the tool deferred itself: asked anew
            raise


def _python_args(tool: ToolsetTool[Any], arguments: dict[str, Any] | str) -> dict[str, Any]:
    if not isinstance(arguments, dict):  # an edit is always an object; never reached
        raise InvalidArguments("edited arguments must be a JSON object")
    return dict(tool.args_validator.validate_python(arguments))


def _invalid(tool: str, exc: ValidationError) -> InvalidArguments:
    """A Pydantic validation error as countersign's, with the first problem per argument."""
    problems: dict[str, str] = {}
    for error in exc.errors():
        where = str(error["loc"][0]) if error["loc"] else ""
        inner = ".".join(str(p) for p in error["loc"][1:])
        problems.setdefault(where, f"{inner}: {error['msg']}" if inner else error["msg"])
    text = "; ".join(f"{name or '(arguments)'}: {msg}" for name, msg in problems.items())
    return InvalidArguments(f"invalid arguments for {tool}: {text}", problems)


def _editable(
    agent: str,
    tools: Mapping[str, Any],
    editable: Mapping[str, bool | Sequence[str]],
    root: AbstractCapability[Any],
) -> dict[str, tuple[str, ...]]:
    """The adapter's `editable=` by tool (`editable_by_tool`). A tool with its own
    `args_validator` function is refused: it needs the run's context, which an edit checked
    in Slack does not have, so an edited call would skip it."""
    names = editable_by_tool(agent, tools, editable, lambda t: t.tool_def.parameters_json_schema)
    hooked = [
        c
        for c in _capabilities(root)
        if not isinstance(c, Instrumentation)  # traces a call; checks nothing
        and any(_acts_at(c, hook) for hook in _TOOL_CALL_HOOKS)
    ]
    if names and hooked:
        raise ConfigurationError(
            f"agent {agent!r} has capabilities acting on tool calls before they run "
            f"({_names(hooked)}), which see the model's arguments and not a reviewer's "
            "edit; leave editable= out, or check those limits in the tool itself"
        )
    for tool in names:
        if tools[tool].args_validator is not None:
            raise ConfigurationError(
                f"agent {agent!r}: {tool} has an args_validator function, which countersign "
                "cannot run on a reviewer's edit; drop it from editable= or validate in the "
                "tool's argument types instead"
            )
    return names


def _gated_here(tool_def: ToolDefinition) -> ToolDefinition:
    if tool_def.kind == "unapproved":
        return dataclasses.replace(tool_def, kind="function")
    return tool_def


def _unapproved(ctx: RunContext[Any]) -> RunContext[Any]:
    return dataclasses.replace(ctx, tool_call_approved=False)


def _results(decisions: Sequence[HostedDecision]) -> DeferredToolResults:
    """One result per framework id; a call shares its id with another only if the model
    repeated it, and then the id is approved only if every call with it was (fail closed)."""
    results = DeferredToolResults()
    for item in decisions:
        call_id, decision = item.call.framework_id, item.decision
        if item.call.kind == "question":
            if isinstance(decision, Answer):
                results.calls[call_id] = decision.text
            else:
                results.calls[call_id] = f"No answer was given: {_refusal(decision)}"
            continue
        denied = results.approvals.get(call_id)
        if isinstance(denied, ToolDenied):
            continue
        if isinstance(decision, Approve):
            results.approvals[call_id] = ToolApproved()
        else:
            results.approvals[call_id] = ToolDenied(_refusal(decision))
    return results


def _refusal(decision: Any) -> str:
    text = getattr(decision, "text", None)
    return text() if callable(text) else "The tool call was not approved."


def _declared_tools(agent: Agent[Any, Any]) -> dict[str, Any]:
    """The agent's function tools by name (toolsets of other kinds list theirs only per
    run; their calls are asked about as tools the agent did not declare)."""
    tools: dict[str, Any] = {}
    for toolset in agent.toolsets:
        if isinstance(toolset, FunctionToolset):
            tools.update(toolset.tools)
    return tools


def _question(tool: str, args: Any, metadata: Mapping[str, Any] | None) -> str:
    """What the person is asked: the deferral's `question` metadata, else the call's own
    `question` argument, else the call itself."""
    if metadata and isinstance(metadata.get("question"), str):
        return str(metadata["question"])
    arguments = parse_arguments(args)
    if isinstance(arguments, dict) and isinstance(arguments.get("question"), str):
        return str(arguments["question"])
    return f"{tool} waits for a result from a person: {_as_json(arguments)}"


def _last_words(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return " ".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
    return ""


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


# Native tools the model's provider runs itself, with effects countersign never sees.
_UNSEEN_NATIVE_TOOLS = (MCPServerTool, CodeExecutionTool, MemoryTool)
# Where a capability meets a tool call between the model and the call guard: it would
# check the model's arguments, never a reviewer's edit.
_TOOL_CALL_HOOKS = (
    "before_tool_validate",
    "wrap_tool_validate",
    "after_tool_validate",
    "before_tool_execute",
    "wrap_tool_execute",
)
# The base classes' hooks, which pass everything on and do nothing of their own.
_PASSING_ON = (AbstractCapability, CombinedCapability, WrapperCapability, Hooks)


def _check_supported(agent: Agent[Any, Any]) -> None:
    """Refuse what would run without being judged: output functions (the framework calls
    them with the model's arguments as the run's output), provider-run tools that act,
    capabilities countersign cannot see before a run (built by a function for each run),
    a toolset wrapped by a capability of your own (its calls would not reach the call
    guard), and a handler of deferred calls (it would decide them in place of a person)."""
    if functions := sorted(_output_functions(agent.output_type)):
        raise ConfigurationError(
            f"agent {agent.name!r} has output functions ({', '.join(functions)}), which "
            "Pydantic AI runs with the model's arguments and countersign cannot gate; make "
            "them tools (requires_approval=True) and keep a plain output type"
        )
    native = getattr(agent, "_cap_native_tools", None) or []
    acting = {type(t).__name__ for t in native if isinstance(t, _UNSEEN_NATIVE_TOOLS)}
    if acting or any(not isinstance(t, AbstractNativeTool) for t in native):
        found = ", ".join(sorted(acting)) or "given as functions, so unknown until a run"
        raise ConfigurationError(
            f"agent {agent.name!r} has native tools its model's provider runs itself "
            f"({found}), whose calls countersign cannot see or gate; remove "
            "them, or expose what they do as function tools"
        )
    capabilities = list(_capabilities(agent.root_capability))
    if any(isinstance(c, DynamicCapability) for c in capabilities):
        raise ConfigurationError(
            f"agent {agent.name!r} has capabilities built by a function for each run, which "
            "countersign cannot check before the run; give the capabilities themselves"
        )
    if handlers := _names(c for c in capabilities if _acts_at(c, "handle_deferred_tool_calls")):
        raise ConfigurationError(
            f"agent {agent.name!r} handles its deferred tool calls itself ({handlers}), in "
            "place of the person countersign would ask; remove that capability"
        )
    own = [c for c in capabilities if not type(c).__module__.startswith("pydantic_ai.")]
    if wrapping := _names(c for c in own if _acts_at(c, "get_wrapper_toolset")):
        raise ConfigurationError(
            f"agent {agent.name!r} has capabilities wrapping its toolset ({wrapping}), whose "
            "own tools would run without reaching countersign; give their tools to the "
            "agent as function tools instead"
        )


def _capabilities(capability: AbstractCapability[Any]) -> Iterator[AbstractCapability[Any]]:
    """Every capability of an agent, those combined or wrapped by another included (a
    combining or wrapping one too, unless it is the plain container)."""
    if type(capability) not in (CombinedCapability, WrapperCapability):
        yield capability
    if isinstance(capability, CombinedCapability):
        for inner in capability.capabilities:
            yield from _capabilities(inner)
    elif isinstance(capability, WrapperCapability):
        yield from _capabilities(capability.wrapped)


def _acts_at(capability: AbstractCapability[Any], hook: str) -> bool:
    """Whether `capability` does something of its own at `hook`: its class defines it
    (not merely passing it on, as the base classes do), or, for `Hooks`, a function is
    registered for it."""
    defined = getattr(type(capability), hook, None)
    if all(defined is not getattr(base, hook, None) for base in _PASSING_ON):
        return True
    if isinstance(capability, Hooks):
        registry = getattr(capability, "_registry", None)
        return not isinstance(registry, dict) or bool(registry.get(hook))
    return False


def _names(capabilities: Iterable[AbstractCapability[Any]]) -> str:
    return ", ".join(sorted({type(c).__name__ for c in capabilities}))


def _output_functions(output: Any) -> set[str]:
    """The names of the functions an output spec would call (through any of its wrappers)."""
    if isinstance(output, list | tuple):
        return set().union(*(_output_functions(o) for o in output)) if output else set()
    if output is None or isinstance(output, type):
        return set()
    if inspect.isfunction(output) or inspect.ismethod(output):
        return {output.__name__}
    for attribute in ("output", "outputs", "output_function"):
        inner = getattr(output, attribute, None)
        if inner is not None and inner is not output:
            return _output_functions(inner)
    if callable(output):  # a partial, a callable object: called like a function
        inner = getattr(output, "func", output)
        return {str(getattr(inner, "__name__", type(output).__name__))}
    return set()
