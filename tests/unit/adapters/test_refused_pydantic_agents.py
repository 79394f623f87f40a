"""Pydantic AI agents whose calls would run where countersign cannot see them are refused when
they are registered, with what to do instead.

Without the refusal, an output function (`output_type=ToolOutput(transfer)`) ran with the
model's arguments as the run's output, with no pause, no policy and no record; and a native
tool the provider runs itself (an MCP server, code execution) acted unseen.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, ToolOutput
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
