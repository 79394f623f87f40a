"""Hosted agents for the tests: one refund agent per framework, each on its framework's own
offline model, loaded in process or by `countersign serve` children through
COUNTERSIGN_AGENTS=tests.support.hosted_agents:registry.

- `pydantic-refunds`: a Pydantic AI agent (`FunctionModel`), `issue_refund` made with
  `requires_approval=True`.
- `sdk-refunds`: an OpenAI Agents SDK agent (a `Model` of its own), `issue_refund` made
  with `needs_approval=True`.

Both have `lookup_order` and `notify` (let through) and `issue_refund` (asks a person);
the `*-limited` variants let refunds up to LIMIT through, and in the `*-editable` ones a
reviewer may edit the refund's amount (`editable=`).
Their models are stateless: each answers from the conversation it is shown, as a real model
does, so every process that rebuilds the agent gets the same answers (but for the wording
of a note). What the request says picks the script (`answer`): "refund order N" calls
lookup and refund in one turn; "amount A" sets the refund's amount as written (so "amount
12" sends the integer 12); "twice" asks for two refunds (A and A + 10) in that turn, "same
id" under one id; "tell them" adds a turn with a note to the customer, worded afresh on
every request. Then the model's final output quotes every tool result, rejections included.

Each real invocation of a tool, and each model request with the tool results it was shown,
goes to `ExampleEffects` (journalled to COUNTERSIGN_EXAMPLE_JOURNAL), so tests count them
across processes.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

from agents import Agent as SDKAgent
from agents import ModelResponse as SDKModelResponse
from agents import RunConfig, Usage, function_tool
from agents.models.interface import Model as SDKModel
from agents.testing.model import assistant_message, function_call
from agents.tool_context import ToolContext as SDKToolContext
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_host.adapters.openai_agents import OpenAIAgentsAgent
from agent_host.adapters.pydantic_ai import PydanticAIAgent
from agent_host.examples import ExampleEffects
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.policy import Permission
from agent_host.settings import Settings

__all__ = [
    "AGENTS",
    "CALLBACKS",
    "DEFAULT_AMOUNT",
    "EDITABLE",
    "FINAL",
    "LIMIT",
    "LIMITED",
    "REGISTRY",
    "build_registry",
    "plan",
    "registry",
]

PYDANTIC, SDK = "pydantic-refunds", "sdk-refunds"
AGENTS = {"pydantic-ai": PYDANTIC, "openai-agents": SDK}  # framework -> agent name
DEFAULT_AMOUNT = 12.5
FINAL = "Done. "  # the final output: this, then every tool result, "; "-separated
ORDER_INFO = "order {order_id}: paid twice"
TOLD = "the customer was told"

Call = tuple[str, dict[str, Any], str]  # tool, arguments, the model's call id


def plan(prompt: str, prefix: str) -> list[Call]:
    """The one tool-calling turn the request asks for (ids `<prefix>_<n>`)."""
    order = re.search(r"order\s+(\d+)", prompt)
    order_id = order.group(1) if order else "0"
    written = re.search(r"amount\s+(\S+)", prompt)
    amount: Any = _number(written.group(1)) if written else DEFAULT_AMOUNT
    calls: list[tuple[str, dict[str, Any]]] = [("lookup_order", {"order_id": order_id})]
    calls.append(("issue_refund", {"order_id": order_id, "amount": amount}))
    if "twice" in prompt:
        calls.append(("issue_refund", {"order_id": order_id, "amount": amount + 10}))
    ids = [f"{prefix}_{n}" for n in range(1, len(calls) + 1)]
    if "same id" in prompt:  # the model gives its last call the id of the one before
        ids[-1] = ids[-2]
    return [(tool, args, cid) for (tool, args), cid in zip(calls, ids, strict=True)]


def _number(written: str) -> Any:
    """The amount as the model writes it: 12 (an int), 12.5, NaN, 1e999 (infinity), or
    any other text as a string."""
    try:
        return json.loads(written)
    except ValueError:
        return written


def final_output(results: list[str]) -> str:
    return FINAL + "; ".join(results)


def answer(prompt: str, results: list[str], prefix: str) -> tuple[str, list[Call]]:
    """What the model says and calls next, from the request and the tool results so far:
    the `plan` turn; then, if the request says "tell them", a note to the customer worded
    afresh (and under a fresh id) on every request, as a real model's may be; then the
    final output."""
    if not results:
        return "Looking the order up and refunding it.", plan(prompt, prefix)
    if "tell them" in prompt and TOLD not in results:
        note = f"Your refund is on its way (note {uuid.uuid4().hex[:8]})."
        return "", [("notify", {"text": note}, f"{prefix}_note_{uuid.uuid4().hex[:8]}")]
    return final_output(results), []


# -- Pydantic AI ------------------------------------------------------------------------------


def pydantic_agent(
    effects: ExampleEffects,
    *,
    name: str = PYDANTIC,
    changed: bool = False,
    policy: dict[str, Any] | None = None,
    editable: dict[str, Any] | None = None,
) -> PydanticAIAgent:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in getattr(m, "parts", [])]
        results = [
            str(p.content) if isinstance(p, ToolReturnPart) else p.model_response()
            for p in parts
            if isinstance(p, ToolReturnPart | RetryPromptPart)
        ]
        effects.record("model_request", agent=name, results=results)
        prompt = " ".join(
            str(getattr(p, "content", "")) for p in parts if p.part_kind == "user-prompt"
        )
        text, calls = answer(prompt, results, "pc")
        said = [TextPart(text)] if text else []
        return ModelResponse(
            parts=[
                *said,
                *(ToolCallPart(tool, args, tool_call_id=cid) for tool, args, cid in calls),
            ]
        )

    agent: PydanticAgent[None, str] = PydanticAgent(FunctionModel(respond), name=name)

    @agent.tool
    def lookup_order(ctx: RunContext[None], order_id: str) -> str:
        """Look an order up."""
        effects.record("lookup", agent=name, order_id=order_id, call=ctx.tool_call_id)
        return ORDER_INFO.format(order_id=order_id)

    @agent.tool
    def notify(ctx: RunContext[None], text: str) -> str:
        """Send the customer a note."""
        effects.record("notify", agent=name, text=text, call=ctx.tool_call_id)
        return TOLD

    def refund(ctx: RunContext[None], order_id: str, amount: float) -> str:
        effects.record(
            "refund", agent=name, order_id=order_id, amount=amount, call=ctx.tool_call_id
        )
        return f"refunded {amount:.2f} to order {order_id}"

    if changed:  # the same tool with one more parameter: its schema changed

        @agent.tool(requires_approval=True)
        def issue_refund(
            ctx: RunContext[None], order_id: str, amount: float, note: str = ""
        ) -> str:
            """Refund an order. Irreversible."""
            return refund(ctx, order_id, amount)

    else:

        @agent.tool(requires_approval=True)
        def issue_refund(ctx: RunContext[None], order_id: str, amount: float) -> str:
            """Refund an order. Irreversible."""
            return refund(ctx, order_id, amount)

    return PydanticAIAgent(agent, name=name, policy=policy, editable=editable)


CALLBACKS = "pydantic-callbacks"


class Slot(BaseModel):
    day: date
    minutes: int


def callbacks_agent(effects: ExampleEffects) -> PydanticAIAgent:
    """A Pydantic AI agent whose tool takes a model with a date: its arguments, as validated,
    are not JSON until countersign turns them into JSON."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in getattr(m, "parts", [])]
        results = [str(p.content) for p in parts if isinstance(p, ToolReturnPart)]
        if results:
            return ModelResponse(parts=[TextPart(final_output(results))])
        slot = {"day": "2026-01-02", "minutes": 30}
        call = ToolCallPart("schedule_callback", {"slot": slot}, tool_call_id="cb_1")
        return ModelResponse(parts=[call])

    agent: PydanticAgent[None, str] = PydanticAgent(FunctionModel(respond), name=CALLBACKS)

    @agent.tool_plain(requires_approval=True)
    def schedule_callback(slot: Slot) -> str:
        """Book a call back to the customer."""
        effects.record("callback", agent=CALLBACKS, day=slot.day.isoformat(), minutes=slot.minutes)
        return f"call back on {slot.day:%d %B} for {slot.minutes} minutes"

    return PydanticAIAgent(agent, name=CALLBACKS)


# -- OpenAI Agents SDK ------------------------------------------------------------------------


class ScriptedSDKModel(SDKModel):
    """Answers from the input it is given: the `plan` turn, then the final output."""

    def __init__(self, effects: ExampleEffects, name: str) -> None:
        self.effects, self.name = effects, name

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> SDKModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        results = [
            str(i["output"])
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        self.effects.record("model_request", agent=self.name, results=results)
        prompt = " ".join(
            str(i.get("content", ""))
            for i in items
            if isinstance(i, dict) and i.get("role") == "user"
        )
        text, calls = answer(prompt, results, "fc")
        said = [assistant_message(text)] if text else []
        output = [*said, *(function_call(tool, args, call_id=cid) for tool, args, cid in calls)]
        return SDKModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("countersign runs hosted agents without streaming")


def sdk_agent(
    effects: ExampleEffects,
    *,
    name: str = SDK,
    changed: bool = False,
    policy: dict[str, Any] | None = None,
    editable: dict[str, Any] | None = None,
) -> OpenAIAgentsAgent:
    @function_tool
    def lookup_order(ctx: SDKToolContext[Any], order_id: str) -> str:
        """Look an order up."""
        effects.record("lookup", agent=name, order_id=order_id, call=ctx.tool_call_id)
        return ORDER_INFO.format(order_id=order_id)

    @function_tool
    def notify(ctx: SDKToolContext[Any], text: str) -> str:
        """Send the customer a note."""
        effects.record("notify", agent=name, text=text, call=ctx.tool_call_id)
        return TOLD

    def refund(ctx: SDKToolContext[Any], order_id: str, amount: float) -> str:
        effects.record(
            "refund", agent=name, order_id=order_id, amount=amount, call=ctx.tool_call_id
        )
        return f"refunded {amount:.2f} to order {order_id}"

    if changed:  # the same tool with one more parameter: its schema changed

        @function_tool(needs_approval=True)
        def issue_refund(
            ctx: SDKToolContext[Any], order_id: str, amount: float, note: str = ""
        ) -> str:
            """Refund an order. Irreversible."""
            return refund(ctx, order_id, amount)

    else:

        @function_tool(needs_approval=True)
        def issue_refund(ctx: SDKToolContext[Any], order_id: str, amount: float) -> str:
            """Refund an order. Irreversible."""
            return refund(ctx, order_id, amount)

    agent = SDKAgent(
        name=name,
        instructions="You refund orders: look the order up, then refund it.",
        tools=[lookup_order, issue_refund, notify],
        model=ScriptedSDKModel(effects, name),
    )
    return OpenAIAgentsAgent(
        agent, policy=policy, run_config=RunConfig(tracing_disabled=True), editable=editable
    )


# -- the registry -----------------------------------------------------------------------------

BUILDERS: dict[str, Callable[..., Any]] = {PYDANTIC: pydantic_agent, SDK: sdk_agent}
# The same agents, their refunds judged by an operator's limit instead of the tool's flag
LIMITED = {"pydantic-ai": "pydantic-limited", "openai-agents": "sdk-limited"}
LIMIT = 100


def up_to_the_limit(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Permission:
    """Refunds up to LIMIT go through; larger ones ask a person."""
    return Permission.ASK if arguments["amount"] > LIMIT else Permission.ALLOW


LIMIT_POLICY = {"issue_refund": up_to_the_limit}
# The same agents, a reviewer may edit the refund's amount ("Edit & approve")
EDITABLE = {"pydantic-ai": "pydantic-editable", "openai-agents": "sdk-editable"}
EDITABLE_AMOUNT = {"issue_refund": ["amount"]}


def build_registry(effects: ExampleEffects, *, changed: bool = False) -> AgentRegistry:
    """Both agents, the limited variants and the Pydantic AI callbacks agent; `changed`: as
    redeployed with `issue_refund` taking one more parameter."""
    registry = AgentRegistry()
    for framework, name in AGENTS.items():
        build, limited = BUILDERS[name], LIMITED[framework]
        registry.register(name, lambda b=build, n=name: b(effects, name=n, changed=changed))
        registry.register(
            limited,
            lambda b=build, n=limited: b(effects, name=n, changed=changed, policy=LIMIT_POLICY),
        )
        editable = EDITABLE[framework]
        registry.register(
            editable,
            lambda b=build, n=editable: b(
                effects, name=n, changed=changed, editable=EDITABLE_AMOUNT
            ),
        )
    registry.register(CALLBACKS, lambda: callbacks_agent(effects))
    return registry


REGISTRY = "tests.support.hosted_agents:registry"  # for COUNTERSIGN_AGENTS


def registry(settings: Settings) -> AgentRegistry:
    """COUNTERSIGN_AGENTS=tests.support.hosted_agents:registry (effects to the journal)."""
    return build_registry(ExampleEffects(settings.example_journal))
