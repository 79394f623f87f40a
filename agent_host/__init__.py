"""countersign's agent host: agents whose gated tool calls wait for a person's approval.

The public API, importable from here in one line::

    from agent_host import Agent, AgentRegistry, Runner, tool, Permission, Approve

Nearly everything below is the pure runtime (`agent_host.runtime`: no Redis, no HTTP, no
Slack); `model_from_settings` builds the OpenAI-compatible model from `ModelSettings`, and
`ApprovalClient` (`agent_host.client`) is for code that runs elsewhere and asks countersign's
HTTP API for approval (aiohttp only).
The durable host (`agent_host.durable`), the approval domain (`agent_host.approvals`) and the
HTTP API (`agent_host.http`) are assembled by the command line (`countersign serve`).
"""

from agent_host.client import ApprovalClient, ApprovalClientError, ApprovalResult
from agent_host.errors import (
    CountersignError,
    InvalidArguments,
    PauseRequest,
)
from agent_host.llm import model_from_settings
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.call_key import idempotency_key
from agent_host.runtime.checkpoint import CallRecord, RunState
from agent_host.runtime.decisions import (
    Answer,
    Approve,
    Decision,
    Expired,
    Reject,
    RequestChanges,
)
from agent_host.runtime.ledger import ExecutionLedger, InMemoryLedger
from agent_host.runtime.messages import Message, ModelResponse, ToolCall, ToolSpec
from agent_host.runtime.models import Conversation, Model, ScriptedModel, call, reply
from agent_host.runtime.pause import ask_human, pause
from agent_host.runtime.policy import (
    Permission,
    RuleSet,
    Severity,
    Verdict,
    confidence_gate,
    load_rules,
)
from agent_host.runtime.runner import Failed, Paused, Runner, RunOutcome, Succeeded
from agent_host.runtime.tools import Tool, ToolContext, tool
from agent_host.settings import ModelSettings

__all__ = [
    "Agent",
    "AgentRegistry",
    "Answer",
    "ApprovalClient",
    "ApprovalClientError",
    "ApprovalResult",
    "Approve",
    "CallRecord",
    "Conversation",
    "CountersignError",
    "Decision",
    "ExecutionLedger",
    "Expired",
    "Failed",
    "InMemoryLedger",
    "InvalidArguments",
    "Message",
    "Model",
    "ModelResponse",
    "ModelSettings",
    "PauseRequest",
    "Paused",
    "Permission",
    "Reject",
    "RequestChanges",
    "RuleSet",
    "RunOutcome",
    "RunState",
    "Runner",
    "ScriptedModel",
    "Severity",
    "Succeeded",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolSpec",
    "Verdict",
    "ask_human",
    "call",
    "confidence_gate",
    "idempotency_key",
    "load_rules",
    "model_from_settings",
    "pause",
    "reply",
    "tool",
]
