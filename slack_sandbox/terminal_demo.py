"""`countersign demo --terminal`: the example agents in a terminal, decisions at a prompt.

The pure runtime only (no Redis, no Slack): each pause is shown with its checkpoint size,
the checkpoint is round-tripped through JSON as a restart would, and your answer resumes it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import Answer, Approve, Decision, Reject
from agent_host.runtime.runner import Paused, Runner

__all__ = ["run_terminal_demo"]

SCENARIOS = [
    ("refund-agent", "refund order 123"),
    ("repo-admin", "delete repos scratch-tmp, acme-prod"),
    ("support-agent", "Can I get my invoice in euros?"),
]


async def run_terminal_demo(ask: Callable[[str], str] = input) -> None:
    runner = Runner(build_registry(ExampleEffects()))
    for agent, text in SCENARIOS:
        print(f"\n=== {agent}: {text!r}")
        outcome = await runner.run(agent, text, requested_by="you")
        while isinstance(outcome, Paused):
            blob = outcome.state.to_json()
            print(f"paused; checkpoint is {len(blob)} bytes of JSON")
            state = RunState.from_json(blob)  # what a restart would read back
            decisions: dict[str, Decision] = {}
            for call in outcome.pending:
                if call.gate == "question":
                    answer = await asyncio.to_thread(ask, f"  {call.question}\n  your answer> ")
                    decisions[call.call_id] = Answer(text=answer, decided_by="you")
                    continue
                print(
                    f"  {call.tool}({json.dumps(call.arguments)}) — {call.reason} [{call.severity}]"
                )
                reply = await asyncio.to_thread(ask, "  approve? [y/N] ")
                approved = reply.strip().lower().startswith("y")
                decisions[call.call_id] = (
                    Approve(decided_by="you") if approved else Reject(decided_by="you")
                )
            outcome = await runner.resume(state, decisions)
        print(f"{outcome.kind}: {getattr(outcome, 'output', '') or getattr(outcome, 'error', '')}")
        for call in outcome.state.calls:
            print(f"  · {call.tool} {json.dumps(call.arguments)} -> {call.outcome}")
