"""Reading Web API arguments the way Slack does, for the local Slack sandbox.

Slack takes arguments from the query string and from a POST body that is either
``application/x-www-form-urlencoded`` (where ``blocks``, ``view``, ``attachments`` and
``metadata`` arrive as JSON-encoded strings) or ``application/json``. The token comes from
``Authorization: Bearer <token>`` or, in a form body or query string, a ``token`` argument.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

JSON_STRING_FIELDS = ("blocks", "attachments", "view", "metadata")
_FORM_TYPES = ("application/x-www-form-urlencoded", "text/plain")


class ParamsError(Exception):
    """The request body cannot be read; ``code`` is the Slack error string."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


async def read_params(request: web.Request) -> tuple[dict[str, Any], str | None]:
    """All arguments of a Web API call, and the token it carried (if any)."""
    params: dict[str, Any] = dict(request.query)
    token = params.pop("token", None)
    raw = await request.read() if request.can_read_body else b""
    if raw:
        if "Content-Type" not in request.headers:
            raise ParamsError("missing_post_type")
        charset = request.charset or "utf-8"
        if charset.lower() not in ("utf-8", "utf8", "iso-8859-1"):
            raise ParamsError("invalid_charset")
        text = raw.decode(charset, errors="replace")
        if request.content_type == "application/json":
            try:
                body = json.loads(text)
            except ValueError:
                raise ParamsError("invalid_json") from None
            if not isinstance(body, dict):
                raise ParamsError("invalid_json")
            params.update(body)
        elif request.content_type in _FORM_TYPES:
            form = dict(parse_qsl(text, keep_blank_values=True))
            token = form.pop("token", token)
            params.update(form)
        else:
            raise ParamsError("invalid_post_type")
    for name in JSON_STRING_FIELDS:
        value = params.get(name)
        if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
            # unparseable JSON stays a string, which the method then rejects as invalid
            with contextlib.suppress(ValueError):
                params[name] = json.loads(value)
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        token = header[7:].strip()
    return params, token


def as_str(value: Any) -> str:
    """A scalar argument as Slack sees it: missing or null is the empty string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return as_str(value).strip().lower() in ("true", "1", "yes")
