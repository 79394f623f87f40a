"""Edit, then approve, for every kind of agent: what an edit needs of an agent and its tools,
and what the model is told after an edited or commented approval.

A countersign `Agent` and a `HostedAgent` both offer `editable_tool(name)` (the tool's
editable argument names, its JSON schema and its own validation) and `judge_edit(tool,
arguments, context)` (the policy on the edited arguments), so the approval service's checks
(`agent_host.approvals.edits.ArgumentEditor`) and the runner's re-check at resume are one
code for both (invariant 19, docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agent_host.runtime.decisions import Approve
from agent_host.runtime.fingerprint import canonical_json
from agent_host.runtime.policy import Verdict

__all__ = [
    "NOTE_VALUE_MAX",
    "EditableAgent",
    "EditableTool",
    "with_reviewer_note",
]

NOTE_VALUE_MAX = 200  # characters of one argument's value in the note to the model


class EditableTool(Protocol):
    """A tool as an edit sees it: which arguments may change, its schema, its validation."""

    @property
    def name(self) -> str: ...

    @property
    def editable(self) -> tuple[str, ...]: ...

    def schema(self) -> dict[str, Any]: ...

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool runs them; raises InvalidArguments with the problems."""
        ...


class EditableAgent(Protocol):
    def editable_tool(self, name: str) -> EditableTool | None: ...

    def judge_edit(
        self, tool: str, arguments: Mapping[str, Any], context: Mapping[str, Any]
    ) -> Verdict: ...


def with_reviewer_note(result: str, decision: Approve) -> str:
    """The tool's result, then what the reviewer changed (and who) and the comments of
    everyone who approved it (those towards a quorum first)."""
    lines = []
    if decision.edited_arguments is not None:
        who = decision.edited_by or decision.decided_by or "a reviewer"
        changes = "; ".join(
            f"{name}: {_short_json(before)} -> {_short_json(after)}"
            for name, before, after in decision.changes()
        )
        lines.append(
            f"Note: reviewer {who} edited the arguments before approving ({changes}); the "
            f"tool ran with the edited arguments: {canonical_json(decision.edited_arguments)}"
        )
    for who, earlier in decision.earlier_comments:  # approvals towards the quorum
        lines.append(f"Reviewer {who or 'who approved'} commented: {earlier.strip()}")
    if comment := decision.comment.strip():
        lines.append(f"Reviewer {decision.decided_by or 'who approved'} commented: {comment}")
    return "\n\n".join([result, *lines]) if lines else result


def _short_json(value: Any) -> str:
    text = "(none)" if value is None else canonical_json(value)
    return text if len(text) <= NOTE_VALUE_MAX else text[: NOTE_VALUE_MAX - 1] + "…"
