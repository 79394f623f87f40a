"""An OpenAI Agents SDK agent, unchanged, whose refunds a person approves in Slack.

The agent is plain Agents SDK: `lookup_order` runs freely, `issue_refund` is a function
tool with `needs_approval=True`. countersign hosts it: the run pauses before the refund
(the SDK's own interruption), the request is posted to Slack, and a click on Approve (or
Reject, with a reason the model reads) resumes the SDK's saved `RunState` in whichever
worker picks it up; the refund runs once, with the arguments the reviewer saw.

Served by countersign (`pip install 'countersign[openai-agents]'`, run from this folder):

    COUNTERSIGN_AGENTS=openai_agents_agent:registry countersign serve

and start a run: POST /api/v1/runs {"agent": "refunds", "input": "refund order 123"}.

The model: with OPENAI_API_KEY set, the SDK's OpenAI model (COUNTERSIGN_MODEL, else the
SDK's default). Without it the agent runs on an offline stand-in, a scripted SDK `Model`
that needs no network (and no traces are sent), and says so.

Alone in the terminal, to see it stop before the refund (`--approve`: approve it yourself):

    python examples/openai_agents_agent.py [--approve] "refund order 123"
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Usage, function_tool
from agents.models.interface import Model
from agents.testing.model import assistant_message, function_call

from agent_host import AgentRegistry, Approve, Paused, Runner, Succeeded
from agent_host.adapters.openai_agents import OpenAIAgentsAgent

ORDERS = {"123": 42.50, "124": 1200.00}
OFFLINE = (
    "openai_agents_agent: OPENAI_API_KEY is not set, so the agent runs on an offline "
    "scripted model (no network, no traces). Set OPENAI_API_KEY (and COUNTERSIGN_MODEL to "
    "choose the model) for a real one."
)


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's amount."""
    if order_id not in ORDERS:
        return f"Order {order_id} was not found."
    return f"Order {order_id}: ${ORDERS[order_id]:.2f}, paid."


@function_tool(needs_approval=True)
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order. Irreversible: a person approves it first."""
    return f"Refunded ${amount:.2f} to order {order_id}"


def refund_agent(model: Model | str | None) -> Agent[Any]:
    return Agent(
        name="refunds",
        instructions="You refund orders. Look the order up first, then refund its amount.",
        tools=[lookup_order, issue_refund],
        model=model,
    )


class OfflineModel(Model):
    """Answers from the conversation alone, as a real model does, so any worker that
    rebuilds the agent after a restart gets the same answers."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        prompt = " ".join(str(i.get("content", "")) for i in items if i.get("role") == "user")
        order = (re.findall(r"order\s+#?(\d+)", prompt) or ["?"])[0]
        names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
        results = [i for i in items if i.get("type") == "function_call_output"]
        if not results:
            output = [function_call("lookup_order", {"order_id": order}, call_id="lookup")]
        elif names.get(results[-1]["call_id"]) == "lookup_order":
            text = str(results[-1]["output"])
            paid = re.search(r"\$(\d+\.\d+)", text)
            if paid:
                args = {"order_id": order, "amount": float(paid.group(1))}
                refund = function_call("issue_refund", args, call_id="refund")
                output = [assistant_message("Refunding the order in full."), refund]
            else:
                output = [assistant_message(text)]
        else:
            text = str(results[-1]["output"])
            done = text if text.startswith("Refunded") else f"The refund was not made: {text}"
            output = [assistant_message(done)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("countersign runs hosted agents without streaming")


def registry() -> AgentRegistry:
    """COUNTERSIGN_AGENTS=openai_agents_agent:registry"""
    if os.environ.get("OPENAI_API_KEY"):
        agent = refund_agent(os.environ.get("COUNTERSIGN_MODEL") or None)
        run_config = None
    else:
        print(OFFLINE, file=sys.stderr)
        agent, run_config = refund_agent(OfflineModel()), RunConfig(tracing_disabled=True)
    return AgentRegistry(
        {"refunds": lambda: OpenAIAgentsAgent(agent, name="refunds", run_config=run_config)}
    )


async def main(request: str, approve: bool) -> int:
    runner = Runner(registry())
    outcome = await runner.run("refunds", request, requested_by="you")
    while isinstance(outcome, Paused):
        for call in outcome.pending:
            print(f"waiting for approval: {call.tool} {json.dumps(call.arguments)}")
        if not approve:
            return 0
        decisions = {
            c.call_id: Approve(decided_by="you", call_hash=c.call_hash) for c in outcome.pending
        }
        outcome = await runner.resume(outcome.state, decisions)
    if isinstance(outcome, Succeeded):
        print(outcome.output)
        return 0
    print(f"failed: {outcome.error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    args = sys.argv[1:]
    approve = "--approve" in args
    words = [a for a in args if a != "--approve"]
    sys.exit(asyncio.run(main(" ".join(words) or "refund order 123", approve)))
