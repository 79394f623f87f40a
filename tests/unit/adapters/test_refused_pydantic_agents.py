"""Pydantic AI agents whose calls would run where countersign cannot see them are refused when
they are registered, with what to do instead.

Without the refusal, an output function (`output_type=ToolOutput(transfer)`) ran with the
model's arguments as the run's output, with no pause, no policy and no record; and a native
tool the provider runs itself (an MCP server, code execution) acted unseen.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext, ToolOutput
from pydantic_ai.capabilities import (
    AbstractCapability,
    HandleDeferredToolCalls,
    Hooks,
    Instrumentation,
    PrefixTools,
    ToolSearch,
    Toolset,
)
from pydantic_ai.capabilities.native_tool import NativeTool
from pydantic_ai.models.test import TestModel
from pydantic_ai.native_tools import CodeExecutionTool, MCPServerTool, WebSearchTool
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from agent_host.adapters.pydantic_ai import PydanticAIAgent
from agent_host.errors import ConfigurationError


def transfer(amount: float) -> str:
    """Move money."""
    return f"moved {amount}"


@pytest.mark.parametrize(
    "output_type", [ToolOutput(transfer), transfer, [str, ToolOutput(transfer)]]
)
def test_an_agent_with_an_output_function_is_refused(output_type: Any) -> None:
    agent: Agent[None, Any] = Agent(TestModel(), output_type=output_type, name="payouts")

    with pytest.raises(ConfigurationError, match=r"output functions \(transfer\).*make them tools"):
        PydanticAIAgent(agent)


@pytest.mark.parametrize(
    "native", [MCPServerTool(id="files", url="https://mcp.example.com"), CodeExecutionTool()]
)
def test_an_agent_with_a_provider_run_tool_that_acts_is_refused(native: Any) -> None:
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[NativeTool(native)], name="ops")

    with pytest.raises(ConfigurationError, match=type(native).__name__):
        PydanticAIAgent(agent)


def test_plain_outputs_and_a_read_only_provider_tool_are_accepted() -> None:
    agent: Agent[None, Any] = Agent(
        TestModel(), output_type=[str, int], capabilities=[NativeTool(WebSearchTool())], name="ok"
    )

    assert PydanticAIAgent(agent).name == "ok"


class FilesMCP(MCPServerTool):
    """A provider-run MCP server under another class name."""


def code_execution(ctx: RunContext[None]) -> CodeExecutionTool:
    return CodeExecutionTool()


@pytest.mark.parametrize(
    ("native", "says"),
    [
        (FilesMCP(id="files", url="https://mcp.example.com"), "FilesMCP"),
        (code_execution, "given as functions, so unknown until a run"),
    ],
)
def test_a_provider_run_tool_in_another_form_is_refused(native: Any, says: str) -> None:
    """A subclass of a refused tool, or a function giving one for each run, was offered to
    the provider though the tool itself is refused."""
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[NativeTool(native)], name="ops")

    with pytest.raises(ConfigurationError, match=says):
        PydanticAIAgent(agent)


class ApprovesEverything(Hooks[None]):
    """Decides deferred calls in a method of its own."""

    async def handle_deferred_tool_calls(self, ctx: Any, *, requests: Any) -> Any:
        return requests.build_results(approve_all=True)


@pytest.mark.parametrize(
    "handler",
    [
        HandleDeferredToolCalls(handler=lambda ctx, r: r.build_results(approve_all=True)),
        ApprovesEverything(),
    ],
    ids=["HandleDeferredToolCalls", "a Hooks subclass"],
)
def test_an_agent_deciding_its_own_deferred_calls_is_refused(handler: Any) -> None:
    """A handler of deferred calls approves inside the run: the refund would be decided by
    the agent in place of a person, and countersign would record nothing of it."""
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[handler], name="support")

    with pytest.raises(ConfigurationError, match=r"handles its deferred tool calls itself"):
        PydanticAIAgent(agent)


def test_capabilities_built_for_each_run_are_refused() -> None:
    def per_run(ctx: RunContext[None]) -> NativeTool[None]:
        return NativeTool(CodeExecutionTool())

    agent: Agent[None, str] = Agent(TestModel(), capabilities=[per_run], name="ops")

    with pytest.raises(ConfigurationError, match="capabilities built by a function"):
        PydanticAIAgent(agent)


class CheckedBeforeRunning(Hooks[None]):
    """Checks a refund's amount in a method of its own, not a registered function."""

    async def before_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any) -> Any:
        return args


def registered_hook(hook: str) -> Hooks[None]:
    hooks: Hooks[None] = Hooks()

    async def at_most_100(ctx: Any, *, call: Any, tool_def: Any, args: Any) -> Any:
        return args

    getattr(hooks.on, hook)(at_most_100)
    return hooks


@pytest.mark.parametrize(
    "hooks",
    [
        registered_hook("before_tool_execute"),
        registered_hook("after_tool_validate"),
        registered_hook("before_tool_validate"),
        CheckedBeforeRunning(),
    ],
    ids=["before_tool_execute", "after_tool_validate", "before_tool_validate", "subclass"],
)
def test_an_editable_tool_of_an_agent_with_tool_call_hooks_is_refused(
    hooks: Hooks[None],
) -> None:
    """A hook validating or running a tool call checks the model's arguments, not a
    reviewer's edit: an edited 5,000 would pass a limit of 100 it never saw."""
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[hooks], name="support")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        raise AssertionError("never run")

    with pytest.raises(ConfigurationError, match=r"acting on tool calls before they run \("):
        PydanticAIAgent(agent, editable={"issue_refund": ["amount"]})
    assert PydanticAIAgent(agent).editable() == {}  # not editable: its hook holds


@dataclasses.dataclass
class NotifyToolset(WrapperToolset[Any]):
    """Adds a `notify_customer` tool around the agent's own toolset, and runs it itself."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        notify = ToolsetTool(
            toolset=self,
            tool_def=ToolDefinition(name="notify_customer", parameters_json_schema=schema),
            max_retries=1,
            args_validator=SchemaValidator(core_schema.dict_schema()),
        )
        return {**await super().get_tools(ctx), "notify_customer": notify}


@dataclasses.dataclass
class Notify(AbstractCapability[Any]):
    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return NotifyToolset(wrapped=toolset)


def test_a_capability_of_your_own_wrapping_the_toolset_is_refused() -> None:
    """Its own tools ran outside the call guard: judged by nobody, recorded nowhere."""
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[Notify()], name="support")

    with pytest.raises(ConfigurationError, match=r"capabilities wrapping its toolset \(Notify\)"):
        PydanticAIAgent(agent)


def test_an_output_function_given_as_a_partial_is_refused() -> None:
    agent: Agent[None, Any] = Agent(
        TestModel(), output_type=ToolOutput(functools.partial(transfer)), name="payouts"
    )

    with pytest.raises(ConfigurationError, match=r"output functions \(transfer\)"):
        PydanticAIAgent(agent)


def test_ordinary_capabilities_are_accepted_and_tools_stay_editable() -> None:
    """What wraps tools without acting on a call (tracing, prefixed names, tool search) is
    no reason to refuse an agent, nor to keep its tools from being edited."""
    inner = Toolset(FunctionToolset(tools=[transfer]))
    capabilities: list[Any] = [Instrumentation(), PrefixTools(inner, prefix="pay"), ToolSearch()]
    agent: Agent[None, str] = Agent(TestModel(), capabilities=capabilities, name="support")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        raise AssertionError("never run")

    hosted = PydanticAIAgent(agent, editable={"issue_refund": ["amount"]})
    assert hosted.editable() == {"issue_refund": ("amount",)}
