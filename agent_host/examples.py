"""The built-in example agents, each driven by a deterministic scripted model.

Their side effects land in `ExampleEffects` (in memory, optionally journalled to a file) so
that tests and the demo can see exactly how often each tool really ran.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.pause import pause
from agent_host.runtime.policy import Permission, Severity, Verdict
from agent_host.runtime.tools import ToolContext, tool
from agent_host.settings import Settings

__all__ = ["ExampleEffects", "build_registry"]

ORDERS = {"123": 42.50, "124": 1200.00, "200": 9.99}


@dataclass
class ExampleEffects:
    """Where the examples' tools leave their marks; `journal` survives the process."""

    journal: Path | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, **details: Any) -> None:
        event = {"kind": kind, **details}
        with self._lock:
            self.events.append(event)
            if self.journal is not None:
                with self.journal.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(event) + "\n")

    def count(self, kind: str) -> int:
        return sum(1 for e in self.all_events() if e["kind"] == kind)

    def all_events(self) -> list[dict[str, Any]]:
        if self.journal is not None and self.journal.exists():
            lines = self.journal.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line]
        return list(self.events)


def refund_agent(effects: ExampleEffects) -> Agent:
    @tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order's amount and status."""
        if order_id not in ORDERS:
            return {"order_id": order_id, "found": False}
        return {"order_id": order_id, "found": True, "amount": ORDERS[order_id], "paid": True}

    @tool(
        permission=Permission.ASK,
        reason="moves money back to the customer",
        severity="high",
        editable=["amount"],  # a reviewer may refund less (or more) than the model proposed
    )
    def issue_refund(order_id: str, amount: float, ctx: ToolContext) -> str:
        """Refund an order. Irreversible."""
        effects.record("refund", order_id=order_id, amount=amount, key=ctx.idempotency_key)
        key = ctx.idempotency_key
        return f"Refund issued: ${amount:.2f} to order {order_id} (idempotency key {key})"

    def script(c: Conversation) -> ModelResponse:
        match = re.search(r"order\s+#?(\d+)", c.input)
        if not match:
            return reply("Which order should I refund? Say e.g. 'refund order 123'.")
        order = match.group(1)
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("lookup_order", order_id=order)])
        found = json.loads(c.result("lookup_order") or "{}")
        if not found.get("found"):
            return reply(f"Order {order} was not found, so nothing was refunded.")
        refund = c.result("issue_refund")
        if refund is None:  # what it says shows in the approval message, for the reviewer
            amount = found["amount"]
            return ModelResponse(
                text=f"Order {order} is paid (${amount:.2f}); I will refund it in full.",
                tool_calls=[call("issue_refund", order_id=order, amount=amount)],
            )
        if refund.startswith("Refund issued"):
            return reply(f"Done. {refund}.")
        return reply(f"The refund for order {order} was not approved: {refund}")

    return Agent(
        name="refund-agent",
        instructions="You handle refund requests. Look the order up, then refund it.",
        tools=[lookup_order, issue_refund],
        model=ScriptedModel(script, name="scripted-refund"),
    )


def cleanup_agent(effects: ExampleEffects) -> Agent:
    @tool(permission=Permission.ASK, reason="destructive: deletes a file", severity="high")
    def delete_file(path: str, ctx: ToolContext) -> str:
        """Delete a file. Destructive."""
        effects.record("delete_file", path=path, key=ctx.idempotency_key)
        return f"Deleted {path}"

    def script(c: Conversation) -> ModelResponse:
        paths = re.findall(r"(/[\w./-]+)", c.input) or ["/matter/acme/draft.docx"]
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("delete_file", path=p) for p in paths])
        results = [m.content for m in c.results]
        return reply("Cleanup finished: " + "; ".join(results))

    return Agent(
        name="cleanup-agent",
        instructions="You clean up old drafts. Deleting needs a human's sign-off.",
        tools=[delete_file],
        model=ScriptedModel(script, name="scripted-cleanup"),
    )


def needs_approval_for_prod(arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Verdict:
    """Seed 001: only deletions of production repositories need approval."""
    if "prod" in str(arguments.get("name", "")):
        return Verdict.ask("deletes a production repository", Severity.CRITICAL, allow_always=False)
    return Verdict.allow()


def repo_admin(effects: ExampleEffects) -> Agent:
    @tool(permission=needs_approval_for_prod)
    def delete_repo(name: str, ctx: ToolContext) -> str:
        """Permanently delete a repository."""
        effects.record("delete_repo", name=name, key=ctx.idempotency_key)
        return f"Deleted repository {name}"

    def script(c: Conversation) -> ModelResponse:
        names = re.findall(r"repo(?:sitory)?s?\s+([\w.-]+(?:\s*,\s*[\w.-]+)*)", c.input)
        repos = [n.strip() for n in names[0].split(",")] if names else ["scratch"]
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("delete_repo", name=r) for r in repos])
        return reply("Done: " + "; ".join(m.content for m in c.results))

    return Agent(
        name="repo-admin",
        instructions="You administer repositories.",
        tools=[delete_repo],
        model=ScriptedModel(script, name="scripted-repo-admin"),
    )


def support_agent(effects: ExampleEffects) -> Agent:
    @tool
    def ask_operator(question: str) -> str:
        """Ask a human operator and wait for the answer."""
        pause(question, Severity.HIGH)

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            question = f"Customer asks: {c.input!r}. How should I answer?"
            return ModelResponse(tool_calls=[call("ask_operator", question=question)])
        answer = c.result("ask_operator") or ""
        effects.record("support_reply", answer=answer)
        return reply(f"Replied to the customer: {answer}")

    return Agent(
        name="support-agent",
        instructions="You answer customers; ask an operator when unsure.",
        tools=[ask_operator],
        model=ScriptedModel(script, name="scripted-support"),
    )


def build_registry(effects: ExampleEffects | None = None) -> AgentRegistry:
    effects = effects or ExampleEffects()
    return AgentRegistry(
        {
            "refund-agent": lambda: refund_agent(effects),
            "cleanup-agent": lambda: cleanup_agent(effects),
            "repo-admin": lambda: repo_admin(effects),
            "support-agent": lambda: support_agent(effects),
        }
    )


def default_registry(settings: Settings) -> AgentRegistry:
    """The registry `COUNTERSIGN_AGENTS` names by default; effects journalled if asked
    (COUNTERSIGN_EXAMPLE_JOURNAL, for tests that watch several processes)."""
    return build_registry(ExampleEffects(settings.example_journal))
