"""OpenAIChatModel against a real local aiohttp server speaking the Chat Completions format."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agent_host.errors import ConfigurationError, ModelError
from agent_host.llm.openai_compat import DEFAULT_BASE_URL, OpenAIChatModel, model_from_settings
from agent_host.runtime import strict_json
from agent_host.runtime.messages import Message, ToolCall, ToolSpec
from agent_host.runtime.models.base import allow_model_requests
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Runner, Succeeded
from agent_host.runtime.tools import tool
from agent_host.settings import ModelSettings, load_settings
from tests.support.agents import registry_of
from tests.support.paths import PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "examples" / "openai_compatible_agent.py"

Handler = Callable[[web.Request, int], Awaitable[web.StreamResponse]]


class FakeEndpoint:
    """A /v1/chat/completions server whose behaviour per attempt is set by each test."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.handler: Handler = lambda request, attempt: _ok(text_reply("hi"))
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.headers.append(dict(request.headers))
        return await self.handler(request, len(self.bodies))

    @property
    def attempts(self) -> int:
        return len(self.bodies)


async def _ok(payload: dict[str, Any]) -> web.StreamResponse:
    return web.json_response(payload)


def text_reply(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[FakeEndpoint, str]]:
    fake = FakeEndpoint()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield fake, str(server.make_url("/v1"))
    finally:
        fake.release.set()
        await server.close()


@pytest.fixture
async def make_model() -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    models: list[OpenAIChatModel] = []

    def make(base_url: str, **kwargs: Any) -> OpenAIChatModel:
        kwargs = {"timeout": 2.0, "max_retries": 2, "backoff": 0.001, **kwargs}
        model = OpenAIChatModel("test-model", base_url, "sk-test", **kwargs)
        models.append(model)
        return model

    yield make
    for model in models:
        await model.close()


HELLO = [Message(role="user", content="hello")]


class _AnyJsonString:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and isinstance(json.loads(other), dict)


ANY_JSON: Any = _AnyJsonString()


async def test_tool_call_reply_is_parsed_and_request_has_wire_shape(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint
    reply = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "send", "arguments": "{not json"},
                        },
                    ],
                }
            }
        ]
    }
    fake.handler = lambda request, attempt: _ok(reply)
    messages = [
        Message(role="system", content="be careful"),
        Message(role="user", content="find x"),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="call_0", name="lookup", arguments={"q": "y"})],
        ),
        Message(role="tool", content="y found", tool_call_id="call_0", name="lookup"),
    ]
    tools = [
        ToolSpec(
            name="lookup",
            description="Look a thing up.",
            parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        )
    ]
    with allow_model_requests(True):
        response = await make_model(url).respond(messages, tools)

    assert response.text == ""
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_1", "lookup", '{"q": "x"}'),
        ("call_2", "send", "{not json"),  # left raw: the runner validates
    ]
    assert fake.attempts == 1
    assert fake.headers[0]["Authorization"] == "Bearer sk-test"
    body = fake.bodies[0]
    assert body["model"] == "test-model"
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a thing up.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    wire = body["messages"]
    assert wire[0] == {"role": "system", "content": "be careful"}
    assert wire[1] == {"role": "user", "content": "find x"}
    assert wire[2]["role"] == "assistant"
    assert wire[2]["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": ANY_JSON}}
    ]
    assert json.loads(wire[2]["tool_calls"][0]["function"]["arguments"]) == {"q": "y"}
    assert wire[3] == {"role": "tool", "content": "y found", "tool_call_id": "call_0"}


async def test_plain_text_reply(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint
    fake.handler = lambda request, attempt: _ok(text_reply("all done"))
    with allow_model_requests(True):
        response = await make_model(url).respond(HELLO, [])
    assert response.text == "all done"
    assert response.tool_calls == []
    assert "tools" not in fake.bodies[0]


async def test_429_honours_retry_after_then_succeeds(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        if attempt == 1:
            return web.Response(status=429, text="slow down", headers={"Retry-After": "0.2"})
        return web.json_response(text_reply("ok"))

    fake.handler = handler
    started = time.monotonic()
    with allow_model_requests(True):
        response = await make_model(url, backoff=0.001).respond(HELLO, [])
    assert response.text == "ok"
    assert fake.attempts == 2
    assert time.monotonic() - started >= 0.2  # waited Retry-After, not the tiny backoff


async def test_retry_after_is_capped(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        if attempt == 1:
            return web.Response(status=429, headers={"Retry-After": "3600"})
        return web.json_response(text_reply("ok"))

    fake.handler = handler
    model = make_model(url)
    model.max_retry_after = 0.01
    with allow_model_requests(True):
        assert (await model.respond(HELLO, [])).text == "ok"
    assert fake.attempts == 2


async def test_500_then_success(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        if attempt == 1:
            return web.Response(status=500, text="boom")
        return web.json_response(text_reply("recovered"))

    fake.handler = handler
    with allow_model_requests(True):
        response = await make_model(url).respond(HELLO, [])
    assert response.text == "recovered"
    assert fake.attempts == 2


async def test_persistent_500_gives_up_with_status_and_excerpt(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        return web.Response(status=503, text="upstream overloaded")

    fake.handler = handler
    with allow_model_requests(True), pytest.raises(ModelError) as info:
        await make_model(url, max_retries=2).respond(HELLO, [])
    assert fake.attempts == 3
    assert "503" in str(info.value)
    assert "upstream overloaded" in str(info.value)


async def test_timeout_retries_then_fails(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        await asyncio.wait_for(fake.release.wait(), timeout=2)
        return web.json_response(text_reply("too late"))

    fake.handler = handler
    with allow_model_requests(True), pytest.raises(ModelError, match=r"timed out after 0\.1s"):
        await make_model(url, timeout=0.1, max_retries=1).respond(HELLO, [])
    assert fake.attempts == 2


def with_call(call_id: str, name: str, content: str = "") -> str:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
    return json.dumps({"choices": [{"message": {"content": content, "tool_calls": [call]}}]})


@pytest.mark.parametrize(
    "body",
    [
        "this is not json",
        json.dumps({"id": "x", "object": "chat.completion"}),
        with_call("c1", "read\udc80"),
        with_call("\udfff", "read"),
        with_call("c1", "read", content="hi \ud800"),
        "[" * 5000 + "]" * 5000,
    ],
    ids=["not-json", "no-choices", "name-not-text", "id-not-text", "content-not-text", "deep"],
)
async def test_malformed_reply(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel], body: str
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        return web.Response(status=200, text=body, content_type="application/json")

    fake.handler = handler
    with allow_model_requests(True), pytest.raises(ModelError, match="malformed"):
        await make_model(url).respond(HELLO, [])
    assert fake.attempts == 1


async def test_bad_tool_calls_shape_is_malformed(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint
    reply = {"choices": [{"message": {"content": None, "tool_calls": [{"id": "c1"}]}}]}
    fake.handler = lambda request, attempt: _ok(reply)
    with allow_model_requests(True), pytest.raises(ModelError, match="malformed"):
        await make_model(url).respond(HELLO, [])


async def test_401_fails_at_once(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        return web.Response(status=401, text='{"error": "invalid api key"}')

    fake.handler = handler
    with allow_model_requests(True), pytest.raises(ModelError) as info:
        await make_model(url, max_retries=3).respond(HELLO, [])
    assert fake.attempts == 1
    assert "401" in str(info.value)
    assert "OPENAI_API_KEY" in str(info.value)


async def test_forbidden_requests_never_reach_the_server(
    endpoint: tuple[FakeEndpoint, str], make_model: Callable[..., OpenAIChatModel]
) -> None:
    fake, url = endpoint
    with allow_model_requests(False), pytest.raises(ModelError, match="disabled"):
        await make_model(url).respond(HELLO, [])
    assert fake.attempts == 0


async def test_connection_refused_retries_then_fails(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    server = TestServer(web.Application(), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/v1"))
    await server.close()  # nothing listens there any more
    with allow_model_requests(True), pytest.raises(ModelError, match="connection failed"):
        await make_model(url, max_retries=1).respond(HELLO, [])


def model_settings(**env: str) -> ModelSettings:
    return load_settings(env, ModelSettings)


def test_model_from_settings() -> None:
    model = model_from_settings(model_settings(COUNTERSIGN_MODEL="gpt-x", OPENAI_API_KEY="sk"))
    assert model.name == "gpt-x"
    assert model.url == DEFAULT_BASE_URL + "/chat/completions"
    local = model_from_settings(
        model_settings(COUNTERSIGN_MODEL="llama", OPENAI_BASE_URL="http://127.0.0.1:11434/v1/")
    )
    assert local.url == "http://127.0.0.1:11434/v1/chat/completions"


@pytest.mark.parametrize("env", [{}, {"OPENAI_API_KEY": "sk"}, {"COUNTERSIGN_MODEL": "  "}])
def test_an_unset_model_names_the_variables_to_set(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        model_from_settings(model_settings(**env))
    for variable in ("COUNTERSIGN_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        assert variable in str(info.value)


def test_a_base_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="is not an http:// or https:// URL"):
        model_from_settings(
            model_settings(COUNTERSIGN_MODEL="m", OPENAI_BASE_URL="127.0.0.1:11434")
        )


def tool_call_reply(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    call = {"id": call_id, "type": "function", "function": function}
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}


async def run_example(env: dict[str, str]) -> tuple[int, str, str]:
    """examples/openai_compatible_agent.py as a user runs it, with only `env` configured."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("COUNTERSIGN_", "OPENAI_"))}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "refund order 123",
        env={**base, "PYTHONPATH": str(PROJECT_ROOT), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_the_example_agent_asks_before_its_refund(
    endpoint: tuple[FakeEndpoint, str],
) -> None:
    fake, url = endpoint
    replies = [
        tool_call_reply("m1", "lookup_order", {"order_id": "123"}),
        tool_call_reply("m2", "issue_refund", {"order_id": "123", "amount": 42.5}),
    ]

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        return web.json_response(replies[attempt - 1])

    fake.handler = handler
    env = {"COUNTERSIGN_MODEL": "local-model", "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-x"}
    code, out, err = await run_example(env)

    assert code == 0, err
    assert 'waiting for approval: issue_refund {"order_id": "123", "amount": 42.5}' in out
    assert fake.attempts == 2
    assert fake.bodies[0]["model"] == "local-model"
    assert fake.headers[0]["Authorization"] == "Bearer sk-x"
    looked_up = fake.bodies[1]["messages"][-1]
    assert looked_up["role"] == "tool" and json.loads(looked_up["content"])["amount"] == 42.5
    assert "Unclosed" not in err and "Traceback" not in err


async def test_the_example_without_a_model_says_which_variables_to_set() -> None:
    code, out, err = await run_example({})
    assert code == 2, (out, err)
    assert "COUNTERSIGN_MODEL is unset" in err and "OPENAI_API_KEY" in err
    assert "Traceback" not in err


# A reply whose refund amount is NaN or ±Infinity: as a JSON text in `arguments` (what
# OpenAI-compatible servers send) or bare in the reply body (what json.dumps writes); or
# that no reviewer could be shown, or no parser could take: nested past MAX_DEPTH (as a
# text, or bare in the reply, even past what Python could save), a lone surrogate, or an
# integer longer than Python reads. Each is an invalid call the model is told about.
BAD_ARGUMENTS_REPLIES = {
    "nan-in-arguments-text": ('"{\\"amount\\": NaN}"', "finite number"),
    "infinity-in-arguments-text": ('"{\\"amount\\": Infinity}"', "finite number"),
    "minus-infinity-in-arguments-text": ('"{\\"amount\\": -Infinity}"', "finite number"),
    "overflow-in-arguments-text": ('"{\\"amount\\": 1e999}"', "finite number"),
    "string-nan-in-arguments-text": ('"{\\"amount\\": \\"nan\\"}"', "finite number"),
    "bare-nan-in-reply": ('{"amount": NaN}', "finite number"),
    "bare-infinity-in-reply": ('{"amount": Infinity}', "finite number"),
    "deep-in-arguments-text": ('"{\\"amount\\": ' + "[" * 40 + "]" * 40 + '}"', "nested"),
    "deep-bare-in-reply": ('{"amount": ' + "[" * 300 + "]" * 300 + "}", "nested"),
    "lone-surrogate-in-arguments-text": ('"{\\"amount\\": \\"\\\\ud800\\"}"', "surrogate"),
    "huge-integer-in-arguments-text": ('"{\\"amount\\": ' + "9" * 5000 + '}"', "digits"),
}


@pytest.mark.parametrize(
    ("arguments", "says"), list(BAD_ARGUMENTS_REPLIES.values()), ids=list(BAD_ARGUMENTS_REPLIES)
)
async def test_non_finite_or_unreadable_arguments_are_invalid_never_gated_or_run(
    endpoint: tuple[FakeEndpoint, str],
    make_model: Callable[..., OpenAIChatModel],
    arguments: str,
    says: str,
) -> None:
    fake, url = endpoint
    refunds: list[float] = []

    def refund(amount: float) -> str:
        """Refund an amount."""
        refunds.append(amount)
        return f"refunded {amount}"

    # the policy a limit sets: NaN compares false with it, so it would ALLOW
    limited = tool(permission=lambda args, ctx: Permission.ASK if args["amount"] > 100 else True)
    sent: list[str] = []

    async def handler(request: web.Request, attempt: int) -> web.StreamResponse:
        sent.append(await request.text())
        if attempt > 1:
            return await _ok(text_reply("gave up"))
        call = '{"id": "c1", "type": "function", "function": {"name": "refund", "arguments": %s}}'
        body = '{"choices": [{"message": {"role": "assistant", "tool_calls": [%s]}}]}'
        return web.Response(text=body % (call % arguments), content_type="application/json")

    fake.handler = handler
    registry = registry_of("payer", [limited(refund)], make_model(url))
    with allow_model_requests(True):
        outcome = await Runner(registry).run("payer", "refund order 123")

    assert isinstance(outcome, Succeeded), outcome  # never paused for a reviewer
    (record,) = outcome.state.calls
    assert (record.gate, record.outcome) == ("invalid", "invalid")
    assert record.result is not None and says in record.result, record.result
    assert refunds == []
    # the model was told, in a request that is JSON any parser reads
    assert len(sent) == 2
    told = strict_json.loads(sent[1])
    assert any(m.get("content") == record.result for m in told["messages"])
