"""The idempotency key of the tool call being run, for tools that are handed no
`ToolContext`.

A native tool gets its call's key as `ToolContext.idempotency_key`. A hosted agent's tool
(OpenAI Agents SDK, Pydantic AI) is called by its framework, with the framework's context,
and reads the same key with `idempotency_key()`. The key is `<run id>:<call id>` with
countersign's call id: stable across retries and resumes of that call, and never the
model's own id, which a model may give again to another call in a later turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["idempotency_key", "key_of", "running"]

_KEY: ContextVar[str | None] = ContextVar("countersign_call_key", default=None)


def key_of(run_id: str, call_id: str) -> str:
    return f"{run_id}:{call_id}"


def idempotency_key() -> str:
    """The key of the tool call countersign is running now: pass it to the systems the
    tool calls (a payment API's idempotency key), so a call retried is not done twice."""
    key = _KEY.get()
    if key is None:
        raise RuntimeError(
            "idempotency_key() names the tool call countersign is running, and none is: "
            "call it inside a tool's function, while countersign runs the tool"
        )
    return key


@contextlib.contextmanager
def running(run_id: str, call_id: str) -> Iterator[None]:
    """Around one tool call: `idempotency_key()` answers its key (threads the tool starts
    from here, e.g. `asyncio.to_thread`, see it too)."""
    token = _KEY.set(key_of(run_id, call_id))
    try:
        yield
    finally:
        _KEY.reset(token)
