"""The model interface, and the switch that forbids real model calls in tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from agent_host.errors import ModelError
from agent_host.runtime.messages import Message, ModelResponse, ToolSpec

__all__ = ["Model", "allow_model_requests", "check_allow_model_requests"]


class Model(Protocol):
    """Anything that answers a transcript with a text or tool calls."""

    name: str

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse: ...


_ALLOW_MODEL_REQUESTS = True


def set_allow_model_requests(allowed: bool) -> None:
    """Globally allow or forbid network model calls (tests forbid them)."""
    global _ALLOW_MODEL_REQUESTS
    _ALLOW_MODEL_REQUESTS = allowed


@contextmanager
def allow_model_requests(allowed: bool = True) -> Iterator[None]:
    """Temporarily allow (or forbid) network model calls."""
    previous = _ALLOW_MODEL_REQUESTS
    set_allow_model_requests(allowed)
    try:
        yield
    finally:
        set_allow_model_requests(previous)


def check_allow_model_requests() -> None:
    if not _ALLOW_MODEL_REQUESTS:
        raise ModelError(
            "network model requests are disabled (set_allow_model_requests(False)); "
            "use a ScriptedModel in tests, or wrap the call in allow_model_requests()"
        )
