"""An agent on any OpenAI-compatible Chat Completions model, its refunds gated by a person.

The model comes from the settings (COUNTERSIGN_MODEL, OPENAI_API_KEY, OPENAI_BASE_URL):
OpenAI itself, or a local server that speaks the same format (Ollama, vLLM, LM Studio).

Served by countersign, approvals in Slack (run from this folder; no PYTHONPATH needed):

    COUNTERSIGN_MODEL=gpt-4o-mini OPENAI_API_KEY=sk-... \\
    COUNTERSIGN_AGENTS=openai_compatible_agent:registry countersign serve

Alone in the terminal, to see the model propose the refund and the run pause before it:

    COUNTERSIGN_MODEL=llama3.1 OPENAI_BASE_URL=http://127.0.0.1:11434/v1 \\
    python examples/openai_compatible_agent.py "refund order 123"

Without COUNTERSIGN_MODEL both stop at once, saying which variables to set.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agent_host import Agent, AgentRegistry, Model, Paused, Permission, Runner, Succeeded, tool
from agent_host.errors import ConfigurationError
from agent_host.llm import model_from_settings
from agent_host.settings import ModelSettings, load_settings

ORDERS = {"123": 42.50, "124": 1200.00}


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order's amount."""
    if order_id not in ORDERS:
        return {"order_id": order_id, "found": False}
    return {"order_id": order_id, "found": True, "amount": ORDERS[order_id]}


@tool(permission=Permission.ASK, reason="moves money back to the customer", severity="high")
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order. Irreversible: a person approves it first."""
    return f"Refunded ${amount:.2f} to order {order_id}"


def refund_agent(model: Model) -> Agent:
    return Agent(
        name="refunds",
        instructions="You refund orders. Look the order up first, then refund its amount.",
        tools=[lookup_order, issue_refund],
        model=model,
    )


def registry(settings: ModelSettings) -> AgentRegistry:
    """COUNTERSIGN_AGENTS=openai_compatible_agent:registry; countersign passes its settings."""
    model = model_from_settings(settings)  # stops start-up if COUNTERSIGN_MODEL is unset
    return AgentRegistry({"refunds": lambda: refund_agent(model)})


async def main(request: str) -> int:
    try:
        model = model_from_settings(load_settings(kind=ModelSettings))
    except ConfigurationError as exc:
        print(f"openai_compatible_agent: {exc}", file=sys.stderr)
        return 2
    try:
        outcome = await Runner(AgentRegistry({"refunds": lambda: refund_agent(model)})).run(
            "refunds", request
        )
    finally:
        await model.close()
    if isinstance(outcome, Paused):
        for call in outcome.pending:
            print(f"waiting for approval: {call.tool} {json.dumps(call.arguments)}")
        return 0
    if isinstance(outcome, Succeeded):
        print(outcome.output)
        return 0
    print(f"failed: {outcome.error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(" ".join(sys.argv[1:]) or "refund order 123")))
