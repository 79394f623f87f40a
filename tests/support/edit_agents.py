"""An agent whose gated tool lets a reviewer edit every argument, with a policy that depends
on them: payouts over 1000 are critical, others high; payouts to a sanctioned vendor are
denied. Its arguments cover every kind of input the edit form offers (text, number,
integer, a choice, a boolean, nested JSON).

`COUNTERSIGN_AGENTS=tests.support.edit_agents:registry` serves it (with the examples), its
payouts journalled with the examples' effects (`kind` "payout").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any, Literal

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Severity, Verdict
from agent_host.runtime.tools import ToolContext, tool
from agent_host.settings import Settings

PAYOUT_AGENT = "payout-agent"
SANCTIONED = "blocked-vendor"


class Speed(enum.Enum):
    STANDARD = "standard"
    SAME_DAY = "same_day"


def payout_policy(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Verdict:
    if arguments.get("vendor") == SANCTIONED:
        return Verdict.deny("this vendor is sanctioned")
    if float(arguments.get("amount", 0)) > 1000:
        return Verdict.ask("payouts over 1000 need a second look", Severity.CRITICAL)
    return Verdict.ask("pays a vendor", Severity.HIGH)


def payout_agent(effects: ExampleEffects) -> Agent:
    @tool(permission=payout_policy, editable=True)
    def pay_vendor(
        vendor: str,
        amount: float,
        ctx: ToolContext,
        currency: Literal["EUR", "USD"] = "EUR",
        installments: int = 1,
        speed: Speed = Speed.STANDARD,
        notify: bool = False,
        memo: dict[str, str] | None = None,
    ) -> str:
        """Pay a vendor."""
        effects.record(
            "payout",
            vendor=vendor,
            amount=amount,
            currency=currency,
            installments=installments,
            speed=speed.value,
            notify=notify,
            memo=memo,
            key=ctx.idempotency_key,
        )
        return f"Paid {amount:.2f} {currency} to {vendor}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            amount = float((re.findall(r"[\d.]+", c.input) or ["250"])[0])
            return ModelResponse(
                tool_calls=[
                    call(
                        "pay_vendor",
                        vendor="acme",
                        amount=amount,
                        memo={"invoice": "INV-7"},
                    )
                ]
            )
        return reply("Payout: " + (c.result("pay_vendor") or "nothing"))

    return Agent(
        name=PAYOUT_AGENT,
        instructions="You pay vendors.",
        tools=[pay_vendor],
        model=ScriptedModel(script, name="scripted-payout"),
    )


def with_payouts(effects: ExampleEffects) -> AgentRegistry:
    registry = build_registry(effects)
    registry.register(PAYOUT_AGENT, lambda: payout_agent(effects))
    return registry


def registry(settings: Settings) -> AgentRegistry:
    return with_payouts(ExampleEffects(settings.example_journal))
