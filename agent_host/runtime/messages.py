"""The transcript: what the model sees, and what it proposes.

Kept as pydantic models because the transcript is part of the JSON checkpoint.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["Message", "ModelResponse", "ToolCall", "ToolSpec"]


class ToolCall(BaseModel):
    """One tool call proposed by the model. `arguments` is the raw JSON text or a dict."""

    id: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None


class ToolSpec(BaseModel):
    """What a model is told about a tool: OpenAI's function-tool shape."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelResponse(BaseModel):
    """One model turn: either tool calls to judge, or a final text."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
