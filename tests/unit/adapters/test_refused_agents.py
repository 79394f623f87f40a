"""Agents of the Agents SDK whose calls would run where countersign cannot see them are
refused when they are registered, with what to do instead.

Without the refusal, an MCP server's tool ran with no pause, no policy and no record (the
SDK adds MCP tools to each run, apart from `agent.tools`), and an agent used as a tool ran
its own tools unseen, while its approvals came back to the outer run and were asked again
and again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from agents import Agent, AgentHooks, RunConfig, WebSearchTool, function_tool
from agents.mcp.server import MCPServer
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.tool import tool_namespace
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    tool_input_guardrail,
)

from agent_host.adapters.openai_agents import OpenAIAgentsAgent
from agent_host.errors import ConfigurationError
from agent_host.runtime.runner import Failed
from tests.unit.adapters.test_openai_agents_adapter import NO_TRACES, Scripted, runner_for


class FakeMCPServer(MCPServer):
    """Never reached: the agent is refused before any run."""

    @property
    def name(self) -> str:
        return "files"

    async def connect(self) -> None: ...

    async def cleanup(self) -> None: ...

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an MCP server of a refused agent was asked for its tools")

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an MCP tool of a refused agent was called")

    async def list_prompts(self) -> Any: ...

    async def get_prompt(self, *args: Any, **kwargs: Any) -> Any: ...


@function_tool(needs_approval=True)
def wipe_disk(disk: str) -> str:
    """Wipe a disk."""
    raise AssertionError("never run")


def test_an_agent_with_mcp_servers_is_refused() -> None:
    agent = Agent(name="ops", mcp_servers=[FakeMCPServer()])

    with pytest.raises(ConfigurationError) as refused:
        OpenAIAgentsAgent(agent)

    assert str(refused.value) == (
        "agent 'ops' has MCP servers (files), whose tools the SDK adds to each run and would "
        "run unseen: countersign cannot gate them yet; call the MCP tools you need from "
        "function tools of your own"
    )


def test_an_agent_with_an_agent_as_a_tool_is_refused() -> None:
    janitor = Agent(name="janitor", tools=[wipe_disk])
    agent = Agent(name="ops", tools=[janitor.as_tool("janitor", "Cleans up.")])

    with pytest.raises(ConfigurationError) as refused:
        OpenAIAgentsAgent(agent)

    assert str(refused.value) == (
        "agent 'ops' has agents as tools (janitor), which countersign cannot gate yet: their "
        "tools would run unseen; register each agent separately"
    )


def test_the_agent_used_as_a_tool_can_be_registered_on_its_own() -> None:
    hosted = OpenAIAgentsAgent(Agent(name="janitor", tools=[wipe_disk]))
    assert hosted.gates()["wipe_disk"].permission.value == "ask"


def test_tools_sharing_a_name_are_refused() -> None:
    """A call names its tool: two tools of one name (in two namespaces, or twice) would be
    judged, shown and recorded as one, and a call of the one that needs approval ran as the
    other's (let through unasked)."""

    @function_tool(needs_approval=True)
    def delete_account(user: str) -> str:
        """Delete a real account."""
        raise AssertionError("never run")

    @function_tool(name_override="delete_account")
    def delete_sandbox_account(user: str) -> str:
        """Delete a sandbox account."""
        raise AssertionError("never run")

    spaced = [
        *tool_namespace(name="billing", description="Billing", tools=[delete_account]),
        *tool_namespace(name="sandbox", description="Sandbox", tools=[delete_sandbox_account]),
    ]
    with pytest.raises(ConfigurationError, match=r"tools in namespaces \(delete_account"):
        OpenAIAgentsAgent(Agent(name="ops", tools=spaced))
    with pytest.raises(ConfigurationError, match="more than one tool named delete_account"):
        OpenAIAgentsAgent(Agent(name="ops", tools=[delete_account, delete_sandbox_account]))


def test_an_editable_tool_with_input_guardrails_is_refused() -> None:
    """A tool's input guardrail checks the model's arguments before the call is decided: a
    reviewer's edit (5,000 where the model said 12.50) would run past its limit unchecked."""

    @tool_input_guardrail
    def at_most_100(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(needs_approval=True, tool_input_guardrails=[at_most_100])
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        raise AssertionError("never run")

    agent = Agent(name="support", tools=[issue_refund])
    with pytest.raises(ConfigurationError, match="issue_refund of agent 'support' have input"):
        OpenAIAgentsAgent(agent, editable={"issue_refund": ["amount"]})
    assert OpenAIAgentsAgent(agent).editable() == {}  # not editable: its guardrail holds


def test_a_sandbox_agent_and_a_sandbox_run_config_are_refused() -> None:
    """A SandboxAgent's capabilities (a shell, a file system) add tools to each run that
    ran with no pause, no policy and no record."""
    with pytest.raises(ConfigurationError, match=r"has capabilities \(Filesystem, Shell"):
        OpenAIAgentsAgent(SandboxAgent(name="ops"))
    config = RunConfig(sandbox=SandboxRunConfig(client=UnixLocalSandboxClient()))
    with pytest.raises(ConfigurationError, match="run_config has a sandbox"):
        OpenAIAgentsAgent(Agent(name="ops", tools=[wipe_disk]), run_config=config)


class AddsToolOnStart(AgentHooks[Any]):
    """The agent's own hook adds a tool when a run starts (the SDK lets hooks change it)."""

    def __init__(self, tool: Any) -> None:
        self.tool = tool

    async def on_start(self, context: Any, agent: Any) -> None:
        if all(t.name != self.tool.name for t in agent.tools):
            agent.tools = [*agent.tools, self.tool]


async def test_a_tool_added_once_the_agent_was_checked_fails_the_run_unrun() -> None:
    """A tool an agent hook adds as the run starts, or one appended to the agent after it
    was registered, is not one countersign gated: the run fails before it runs, saying so,
    instead of running it unjudged."""
    wired: list[float] = []

    @function_tool
    def wire_money(amount: float) -> str:
        """Wire money."""
        wired.append(amount)
        return "wired"

    model = Scripted([("wire_money", {"amount": 1000.0}, "fc_1")])
    hooked = Agent(name="ops", tools=[], hooks=AddsToolOnStart(wire_money), model=model)
    outcome = await runner_for(OpenAIAgentsAgent(hooked, run_config=NO_TRACES)).run("support", "go")
    assert isinstance(outcome, Failed), outcome
    assert "tool 'wire_money' was added to agent 'ops' after countersign checked it" in (
        outcome.error
    )

    later = Agent(name="ops", tools=[], model=model)
    hosted = OpenAIAgentsAgent(later, run_config=NO_TRACES)
    later.tools.append(WebSearchTool())
    outcome = await runner_for(hosted).run("support", "go")
    assert isinstance(outcome, Failed) and "only function tools can be hosted" in outcome.error
    assert wired == []


def test_an_agent_with_the_codex_tool_is_refused() -> None:
    """One approved call of it would run a coding agent's commands, none of them seen."""
    codex = dataclasses.replace(wipe_disk, name="codex", _is_codex_tool=True)

    with pytest.raises(ConfigurationError, match=r"has the Codex tool \(codex\)"):
        OpenAIAgentsAgent(Agent(name="ops", tools=[codex]))
