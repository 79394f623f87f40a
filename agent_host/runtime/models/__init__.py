"""Models: the interface, and the deterministic scripted model (`agent_host.llm` holds the
clients of hosted models)."""

from agent_host.runtime.models.base import (
    Model,
    allow_model_requests,
    check_allow_model_requests,
    set_allow_model_requests,
)
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply

__all__ = [
    "Conversation",
    "Model",
    "ScriptedModel",
    "allow_model_requests",
    "call",
    "check_allow_model_requests",
    "reply",
    "set_allow_model_requests",
]
