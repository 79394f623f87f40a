"""Pydantic AI agents whose calls would run where countersign cannot see them are refused when
they are registered, with what to do instead.

Without the refusal, an output function (`output_type=ToolOutput(transfer)`) ran with the
model's arguments as the run's output, with no pause, no policy and no record; and a native
tool the provider runs itself (an MCP server, code execution) acted unseen.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext, ToolOutput
from pydantic_ai.capabilities import HandleDeferredToolCalls, Hooks
from pydantic_ai.capabilities.native_tool import NativeTool
from pydantic_ai.models.test import TestModel
from pydantic_ai.native_tools import CodeExecutionTool, MCPServerTool, WebSearchTool

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


def test_an_agent_deciding_its_own_deferred_calls_is_refused() -> None:
    """HandleDeferredToolCalls approves inside the run: the refund would be decided by the
    agent in place of a person, and countersign would record nothing of it."""
    approve_all = HandleDeferredToolCalls(
        handler=lambda ctx, requests: requests.build_results(approve_all=True)
    )
    agent: Agent[None, str] = Agent(TestModel(), capabilities=[approve_all], name="support")

    with pytest.raises(ConfigurationError, match=r"handles its deferred tool calls itself"):
        PydanticAIAgent(agent)


def test_capabilities_built_for_each_run_are_refused() -> None:
    def per_run(ctx: RunContext[None]) -> NativeTool[None]:
        return NativeTool(CodeExecutionTool())

    agent: Agent[None, str] = Agent(TestModel(), capabilities=[per_run], name="ops")

    with pytest.raises(ConfigurationError, match="capabilities built by a function"):
        PydanticAIAgent(agent)


def test_an_editable_tool_of_an_agent_with_tool_call_hooks_is_refused() -> None:
    """A hook before a tool runs checks the model's arguments, not a reviewer's edit: an
    edited 5,000 would pass a limit of 100 it never saw."""
    hooks: Hooks[None] = Hooks()

    @hooks.on.before_tool_execute(tools=["issue_refund"])
    async def at_most_100(ctx: Any, *, call: Any, tool_def: Any, args: Any) -> Any:
        return args

    agent: Agent[None, str] = Agent(TestModel(), capabilities=[hooks], name="support")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        raise AssertionError("never run")

    with pytest.raises(ConfigurationError, match=r"acting on tool calls before they run \(Hooks"):
        PydanticAIAgent(agent, editable={"issue_refund": ["amount"]})
    assert PydanticAIAgent(agent).editable() == {}  # not editable: its hook holds
