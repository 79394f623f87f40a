"""Edit, then approve: which arguments of a waiting call a reviewer may change, and whether
an edit may be recorded.

A tool opts in (`@tool(..., editable=True)` or a list of names); its requests list those
arguments (`ApprovalRequest.editable`). An edit is merged over the arguments the reviewer
was shown, validated by the tool itself (its JSON schema), and judged again by the policy:
an edit the policy denies, or that would need a higher severity or another route, is
refused with the reason, so an edit never lowers the bar (invariant 19,
docs/ARCHITECTURE.md). The runner checks it all again at resume.

The tool and its policy come from the agent registry every process builds at start
(`Runner.agent`); the route from the same router the store pauses with. A countersign
agent and a hosted one (its adapter's `editable=`, its framework's validation) are checked
alike, through `runtime.editing.EditableAgent`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_host.approvals.requests import ApprovalRequest, Router
from agent_host.errors import CountersignError, InvalidArguments
from agent_host.runtime.agents import Agent
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.editing import EditableAgent, EditableTool
from agent_host.runtime.fingerprint import canonical_json, same_json
from agent_host.runtime.hosted import HostedAgent
from agent_host.runtime.policy import Permission, Severity

__all__ = [
    "MAX_EDITED_BYTES",
    "ArgumentEditor",
    "EditCheck",
    "EditForm",
    "EditableField",
    "FieldKind",
    "editable_fields",
    "field_of",
]

MAX_EDITED_BYTES = 64 * 1024  # as an external request's arguments

# How an argument is edited: its JSON schema reduced to what a form can offer.
FieldKind = Literal["text", "number", "integer", "choice", "boolean", "json"]
_SCALARS: dict[str, FieldKind] = {
    "string": "text",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
}


@dataclass(frozen=True)
class EditableField:
    """One argument a reviewer may edit, as its schema describes it."""

    name: str
    kind: FieldKind
    required: bool = False
    nullable: bool = False  # null is a valid value (e.g. `str | None`)
    choices: tuple[Any, ...] = ()  # kind "choice": the allowed values, in order
    description: str = ""
    minimum: float | None = None  # kinds "number" and "integer", when the schema bounds it
    maximum: float | None = None


@dataclass(frozen=True)
class EditForm:
    """What an edit form offers for one request: its editable fields and current values."""

    tool: str
    fields: tuple[EditableField, ...]
    arguments: dict[str, Any]


@dataclass(frozen=True)
class EditCheck:
    """The verdict on an edit: the arguments to record and their call's hash, or why not
    (`errors` by argument name for a form to show under each field, else `refusal`)."""

    arguments: dict[str, Any] = field(default_factory=dict)
    edited_hash: str = ""
    changed: bool = False  # False: the edit changes nothing; it is a plain approval
    errors: dict[str, str] = field(default_factory=dict)
    refusal: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors and not self.refusal


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local `$ref` (`#/$defs/Name`, as pydantic writes enums and models)."""
    for _ in range(8):  # a reference to a reference, but never a loop
        ref = schema.get("$ref")
        if not (isinstance(ref, str) and ref.startswith("#/")):
            break
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**(target if isinstance(target, Mapping) else {}), **siblings}
    return schema


def field_of(
    name: str, schema: Mapping[str, Any], root: Mapping[str, Any], required: bool
) -> EditableField:
    """The form field for one argument's JSON schema: text, number, integer, a choice (an
    enum), a boolean, and JSON text for anything else (objects, arrays, unions)."""
    schema = _resolve(schema, root)
    nullable = False
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        others = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
        nullable = len(others) < len(options)
        if len(others) == 1 and isinstance(others[0], Mapping):
            inner = _resolve(others[0], root)
            schema = {**inner, **{k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}}
        else:
            schema = {**schema, "type": "json"}  # a real union: edited as JSON
    kind_of = schema.get("type")
    if isinstance(kind_of, list):  # e.g. ["string", "null"]
        nullable = nullable or "null" in kind_of
        rest = [t for t in kind_of if t != "null"]
        kind_of = rest[0] if len(rest) == 1 else "json"
    description = str(schema.get("description") or "")
    if isinstance(schema.get("enum"), list) or "const" in schema:
        choices = tuple(schema["enum"]) if "enum" in schema else (schema["const"],)
        return EditableField(name, "choice", required, nullable, choices, description)
    kind: FieldKind = _SCALARS.get(str(kind_of), "json")
    minimum = schema.get("minimum") if kind in ("number", "integer") else None
    maximum = schema.get("maximum") if kind in ("number", "integer") else None
    return EditableField(
        name,
        kind,
        required,
        nullable,
        description=description,
        minimum=_bound(minimum),
        maximum=_bound(maximum),
    )


def _bound(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def editable_fields(
    tool: EditableTool, names: tuple[str, ...] | list[str]
) -> tuple[EditableField, ...]:
    """The fields of `names` (in the tool's argument order) from the tool's JSON schema."""
    schema = tool.schema()
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    wanted = set(names) & set(tool.editable)
    return tuple(
        field_of(name, properties[name], schema, name in required)
        for name in properties
        if name in wanted
    )


# an agent's name -> it and its fingerprint (`Runner.agent`)
AgentLookup = Callable[[str], tuple["Agent | HostedAgent", str]]


class ArgumentEditor:
    """The edit checks, with the registry's agents (`Runner.agent`) and the router."""

    def __init__(self, agents: AgentLookup, router: Router) -> None:
        self.agents = agents
        self.router = router

    def form(self, request: ApprovalRequest) -> EditForm | str:
        """The form to edit `request` with, or why it cannot be edited."""
        found = self._tool(request)
        if isinstance(found, str):
            return found
        tool, _, _ = found
        fields = editable_fields(tool, list(request.editable))
        if not fields:
            return f"none of the arguments of {request.tool} can be edited"
        return EditForm(tool.name, fields, dict(request.arguments))

    async def check(self, request: ApprovalRequest, edited: Any) -> EditCheck:
        """Whether `edited` (the arguments to change, over those the reviewer was shown) may
        be recorded with an approval of `request`."""
        found = self._tool(request)
        if isinstance(found, str):
            return EditCheck(refusal=found)
        tool, agent, fingerprint = found
        if not isinstance(edited, Mapping):
            return EditCheck(refusal="edited arguments must be a JSON object of argument names")
        original = dict(request.arguments)
        editable = set(request.editable) & set(tool.editable)
        errors = {
            str(name): f"{tool.name} does not let a reviewer edit {name}"
            for name, value in edited.items()
            if name not in editable
            and (name not in original or not same_json(original[name], value))
        }
        if errors:
            return EditCheck(errors=errors)
        merged = original | dict(edited)
        if len(canonical_json(merged).encode()) > MAX_EDITED_BYTES:
            return EditCheck(refusal=f"edited arguments are larger than {MAX_EDITED_BYTES} bytes")
        try:
            valid = tool.validate(merged)
        except InvalidArguments as exc:
            return EditCheck(errors=exc.problems or {"": str(exc)})
        if canonical_json(valid) == canonical_json(original):
            return EditCheck(arguments=original, edited_hash=request.call_hash)
        if refusal := await self._judge_again(request, agent, tool, valid):
            return EditCheck(refusal=refusal)
        return EditCheck(
            arguments=valid,
            edited_hash=call_hash(fingerprint, tool.name, valid),
            changed=True,
        )

    def _tool(self, request: ApprovalRequest) -> tuple[EditableTool, EditableAgent, str] | str:
        """The request's tool as this process's registry defines it, or why not editable."""
        if request.kind != "approval":
            return "only a call waiting for approval can be edited, not a question"
        if request.origin == "external":
            return (
                "this request comes from an agent that runs elsewhere, so its arguments "
                "cannot be edited here; reject it with the changes to make"
            )
        if not request.editable:
            return f"{request.tool} does not let a reviewer edit its arguments"
        if request.route.quorum > 1:
            return (
                f"this route needs {request.route.quorum} approvals and an edited call would "
                "need them all again; reject it with the changes to make"
            )
        try:
            agent, fingerprint = self.agents(request.agent)
        except CountersignError:
            return f"agent {request.agent} is not known here, so its call cannot be edited"
        tool = agent.editable_tool(request.tool)
        if tool is None:
            return f"agent {request.agent} does not let a reviewer edit {request.tool} now"
        if call_hash(fingerprint, tool.name, request.arguments) != request.call_hash:
            return "the agent changed since this call was asked, so it cannot be edited"
        return tool, agent, fingerprint

    async def _judge_again(
        self,
        request: ApprovalRequest,
        agent: EditableAgent,
        tool: EditableTool,
        arguments: dict[str, Any],
    ) -> str:
        """Why the policy will not have the edited call approved here; empty if it will."""
        context = {"run_id": request.run_id, "requested_by": request.requested_by or None}
        verdict = agent.judge_edit(tool.name, arguments, context)
        if verdict.permission is Permission.DENY:
            return f"the policy denies the edited call ({verdict.reason})"
        if verdict.permission is Permission.ALLOW:
            return ""  # it would not even need approval
        if verdict.severity.rank > _rank(request.severity):
            return (
                f"the edited call needs {verdict.severity.value} severity, above this "
                f"request's {request.severity}; an edit cannot lower the bar"
            )
        route = await self.router.route(request.agent, request.tool, verdict.severity.value)
        if route.route_id != request.route.route_id:
            return (
                f"the edited call would go to route {route.route_id}, not this request's "
                f"{request.route.route_id}; an edit cannot change who decides"
            )
        return ""


def _rank(severity: str) -> int:
    # unknown: any known severity is above it, so an edit is refused
    return Severity.rank_of(severity, unknown=-1)
