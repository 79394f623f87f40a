"""A Pydantic AI agent, unchanged, whose refunds a person approves in Slack.

The agent is plain Pydantic AI: `lookup_order` runs freely, `issue_refund` is made with
`requires_approval=True`. countersign hosts it: the run pauses before the refund, the
request is posted to Slack, and a click on Approve (or Reject, with a reason the model
reads) resumes it in whichever worker picks it up; the refund runs once, with the
arguments the reviewer saw.

Served by countersign (`pip install 'countersign[pydantic-ai]'`, run from this folder):

    COUNTERSIGN_AGENTS=pydantic_ai_agent:registry countersign serve

and start a run: POST /api/v1/runs {"agent": "refunds", "input": "refund order 123"}.

The model: COUNTERSIGN_MODEL names a Pydantic AI model (e.g. `openai:gpt-5.6-luna` with
OPENAI_API_KEY, `anthropic:...` with ANTHROPIC_API_KEY). Without it the agent runs on Pydantic
AI's offline `FunctionModel`, a scripted stand-in that needs no network, and says so.

Alone in the terminal, to see it stop before the refund (`--approve`: approve it yourself):

    python examples/pydantic_ai_agent.py [--approve] "refund order 123"
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_host import AgentRegistry, Approve, Paused, Runner, Succeeded
from agent_host.adapters.pydantic_ai import PydanticAIAgent

ORDERS = {"123": 42.50, "124": 1200.00}
OFFLINE = (
    "pydantic_ai_agent: COUNTERSIGN_MODEL is not set, so the agent runs on Pydantic AI's "
    "offline FunctionModel (scripted, no network). Set COUNTERSIGN_MODEL (e.g. "
    "openai:gpt-5.6-luna, with OPENAI_API_KEY) for a real model."
)


def refund_agent(model: Model | str) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        model,
        name="refunds",
        instructions="You refund orders. Look the order up first, then refund its amount.",
    )

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look up an order's amount."""
        if order_id not in ORDERS:
            return f"Order {order_id} was not found."
        return f"Order {order_id}: ${ORDERS[order_id]:.2f}, paid."

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order. Irreversible: a person approves it first."""
        return f"Refunded ${amount:.2f} to order {order_id}"

    return agent


def offline_model() -> FunctionModel:
    """Answers from the conversation alone, as a real model does, so any worker that
    rebuilds the agent after a restart gets the same answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [part for message in messages for part in message.parts]
        prompt = " ".join(p.content for p in parts if p.part_kind == "user-prompt")
        order = (re.findall(r"order\s+#?(\d+)", prompt) or ["?"])[0]
        results = [p for p in parts if isinstance(p, ToolReturnPart)]
        if not results:
            call = ToolCallPart("lookup_order", {"order_id": order}, tool_call_id="lookup")
            return ModelResponse(parts=[call])
        last, text = results[-1], str(results[-1].content)
        if last.tool_name == "lookup_order":
            paid = re.search(r"\$(\d+\.\d+)", text)
            if not paid:
                return ModelResponse(parts=[TextPart(text)])
            args = {"order_id": order, "amount": float(paid.group(1))}
            refund = ToolCallPart("issue_refund", args, tool_call_id="refund")
            return ModelResponse(parts=[TextPart("Refunding the order in full."), refund])
        done = text if text.startswith("Refunded") else f"The refund was not made: {text}"
        return ModelResponse(parts=[TextPart(done)])

    return FunctionModel(respond)


def chosen_model() -> Model | str:
    name = os.environ.get("COUNTERSIGN_MODEL")
    if name:
        return name
    print(OFFLINE, file=sys.stderr)
    return offline_model()


def registry() -> AgentRegistry:
    """COUNTERSIGN_AGENTS=pydantic_ai_agent:registry"""
    agent = refund_agent(chosen_model())
    return AgentRegistry({"refunds": lambda: PydanticAIAgent(agent, name="refunds")})


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
