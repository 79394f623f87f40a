"""A small, strict check of arguments against a function tool's JSON schema.

The OpenAI Agents SDK holds a `FunctionTool`'s parameters only as `params_json_schema`, so a
reviewer's edit is checked against it here. It knows what function tools' schemas use
(types, `properties`, `required`, `additionalProperties`, `items`, `enum`, `const`,
`anyOf`/`oneOf`, local `$ref`, numeric and length bounds, `pattern`); a schema keyword it
does not know fails the check (closed), rather than letting an unchecked edit through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_host.errors import InvalidArguments

__all__ = ["check_arguments"]

_ANNOTATIONS = {
    "title",
    "description",
    "default",
    "examples",
    "format",
    "$defs",
    "definitions",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
}
_CHECKED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "$ref",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
}
_TYPES: dict[str, Any] = {
    "string": str,
    "boolean": bool,
    "object": Mapping,
    "array": list,
    "null": type(None),
}


def check_arguments(tool: str, schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """`arguments` if they fit `schema`; raises InvalidArguments with the first problem of
    each top-level argument (by name, "" for the arguments as a whole)."""
    problems: dict[str, str] = {}
    for path, message in _problems(arguments, schema, schema, ()):
        where = str(path[0]) if path else ""
        inner = ".".join(str(p) for p in path[1:])
        problems.setdefault(where, f"{inner}: {message}" if inner else message)
    if problems:
        text = "; ".join(f"{name or '(arguments)'}: {msg}" for name, msg in problems.items())
        raise InvalidArguments(f"invalid arguments for {tool}: {text}", problems)
    return dict(arguments)


Problem = tuple[tuple[Any, ...], str]


def _problems(
    value: Any, schema: Any, root: Mapping[str, Any], path: tuple[Any, ...]
) -> list[Problem]:
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [(path, "no value is allowed here")]
    if not isinstance(schema, Mapping):
        return [(path, "the tool's schema cannot be checked here")]
    if unknown := sorted(set(schema) - _ANNOTATIONS - _CHECKED):
        return [(path, f"the tool's schema uses {', '.join(unknown)}, which is not checked here")]
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        if target is None:
            return [(path, f"the tool's schema refers to {schema['$ref']}, which is not in it")]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        found = _problems(value, target, root, path)
        return found or (_problems(value, rest, root, path) if rest else [])
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            options = schema[keyword]
            matching = [o for o in options if not _problems(value, o, root, path)]
            if not matching or (keyword == "oneOf" and len(matching) > 1):
                return [(path, "does not match any of the allowed forms")]
    if "type" in schema and not _is_type(value, schema["type"]):
        return [(path, f"must be of type {_type_words(schema['type'])}")]
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return [(path, f"must be one of {allowed}")]
    if "const" in schema and not _same(value, schema["const"]):
        return [(path, f"must be {schema['const']!r}")]
    if _is_number(value):
        if (low := schema.get("minimum")) is not None and value < low:
            return [(path, f"must be at least {low}")]
        if (high := schema.get("maximum")) is not None and value > high:
            return [(path, f"must be at most {high}")]
        if (low := schema.get("exclusiveMinimum")) is not None and value <= low:
            return [(path, f"must be more than {low}")]
        if (high := schema.get("exclusiveMaximum")) is not None and value >= high:
            return [(path, f"must be less than {high}")]
    if isinstance(value, str):
        if (least := schema.get("minLength")) is not None and len(value) < least:
            return [(path, f"must be at least {least} characters")]
        if (most := schema.get("maxLength")) is not None and len(value) > most:
            return [(path, f"must be at most {most} characters")]
        if (pattern := schema.get("pattern")) is not None and not re.search(pattern, value):
            return [(path, f"must match {pattern}")]
    if isinstance(value, list):
        return _array_problems(value, schema, root, path)
    if isinstance(value, Mapping):
        return _object_problems(value, schema, root, path)
    return []


def _array_problems(
    value: list[Any], schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple[Any, ...]
) -> list[Problem]:
    if (least := schema.get("minItems")) is not None and len(value) < least:
        return [(path, f"must have at least {least} items")]
    if (most := schema.get("maxItems")) is not None and len(value) > most:
        return [(path, f"must have at most {most} items")]
    items = schema.get("items")
    if items is None:
        return []
    return [p for i, item in enumerate(value) for p in _problems(item, items, root, (*path, i))]


def _object_problems(
    value: Mapping[str, Any],
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    path: tuple[Any, ...],
) -> list[Problem]:
    properties = schema.get("properties") or {}
    found: list[Problem] = [
        ((*path, name), "is required") for name in schema.get("required") or () if name not in value
    ]
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found += _problems(item, properties[name], root, (*path, name))
        elif extra is False:
            found.append(((*path, name), "is not an argument of this tool"))
        elif isinstance(extra, Mapping):
            found += _problems(item, extra, root, (*path, name))
    return found


def _resolve(ref: Any, root: Mapping[str, Any]) -> Any:
    if not (isinstance(ref, str) and ref.startswith("#")):
        return None
    target: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        if not isinstance(target, Mapping) or part not in target:
            return None
        target = target[part]
    return target


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: Any, expected: Any) -> bool:
    if isinstance(expected, list):
        return any(_is_type(value, one) for one in expected)
    if expected == "integer":
        return _is_number(value) and float(value).is_integer()
    if expected == "number":
        return _is_number(value)
    kind = _TYPES.get(str(expected))
    if kind is None:
        return False  # an unknown type: fail closed
    if kind is bool:
        return isinstance(value, bool)
    return isinstance(value, kind)


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: True is not 1, 1 is 1.0."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    return bool(value == allowed)


def _type_words(expected: Any) -> str:
    return " or ".join(expected) if isinstance(expected, list) else str(expected)
