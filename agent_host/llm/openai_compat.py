"""A Model backed by any OpenAI-compatible Chat Completions endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import aiohttp

from agent_host.errors import ConfigurationError, ModelError
from agent_host.runtime.messages import Message, ModelResponse, ToolCall, ToolSpec
from agent_host.runtime.models.base import check_allow_model_requests
from agent_host.runtime.strict_json import non_finite_path, not_text_path, too_deep_path
from agent_host.settings import ModelSettings

__all__ = ["DEFAULT_BASE_URL", "OpenAIChatModel", "model_from_settings"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_EXCERPT = 200


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT else flat[:_EXCERPT] + "..."


def _message_to_wire(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id
        return wire
    if message.name is not None:
        wire["name"] = message.name
    if message.role == "assistant" and message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(call.arguments),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def _tool_to_wire(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _parse_reply(text: str) -> ModelResponse:
    """Turn a 200 reply body into a ModelResponse, or raise ModelError saying what is wrong."""

    def malformed(what: str) -> ModelError:
        return ModelError(
            f"the model endpoint's reply was malformed ({what}): {_excerpt(text)!r}; "
            "check that OPENAI_BASE_URL points at an OpenAI-compatible Chat Completions API"
        )

    try:
        body = json.loads(text)
    except RecursionError:
        raise malformed("nested too deeply to read") from None
    except ValueError:
        raise malformed("not JSON") from None
    if (where := not_text_path(body)) is not None:  # it could be neither shown nor stored
        raise malformed(f"{where} holds a lone UTF-16 surrogate, which is not text")
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise malformed("no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise malformed("choices[0].message missing")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise malformed("message content is not a string")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise malformed("tool_calls is not a list")
    calls: list[ToolCall] = []
    for raw in raw_calls:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise malformed("a tool call has no function")
        call_id, name = raw.get("id"), function.get("name")
        arguments = function.get("arguments", "")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise malformed("a tool call lacks a string id or name")
        if not isinstance(arguments, str | dict):
            raise malformed("tool call arguments are neither a string nor an object")
        if isinstance(arguments, dict) and (
            non_finite_path(arguments) is not None or too_deep_path(arguments) is not None
        ):
            # Bare NaN/Infinity, or nesting no reviewer could read, in the reply: kept as
            # the text the model sent, which the tool's validation refuses (an `invalid`
            # call the model is told about), and which goes back in the transcript as a
            # JSON string, not as invalid JSON.
            try:
                arguments = json.dumps(arguments)
            except RecursionError:
                raise malformed("tool call arguments are nested too deeply") from None
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return ModelResponse(text=content or "", tool_calls=calls)


class OpenAIChatModel:
    """POSTs the transcript to `{base_url}/chat/completions`, retrying transient failures."""

    max_retry_after: float = 30.0  # longest Retry-After we are willing to wait, in seconds

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 60,
        max_retries: int = 3,
        backoff: float = 0.5,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.name = model
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self._session = session
        self._owns_session = session is None

    async def close(self) -> None:
        """Close the session this model created (a session passed in is left to its owner)."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_message_to_wire(m) for m in messages],
        }
        if tools:
            body["tools"] = [_tool_to_wire(t) for t in tools]
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = json.dumps(body)
        reason = cause = "no attempt was made (max_retries < 0)"
        for attempt in range(self.max_retries + 1):
            check_allow_model_requests()
            if self._session is None:
                self._session = aiohttp.ClientSession()
            delay = self.backoff * 2**attempt
            try:
                async with self._session.post(
                    self.url,
                    data=payload,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                ) as resp:
                    status, text = resp.status, await resp.text()
                    retry_after = resp.headers.get("Retry-After")
            except TimeoutError:
                reason = cause = f"timed out after {self.timeout:g}s"
            except aiohttp.ClientError as exc:
                reason = f"connection failed ({type(exc).__name__})"
                cause = f"{reason}: {exc}"
            else:
                if 200 <= status < 300:
                    return _parse_reply(text)
                reason = f"HTTP {status}"
                cause = f"{reason}: {_excerpt(text)!r}"
                if status != 429 and status < 500:
                    hint = " check OPENAI_API_KEY;" if status in (401, 403) else ""
                    raise ModelError(
                        f"the model endpoint {self.url} refused the request with {cause};{hint} "
                        f"check the model name {self.model!r} and the endpoint"
                    )
                if status == 429 and retry_after is not None:
                    with contextlib.suppress(ValueError):
                        delay = min(max(float(retry_after), 0.0), self.max_retry_after)
            if attempt < self.max_retries:
                logger.warning(
                    "model request to %s failed (%s), retry %d/%d in %.2fs",
                    self.url,
                    reason,
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)
        raise ModelError(
            f"the model endpoint {self.url} failed after {self.max_retries + 1} attempts; "
            f"last: {cause}. Check that the endpoint is up, or raise the timeout/retries"
        )


def model_from_settings(settings: ModelSettings) -> OpenAIChatModel:
    """The model COUNTERSIGN_MODEL names, at OPENAI_BASE_URL (default: OpenAI's API) with
    OPENAI_API_KEY. An agent factory calls this, so an agent without a configured model
    stops start-up with this message instead of failing at its first run."""
    if not settings.model.strip():
        raise ConfigurationError(
            "COUNTERSIGN_MODEL is unset, and an agent uses the OpenAI-compatible model: set "
            "COUNTERSIGN_MODEL to the model's name (e.g. gpt-4o-mini) and OPENAI_API_KEY, or "
            "OPENAI_BASE_URL for a local OpenAI-compatible server (e.g. "
            "http://127.0.0.1:11434/v1) — see .env.example"
        )
    base_url = settings.openai_base_url.strip() or DEFAULT_BASE_URL
    if not base_url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"OPENAI_BASE_URL={base_url!r} is not an http:// or https:// URL "
            "(e.g. https://api.openai.com/v1)"
        )
    return OpenAIChatModel(settings.model.strip(), base_url, settings.openai_api_key or None)
