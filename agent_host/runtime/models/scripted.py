"""A deterministic scripted model: rules from the conversation so far to the next turn.

Used by the example agents and the tests; it never touches the network.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_host.runtime.messages import Message, ModelResponse, ToolCall, ToolSpec

__all__ = ["Conversation", "ScriptedModel", "call", "reply"]


@dataclass(frozen=True)
class Conversation:
    """What a script sees: the user's input and the tool results since it."""

    input: str
    results: tuple[Message, ...]
    turn: int

    def result(self, tool: str) -> str | None:
        """The latest result of `tool` in this conversation, if any."""
        for message in reversed(self.results):
            if message.name == tool:
                return message.content
        return None


Script = Callable[[Conversation], ModelResponse]


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call for a scripted turn (its id is assigned by the model)."""
    return ToolCall(id="", name=name, arguments=arguments)


def reply(text: str) -> ModelResponse:
    return ModelResponse(text=text)


class ScriptedModel:
    """Runs `script(conversation)` each turn; call ids are deterministic per conversation."""

    def __init__(self, script: Script, name: str = "scripted") -> None:
        self.name = name
        self._script = script

    @classmethod
    def from_turns(cls, *turns: ModelResponse | list[ToolCall]) -> ScriptedModel:
        """Emit `turns` in order (one per model turn), then repeat the last one."""

        def script(conversation: Conversation) -> ModelResponse:
            turn = turns[min(conversation.turn, len(turns) - 1)]
            return turn if isinstance(turn, ModelResponse) else ModelResponse(tool_calls=turn)

        return cls(script)

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        conversation = _conversation(messages)
        response = self._script(conversation)
        counter = itertools.count(1)
        calls = [
            call_.model_copy(update={"id": call_.id or f"call_{conversation.turn}_{next(counter)}"})
            for call_ in response.tool_calls
        ]
        return ModelResponse(text=response.text, tool_calls=calls)


def _conversation(messages: Sequence[Message]) -> Conversation:
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    since = messages[last_user + 1 :]
    return Conversation(
        input=messages[last_user].content if last_user >= 0 else "",
        results=tuple(m for m in since if m.role == "tool"),
        turn=sum(1 for m in since if m.role == "assistant"),
    )
