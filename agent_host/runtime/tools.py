"""Tools from typed Python functions (sync or async).

The JSON schema a model sees is derived from the signature with pydantic, and the model's
arguments are validated against it before the policy ever sees them. A parameter annotated
`ToolContext` is not shown to the model: it receives the run id and the call id, which is
the idempotency key a tool hands to whatever it calls.

`editable` (True, or the names of some arguments) lets a reviewer change those arguments
before approving a gated call ("Edit & approve"); the edited call is validated and judged
again like the model's (`agent_host.approvals.edits`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agent_host.errors import InvalidArguments, ToolDefinitionError
from agent_host.runtime import strict_json
from agent_host.runtime.call_key import key_of
from agent_host.runtime.fingerprint import canonical_json
from agent_host.runtime.policy import (
    Permission,
    PermissionFunction,
    Severity,
    Verdict,
    describe_permission,
    to_verdict,
)

__all__ = ["InvalidArguments", "Tool", "ToolContext", "tool"]


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    call_id: str
    agent: str
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def idempotency_key(self) -> str:
        """Stable for this call across retries and resumes: pass it to payment APIs etc."""
        return key_of(self.run_id, self.call_id)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    function: Callable[..., Any]
    arguments_model: type[BaseModel]
    permission: Permission | PermissionFunction = Permission.ALLOW
    reason: str = ""  # shown to the reviewer when this tool asks
    severity: str = "medium"
    idempotent: bool = False  # safe to re-run when its outcome is unknown after a crash
    allow_always: bool = True
    context_parameter: str | None = None
    editable: tuple[str, ...] = ()  # arguments a reviewer may change before approving

    def schema(self) -> dict[str, Any]:
        """The arguments' JSON schema: derived once (pydantic's generation costs about a
        millisecond, and every model turn and fingerprint asks for it), handed out as a
        fresh copy each time so no caller can alter another's."""
        schema: dict[str, Any] = json.loads(self._schema_json)
        return schema

    @functools.cached_property
    def _schema_json(self) -> str:
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        return json.dumps(schema)

    @functools.cached_property
    def _has_sets(self) -> bool:
        """Whether some argument holds a set (whose JSON form `validate` puts in order)."""
        return '"uniqueItems": true' in self._schema_json

    def describe_policy(self) -> str:
        return describe_permission(self.permission)

    def validate(self, raw: Mapping[str, Any] | str) -> dict[str, Any]:
        """Parse and validate the model's arguments; raises InvalidArguments with a clear text."""
        if isinstance(raw, str):
            try:
                raw = strict_json.loads(raw or "{}")
            except json.JSONDecodeError as exc:
                raise InvalidArguments(f"arguments are not valid JSON: {exc.msg}") from exc
            except ValueError as exc:  # NaN, too deep, not text, an integer too long...
                raise InvalidArguments(f"arguments are not valid JSON: {exc}") from exc
        if not isinstance(raw, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        _refuse_unfit(self.name, raw)  # parsed elsewhere: a model's reply, Python code
        try:
            model = self.arguments_model.model_validate(dict(raw))
        except ValidationError as exc:
            errors = exc.errors()
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in errors
            )
            by_argument: dict[str, str] = {}
            for e in errors:  # the first problem of each top-level argument
                where = str(e["loc"][0]) if e["loc"] else ""
                inner = ".".join(str(p) for p in e["loc"][1:])
                by_argument.setdefault(where, f"{inner}: {e['msg']}" if inner else e["msg"])
            raise InvalidArguments(
                f"invalid arguments for {self.name}: {problems}", by_argument
            ) from exc
        # The JSON form is what the policy judges, the reviewer sees and `invoke` runs
        # with: it must give the tool the very values validated (an alias, a secret, an
        # excluded field would not), or the call is refused.
        arguments = model.model_dump(mode="json", by_alias=True)
        if self._has_sets:
            arguments = _sets_in_order(arguments, model)
        _refuse_unfit(self.name, arguments)  # "nan" or "inf" given to a float field
        try:
            same = self.arguments_model.model_validate(arguments) == model
        except ValidationError:
            same = False
        if not same:
            raise InvalidArguments(
                f"invalid arguments for {self.name}: their JSON form would give the tool other "
                "values than these (a secret, an excluded field), so no one could see what "
                "would run; the tool's parameters must be plain JSON values"
            )
        return arguments

    def judge(self, arguments: Mapping[str, Any], context: Mapping[str, Any]) -> Verdict:
        """The tool's own permission for this call (operator rules may override it)."""
        reason = self.reason or f"{self.name} requires approval"
        if self.permission is Permission.DENY:
            reason = self.reason or "denied by policy"
        severity = Severity(self.severity)
        result: Verdict | Permission | bool = (
            self.permission
            if isinstance(self.permission, Permission)
            else self.permission(arguments, context)
        )
        verdict = to_verdict(result, reason, severity)
        if not self.allow_always:
            verdict = replace(verdict, allow_always=False)
        return verdict

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        # Validated again so the function gets its declared types (models, Decimal, ...),
        # not the JSON form the checkpoint keeps.
        model = self.arguments_model.model_validate(dict(arguments))
        kwargs = {name: getattr(model, name) for name in type(model).model_fields}
        if self.context_parameter:
            kwargs[self.context_parameter] = ctx
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**kwargs)
        # Sync tools run in a thread so a slow one never blocks the event loop.
        return await asyncio.to_thread(self.function, **kwargs)


def _sets_in_order(as_json: Any, value: Any) -> Any:
    """`as_json` (`value`'s JSON form, written by pydantic) with each list that `value` holds
    as a set sorted by its items' canonical JSON. A set has no order, and Python's differs
    from process to process (string hashing): a call hashed and shown by one process would
    not be the call another checks an approval or an edit against. Walked beside the
    validated value itself (models by their fields' JSON names, dataclasses by their
    fields', dicts and lists in their order); where the two part (a custom serializer),
    the JSON is left as it is, as are sets inside a set's items."""
    if isinstance(value, set | frozenset) and isinstance(as_json, list):
        return sorted(as_json, key=canonical_json)
    if isinstance(as_json, dict) and isinstance(value, BaseModel):
        names = {
            info.serialization_alias or info.alias or name: name
            for name, info in type(value).model_fields.items()
        }
        return {
            key: _sets_in_order(item, getattr(value, names[key])) if key in names else item
            for key, item in as_json.items()
        }
    if isinstance(as_json, dict) and dataclasses.is_dataclass(value):
        return {
            key: _sets_in_order(item, getattr(value, key)) if hasattr(value, key) else item
            for key, item in as_json.items()
        }
    if isinstance(as_json, dict) and isinstance(value, Mapping) and len(value) == len(as_json):
        pairs = zip(as_json.items(), value.values(), strict=True)  # (written in its order)
        return {key: _sets_in_order(item, inner) for (key, item), inner in pairs}
    if isinstance(as_json, list) and isinstance(value, list | tuple) and len(value) == len(as_json):
        return [_sets_in_order(item, inner) for item, inner in zip(as_json, value, strict=True)]
    return as_json


def _refuse_unfit(tool_name: str, arguments: Mapping[str, Any]) -> None:
    """NaN compares false with every limit a policy sets, and ±Infinity is not JSON; past
    MAX_DEPTH levels of nesting, arguments cannot be shown to a reviewer."""
    if (deep := strict_json.too_deep_path(dict(arguments))) is not None:
        raise InvalidArguments(
            f"invalid arguments for {tool_name}: {strict_json.too_deep_text(deep)}",
            {deep.split(".", 1)[0].split("[", 1)[0]: "nested too deeply"},
        )
    if (where := strict_json.non_finite_path(dict(arguments))) is not None:
        top = where.split(".", 1)[0].split("[", 1)[0]
        raise InvalidArguments(
            f"invalid arguments for {tool_name}: {where} is NaN or Infinity, "
            "which is not a number in JSON; send a finite number",
            {top: "NaN or Infinity is not a number in JSON; enter a finite number"},
        )


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission | PermissionFunction = Permission.ALLOW,
    reason: str = "",
    severity: str = "medium",
    idempotent: bool = False,
    allow_always: bool = True,
    editable: bool | Sequence[str] = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission | PermissionFunction = Permission.ALLOW,
    reason: str = "",
    severity: str = "medium",
    idempotent: bool = False,
    allow_always: bool = True,
    editable: bool | Sequence[str] = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a Tool: `@tool` or `@tool(permission=Permission.ASK, ...)`.

    `editable=True` lets a reviewer edit every argument before approving, a list of names
    only those."""

    def build(fn: Callable[..., Any]) -> Tool:
        if severity not in Severity.__members__.values():
            known = ", ".join(s.value for s in Severity)
            raise ToolDefinitionError(f"{fn.__name__}: severity {severity!r} is not one of {known}")
        model, context_parameter = _arguments_model(fn)
        return Tool(
            name=name or fn.__name__,
            description=description or inspect.getdoc(fn) or fn.__name__,
            function=fn,
            arguments_model=model,
            permission=permission,
            reason=reason,
            severity=severity,
            idempotent=idempotent,
            allow_always=allow_always,
            context_parameter=context_parameter,
            editable=editable_names(fn.__name__, tuple(model.model_fields), editable),
        )

    return build(function) if function is not None else build


def editable_names(
    tool: str,
    arguments: Sequence[str],
    editable: bool | Sequence[str],
    *,
    error: type[Exception] = ToolDefinitionError,
) -> tuple[str, ...]:
    """The argument names `editable` stands for (True: all of them), checked to exist."""
    if isinstance(editable, bool):
        return tuple(arguments) if editable else ()
    if isinstance(editable, str):  # a lone name would otherwise be read letter by letter
        editable = [editable]
    if unknown := [name for name in editable if name not in arguments]:
        raise error(
            f"{tool}: editable names {', '.join(map(repr, unknown))}, which are not its "
            f"arguments ({', '.join(arguments) or 'none'}); name only its own arguments"
        )
    return tuple(dict.fromkeys(editable))


def _arguments_model(fn: Callable[..., Any | Awaitable[Any]]) -> tuple[type[BaseModel], str | None]:
    try:
        hints = get_type_hints(fn, include_extras=True)  # (Annotated constraints kept)
    except Exception as exc:
        raise ToolDefinitionError(f"cannot read the type hints of {fn!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(fn).parameters.values():
        annotation = hints.get(parameter.name)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"{fn.__name__}: *args/**kwargs cannot become a tool schema")
        if annotation is None:
            raise ToolDefinitionError(
                f"{fn.__name__}: parameter {parameter.name!r} needs a type hint to become a tool"
            )
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    model = create_model(
        f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model, context_parameter
