"""An agent for test_replayed_turns.py, loaded by the `countersign serve` children through
COUNTERSIGN_AGENTS=tests.system.faults.fresh_ids_agent:registry.

Its model answers like a hosted one: every call gets a fresh random id, so a repeated
request is indistinguishable from a new one by id. Side effects and model requests go to
the journal (COUNTERSIGN_EXAMPLE_JOURNAL) so the test can count them across processes.
With FRESH_IDS_KILL_AT_TURN=N the process SIGKILLs itself on the first request of model
turn N (a marker file under COUNTERSIGN_DATA_DIR keeps it to once per scenario).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Sequence
from pathlib import Path

from agent_host.examples import ExampleEffects
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import Message, ModelResponse, ToolSpec
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.tools import ToolContext, tool

KILL_AT_TURN = "FRESH_IDS_KILL_AT_TURN"


def script(c: Conversation) -> ModelResponse:
    if c.turn == 0:
        return ModelResponse(tool_calls=[call("notify", text="looking into order 123")])
    if c.turn == 1:
        return ModelResponse(tool_calls=[call("issue_refund", order_id="123", amount=42.5)])
    if c.turn == 2:
        return ModelResponse(
            tool_calls=[call("notify", text=f"refund: {c.result('issue_refund')}")]
        )
    return reply("Refunded order 123 and told the customer.")


class FreshIdsModel:
    name = "fresh-ids"

    def __init__(self, effects: ExampleEffects) -> None:
        self.effects = effects
        self.inner = ScriptedModel(script)

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        turn = sum(1 for m in messages if m.role == "assistant")
        self.effects.record("model_request", turn=turn)
        if str(turn) == os.environ.get(KILL_AT_TURN):
            marker = Path(os.environ["COUNTERSIGN_DATA_DIR"]) / f"killed-at-turn-{turn}"
            if not marker.exists():
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        response = await self.inner.respond(messages, tools)
        calls = [
            c.model_copy(update={"id": f"call_{uuid.uuid4().hex}"}) for c in response.tool_calls
        ]
        return response.model_copy(update={"tool_calls": calls})


def build(effects: ExampleEffects) -> Agent:
    @tool
    def notify(text: str, ctx: ToolContext) -> str:
        """Message the customer."""
        effects.record("notify", text=text, key=ctx.idempotency_key)
        return "sent"

    @tool(permission=Permission.ASK, reason="moves money back to the customer", severity="high")
    def issue_refund(order_id: str, amount: float, ctx: ToolContext) -> str:
        """Refund an order. Irreversible."""
        effects.record("refund", order_id=order_id, amount=amount, key=ctx.idempotency_key)
        return f"Refund issued: ${amount:.2f} to order {order_id}"

    return Agent(
        name="fresh-ids-agent",
        instructions="You refund orders and keep the customer posted.",
        tools=[notify, issue_refund],
        model=FreshIdsModel(effects),
    )


def registry() -> AgentRegistry:
    effects = ExampleEffects(Path(os.environ["COUNTERSIGN_EXAMPLE_JOURNAL"]))
    return AgentRegistry({"fresh-ids-agent": lambda: build(effects)})
