"""What a run did before a gated call, in short: the context a reviewer decides with.

Taken from the run's checkpoint when the turn pauses (`context_for`) and kept with each
request, sealed like the checkpoint it comes from (the store encrypts it). Everything in it
is bounded here, whatever the model wrote: a few of the latest settled calls, each with its
arguments cut down (as a structure, so the chat side can still mask secret-looking keys)
and its result cut short, and the agent's own words of the turn that asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from agent_host.runtime.checkpoint import CallRecord, RunState

__all__ = [
    "EARLIER_MAX",
    "RESULT_MAX",
    "SAID_MAX",
    "CallContext",
    "EarlierCall",
    "bounded",
    "context_for",
]

EARLIER_MAX = 5  # the latest settled calls kept; how many more there were is counted
ARGUMENTS_BUDGET = 400  # characters of argument keys and values kept per call
RESULT_MAX = 300  # characters of a call's result
SAID_MAX = 1500  # characters of the agent's words
NAME_MAX = 100  # a tool's name (the model may invent one)
_KEY_MAX = 40
_STRING_MAX = 120
_ITEMS_MAX = 10
_DEPTH_MAX = 4
MORE = "…"


@dataclass(frozen=True)
class EarlierCall:
    tool: str
    arguments: Any  # bounded (see `bounded`): still a structure, so keys can be masked
    outcome: str  # executed, rejected, denied, expired, answered, error, invalid, …
    result: str


@dataclass(frozen=True)
class CallContext:
    earlier: tuple[EarlierCall, ...] = ()
    more: int = 0  # settled calls before those in `earlier`, not kept
    said: str = ""  # the assistant's text of the turn that made the call

    @property
    def empty(self) -> bool:
        return not (self.earlier or self.more or self.said)

    def to_json(self) -> str:
        # What `asdict` gives, without its deep copy of every call's arguments.
        data = {
            "earlier": [{f.name: getattr(c, f.name) for f in fields(c)} for c in self.earlier],
            "more": self.more,
            "said": self.said,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> CallContext:
        """The context back from `to_json`; ValueError when it is not one."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or not isinstance(raw.get("earlier", []), list):
            raise ValueError("not a call context")
        earlier = tuple(
            EarlierCall(
                tool=_cut(str(c.get("tool", "")), NAME_MAX),
                arguments=c.get("arguments"),
                outcome=_cut(str(c.get("outcome", "")), NAME_MAX),
                result=_cut(str(c.get("result", "")), RESULT_MAX),
            )
            for c in raw.get("earlier", [])[:EARLIER_MAX]
            if isinstance(c, dict)
        )
        more = raw.get("more", 0)
        return cls(
            earlier=earlier,
            more=more if isinstance(more, int) and more >= 0 else 0,
            said=_cut(str(raw.get("said", "")), SAID_MAX),
        )


def context_for(state: RunState, record: CallRecord) -> CallContext:
    """The context of `record`, a call of `state`'s paused turn."""
    settled = [c for c in state.calls if c.outcome is not None and c.call_id != record.call_id]
    kept = settled[-EARLIER_MAX:]
    earlier = tuple(
        EarlierCall(
            tool=_cut(c.tool, NAME_MAX),
            arguments=bounded(c.arguments),
            outcome=c.outcome or "",
            result=_cut(c.result or "", RESULT_MAX),
        )
        for c in kept
    )
    return CallContext(earlier, len(settled) - len(kept), _cut(_said(state, record), SAID_MAX))


def _said(state: RunState, record: CallRecord) -> str:
    """The assistant's text in the response that proposed `record` (the model's ids may
    repeat across turns, so the latest response naming it is the one)."""
    for message in reversed(state.transcript):
        if message.role != "assistant":
            continue
        if any(call.id == record.model_call_id for call in message.tool_calls):
            return message.content.strip()
    return ""


def bounded(value: Any, budget: int = ARGUMENTS_BUDGET) -> Any:
    """A JSON-able copy of `value` of at most about `budget` characters of keys and values,
    keeping its shape: long strings cut, long lists and objects cut with a count of what
    was left out, deep nesting replaced by `…`."""
    left = [budget]
    return _shrink(value, left, 0)


def _shrink(value: Any, left: list[int], depth: int) -> Any:
    if isinstance(value, str):
        kept = _cut(value, max(1, min(_STRING_MAX, left[0])))
        left[0] -= len(kept)
        return kept
    if value is None or isinstance(value, bool | int | float):
        left[0] -= len(str(value))
        return value
    if depth >= _DEPTH_MAX:
        left[0] -= 1
        return MORE
    if isinstance(value, dict):
        shrunk: dict[str, Any] = {}
        items = list(value.items())
        for index, (key, item) in enumerate(items):
            if left[0] <= 0 or index >= _ITEMS_MAX:
                shrunk[MORE] = f"{len(items) - index} more"
                break
            name = _cut(str(key), _KEY_MAX)
            left[0] -= len(name)
            shrunk[name] = _shrink(item, left, depth + 1)
        return shrunk
    if isinstance(value, list | tuple):
        listed: list[Any] = []
        for index, item in enumerate(value):
            if left[0] <= 0 or index >= _ITEMS_MAX:
                listed.append(f"{MORE} {len(value) - index} more")
                break
            listed.append(_shrink(item, left, depth + 1))
        return listed
    return _shrink(str(value), left, depth)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + MORE
