"""Tools from typed functions: schemas, ToolContext, argument validation inside a run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, SecretStr

from agent_host import idempotency_key
from agent_host.errors import ToolDefinitionError
from agent_host.runtime.messages import ModelResponse, ToolCall
from agent_host.runtime.models.scripted import call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.runner import Runner, Succeeded
from agent_host.runtime.tools import InvalidArguments, Tool, ToolContext, tool
from tests.support.agents import (
    Recorder,
    SpyModel,
    counting_tool,
    registry_of,
    scripted,
    tc,
    tool_messages,
)


def find_order(
    ctx: ToolContext, order_id: str, limit: int = 10, tags: list[str] | None = None
) -> dict[str, Any]:
    """Find an order by id."""
    return {"order_id": order_id, "limit": limit, "tags": tags, "call": ctx.call_id}


async def find_order_async(order_id: str, ctx: ToolContext, limit: int = 10) -> dict[str, Any]:
    """Find an order by id, asynchronously."""
    await asyncio.sleep(0)
    return {"order_id": order_id, "limit": limit, "call": ctx.call_id}


@pytest.mark.parametrize("fn", [find_order, find_order_async], ids=["sync", "async"])
def test_schema_is_derived_from_the_signature_and_hides_the_context(fn: Any) -> None:
    t = tool(fn)
    schema = t.schema()
    assert t.name == fn.__name__
    assert t.description.startswith("Find an order by id")
    assert t.context_parameter == "ctx"
    assert "ctx" not in schema["properties"]
    assert schema["properties"]["order_id"]["type"] == "string"
    assert schema["properties"]["limit"] == {"default": 10, "title": "Limit", "type": "integer"}
    assert schema["required"] == ["order_id"]
    assert schema["additionalProperties"] is False
    assert "title" not in schema


def test_decorator_options_override_name_and_description() -> None:
    t = tool(name="lookup", description="Look it up.", severity="high", idempotent=True)(find_order)
    assert (t.name, t.description, t.severity, t.idempotent) == (
        "lookup",
        "Look it up.",
        "high",
        True,
    )


def refund(amount: Annotated[float, Field(gt=0, le=500)], note: Annotated[str, "free"] = "") -> str:
    """Refund."""
    return f"refunded {amount}"


def test_constraints_declared_with_annotated_are_in_the_schema_and_enforced() -> None:
    """`Annotated[float, Field(gt=0, le=500)]` was read without its constraints: the model
    was not told them, and a call (or a reviewer's edit) of -5 or 900 was let through."""
    t = tool(refund)
    amount = t.schema()["properties"]["amount"]
    assert (amount["exclusiveMinimum"], amount["maximum"]) == (0, 500)
    for wrong, said in ((-5, "greater than 0"), (900, "less than or equal to 500")):
        with pytest.raises(InvalidArguments, match=said):
            t.validate({"amount": wrong})
    assert t.validate({"amount": 12.5}) == {"amount": 12.5, "note": ""}


def test_function_without_docstring_is_described_by_its_name() -> None:
    def bare(x: int) -> int:
        return x

    assert tool(bare).description == "bare"


def test_untyped_parameter_is_refused() -> None:
    def untyped(x, y: int) -> int:  # type: ignore[no-untyped-def]
        return y

    with pytest.raises(ToolDefinitionError, match=r"untyped: parameter 'x' needs a type hint"):
        tool(untyped)


@pytest.mark.parametrize("signature", ["*args: int", "**kwargs: int"])
def test_var_args_are_refused(signature: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def splat(a: int, {signature}) -> int:\n    return a", namespace)
    with pytest.raises(ToolDefinitionError, match=r"\*args/\*\*kwargs"):
        tool(namespace["splat"])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"order_id": "1"}, {"order_id": "1", "limit": 10, "tags": None}),
        ('{"order_id": "7", "limit": 3}', {"order_id": "7", "limit": 3, "tags": None}),
        ({"order_id": "1", "limit": "5"}, {"order_id": "1", "limit": 5, "tags": None}),
    ],
)
def test_validate_accepts_dicts_and_json_text_and_fills_defaults(
    raw: Any, expected: dict[str, Any]
) -> None:
    assert tool(find_order).validate(raw) == expected


def _nested_list(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"order_id": "1", "limit": "many"}, r"invalid arguments for find_order: limit: "),
        ({"limit": 3}, r"order_id: Field required"),
        ({"order_id": "1", "surprise": True}, r"surprise: Extra inputs are not permitted"),
        ('{"order_id": ', r"arguments are not valid JSON"),
        ('["order_id"]', r"arguments must be a JSON object"),
        ("", r"order_id: Field required"),  # an empty string means no arguments at all
        ('{"order_id": "1", "limit": NaN}', r"NaN is not a JSON number"),
        ('{"order_id": "1", "tags": [Infinity]}', r"Infinity is not a JSON number"),
        ({"order_id": "1", "limit": float("nan")}, r"limit is NaN or Infinity"),
        ({"order_id": "1", "tags": ["a", float("-inf")]}, r"tags\[1\] is NaN or Infinity"),
        ({"order_id": "1", "tags": _nested_list(32)}, r"nested more than 32 levels deep"),
        ('{"order_id": "1", "tags": ' + "[" * 5000 + "]" * 5000 + "}", r"nested too deeply"),
    ],
)
def test_validate_explains_what_is_wrong(raw: Any, message: str) -> None:
    with pytest.raises(InvalidArguments, match=message):
        tool(find_order).validate(raw)


BAD_ARGUMENTS = {
    "wrong_type": {"target": ["not", "a", "string"]},
    "missing_field": {},
    "extra_field": {"target": "a", "force": True},
    "not_json": '{"target": "a"',
}


LONE_SETTLED_TURN_BUG = (
    "BUG: agent_host/runtime/runner.py _advance only calls _settle_turn, the one place "
    "tool messages are appended, when the turn has an open call; a turn whose every call was "
    "settled while planning (invalid arguments, unknown tool, policy DENY) gets no tool "
    "messages at all, so the model never sees the explanation (and a real Chat Completions "
    "endpoint rejects an assistant tool_calls message with no tool replies)"
)


@pytest.mark.parametrize("bad", list(BAD_ARGUMENTS.values()), ids=list(BAD_ARGUMENTS))
async def test_bad_arguments_go_back_to_the_model_and_the_run_continues(bad: Any) -> None:
    rec = Recorder()
    spy = SpyModel(
        scripted(
            [
                ToolCall(id="call_0_1", name="touch", arguments=bad),
                tc("call_0_2", "touch", target="b"),
            ],
            [tc("call_1_1", "touch", target="a")],
            reply("fixed it"),
        )
    )
    outcome = await Runner(registry_of("fixer", [counting_tool(rec, "touch")], spy)).run(
        "fixer", "go"
    )

    assert isinstance(outcome, Succeeded) and outcome.output == "fixed it"
    bad_call = outcome.state.call("call_0_1")
    assert bad_call is not None
    assert (bad_call.gate, bad_call.outcome) == ("invalid", "invalid")
    assert bad_call.result is not None and "Fix the arguments" in bad_call.result
    assert rec.per_call_id() == {"call_0_2": 1, "call_1_1": 1}  # the invalid call never ran
    # the model's second turn saw the explanation as the tool result of its bad call
    assert spy.last_tool_messages() == {
        "call_0_1": bad_call.result,
        "call_0_2": "touch done: b",
        "call_1_1": "touch done: a",
    }
    assert spy.seen[1][-2].tool_call_id == "call_0_1"
    assert spy.seen[1][-2].content == bad_call.result


async def test_a_turn_of_only_bad_arguments_still_reaches_the_model() -> None:
    rec = Recorder()
    spy = SpyModel(
        scripted(
            [ToolCall(id="call_0_1", name="touch", arguments={"target": 42})],
            [tc("call_1_1", "touch", target="a")],
            reply("fixed it"),
        )
    )
    outcome = await Runner(registry_of("fixer", [counting_tool(rec, "touch")], spy)).run(
        "fixer", "go"
    )

    assert isinstance(outcome, Succeeded)
    assert outcome.state.calls[0].outcome == "invalid"
    assert rec.per_call_id() == {"call_1_1": 1}
    second_turn_tools = {m.tool_call_id: m.content for m in spy.seen[1] if m.role == "tool"}
    assert second_turn_tools == {"call_0_1": outcome.state.calls[0].result}


async def test_unknown_tool_goes_back_to_the_model_with_the_available_tools() -> None:
    rec = Recorder()
    spy = SpyModel(
        scripted(
            [tc("call_0_1", "teleport", target="moon"), tc("call_0_2", "poke", target="x")],
            reply("ok"),
        )
    )
    registry = registry_of("a", [counting_tool(rec, "touch"), counting_tool(rec, "poke")], spy)
    outcome = await Runner(registry).run("a", "go")

    assert isinstance(outcome, Succeeded)
    record = outcome.state.call("call_0_1")
    assert record is not None and (record.gate, record.outcome) == ("invalid", "invalid")
    assert spy.last_tool_messages() == {
        "call_0_1": "Unknown tool 'teleport'; available tools: touch, poke.",
        "call_0_2": "poke done: x",
    }
    assert rec.invocations == [("poke", "call_0_2", "x")]


async def test_a_turn_of_only_an_unknown_tool_still_reaches_the_model() -> None:
    spy = SpyModel(scripted([tc("c1", "teleport", target="moon")], reply("ok then")))
    outcome = await Runner(registry_of("a", [counting_tool(Recorder(), "touch")], spy)).run(
        "a", "go"
    )

    assert isinstance(outcome, Succeeded)
    assert tool_messages(outcome.state) == {
        "c1": "Unknown tool 'teleport'; available tools: touch."
    }


async def test_tool_receives_call_id_run_id_and_idempotency_key() -> None:
    seen: list[ToolContext] = []

    @tool
    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge."""
        seen.append(ctx)
        return f"charged {amount} with key {ctx.idempotency_key}"

    model = scripted([call("charge", amount=5)], reply("done"))
    outcome = await Runner(registry_of("payer", [charge], model)).run(
        "payer", "charge it", run_id="run_ctx", context={"tenant": "acme"}
    )

    assert isinstance(outcome, Succeeded)
    [ctx] = seen
    assert (ctx.run_id, ctx.call_id, ctx.agent) == ("run_ctx", "call_0_1", "payer")
    assert ctx.idempotency_key == "run_ctx:call_0_1"
    assert dict(ctx.context) == {"tenant": "acme"}
    assert tool_messages(outcome.state)["call_0_1"] == "charged 5 with key run_ctx:call_0_1"


async def test_a_tool_reads_the_same_key_with_idempotency_key_in_its_thread_or_on_the_loop() -> (
    None
):
    keys: list[str] = []

    @tool
    def charge(amount: int) -> str:  # sync: run in a thread
        """Charge."""
        keys.append(idempotency_key())
        return "charged"

    @tool
    async def notify(text: str) -> str:
        """Notify."""
        keys.append(idempotency_key())
        return "sent"

    model = scripted([call("charge", amount=5), call("notify", text="hi")], reply("done"))
    outcome = await Runner(registry_of("payer", [charge, notify], model)).run(
        "payer", "charge it", run_id="run_ctx"
    )

    assert isinstance(outcome, Succeeded)
    assert keys == ["run_ctx:call_0_1", "run_ctx:call_0_2"]
    with pytest.raises(RuntimeError, match="call it inside a tool's function"):
        idempotency_key()  # no call is being run here


async def test_sync_tools_run_off_the_event_loop_and_async_tools_on_it() -> None:
    where: dict[str, bool] = {}

    def sync_probe(label: str) -> str:
        try:
            asyncio.get_running_loop()
            where[label] = True
        except RuntimeError:
            where[label] = False
        return threading.current_thread().name

    async def async_probe(label: str) -> str:
        asyncio.get_running_loop()
        where[label] = True
        return "on loop"

    model = scripted([call("sync_probe", label="s"), call("async_probe", label="a")], reply("done"))
    registry = registry_of("p", [tool(sync_probe), tool(async_probe)], model)
    outcome = await Runner(registry).run("p", "go")

    assert isinstance(outcome, Succeeded)
    assert where == {"s": False, "a": True}
    assert tool_messages(outcome.state)["call_0_1"] != threading.current_thread().name


async def test_non_text_results_are_json_and_tool_errors_reach_the_model() -> None:
    @tool
    def numbers(n: int) -> dict[str, Any]:
        return {"n": n, "squares": [i * i for i in range(n)]}

    @tool
    def explode(reason: str) -> str:
        raise RuntimeError(reason)

    model = scripted(
        [call("numbers", n=3), call("explode", reason="disk on fire")], reply("survived")
    )
    outcome = await Runner(registry_of("x", [numbers, explode], model)).run("x", "go")

    assert isinstance(outcome, Succeeded) and outcome.output == "survived"
    first, second = outcome.state.calls
    assert (first.outcome, first.result) == ("executed", '{"n": 3, "squares": [0, 1, 4]}')
    assert (second.outcome, second.result) == ("error", "Tool explode failed: disk on fire")


def test_tool_is_a_frozen_value() -> None:
    t: Tool = tool(find_order)
    with pytest.raises(AttributeError):
        t.name = "other"  # type: ignore[misc]


class Address(BaseModel):
    street: str
    city: str


async def test_typed_parameters_arrive_as_their_annotated_types() -> None:
    received: dict[str, type] = {}

    @tool
    def ship(to: Address, amount: Decimal) -> str:
        received["to"], received["amount"] = type(to), type(amount)
        return f"shipping to {to.city}"

    model = ModelResponse(
        tool_calls=[tc("c1", "ship", to={"street": "1 Main", "city": "Oslo"}, amount="1.50")]
    )
    outcome = await Runner(registry_of("s", [ship], scripted(model, reply("ok")))).run("s", "go")

    assert outcome.state.calls[0].outcome == "executed"
    assert received == {"to": Address, "amount": Decimal}


class DeleteOptions(BaseModel):
    dry_run: bool = Field(False, alias="dryRun")


class Page(BaseModel):
    size: int = Field(10, exclude=True)


async def test_a_call_is_judged_shown_and_run_with_the_same_values() -> None:
    """A nested model with an alias: the model sends `dryRun` (the name its schema shows).
    The policy judged `dry_run: true` and let it through, but the tool ran with the
    default, a real delete. Now what is judged and shown is what the tool gets."""
    deleted: list[bool] = []

    def dry_runs_only(arguments: Any, context: Any) -> Permission:
        return Permission.ALLOW if arguments["options"]["dryRun"] else Permission.ASK

    @tool(permission=dry_runs_only)
    def delete_table(table: str, options: DeleteOptions) -> str:
        deleted.append(options.dry_run)
        return "would delete" if options.dry_run else "deleted"

    calls = [tc("c1", "delete_table", table="customers", options={"dryRun": True})]
    model = scripted(calls, reply("done"))
    outcome = await Runner(registry_of("d", [delete_table], model)).run("d", "go")

    assert outcome.state.calls[0].gate == "allow"
    assert outcome.state.calls[0].arguments == {"table": "customers", "options": {"dryRun": True}}
    assert deleted == [True]


def test_arguments_whose_json_form_gives_the_tool_other_values_are_refused() -> None:
    """A secret is written out masked and an excluded field not at all: the tool would get
    the mask, or the default, instead of what the model sent; no one could see that."""

    @tool
    def login(user: str, password: SecretStr) -> str:
        return user

    @tool
    def list_orders(page: Page) -> str:
        return str(page.size)

    with pytest.raises(InvalidArguments, match="their JSON form would give the tool other"):
        login.validate({"user": "ann", "password": "hunter2"})
    with pytest.raises(InvalidArguments, match="their JSON form would give the tool other"):
        list_orders.validate({"page": {"size": 1000000}})
    assert list_orders.validate({"page": {}}) == {"page": {}}


def test_an_agent_with_two_tools_of_one_name_is_refused() -> None:
    """A call names its tool: the first would run, while the agent's fingerprint (what an
    approval binds to) described the last."""

    @tool(name="delete")
    def delete_file(path: str) -> str:
        return path

    @tool(name="delete")
    def delete_repository(name: str) -> str:
        return name

    with pytest.raises(ToolDefinitionError, match="more than one tool named delete"):
        registry_of("ops", [delete_file, delete_repository], scripted(reply("ok"))).build("ops")


SETS_IN_ANOTHER_PROCESS = """
import json, sys
from dataclasses import dataclass
from pydantic import BaseModel, ConfigDict, Field
from agent_host.runtime.checkpoint import call_hash
from agent_host.runtime.tools import tool

class Labels(BaseModel):
    names: frozenset[str] = Field(alias="labelNames")
    pairs: list[set[str]]

class Repo(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str

@dataclass
class Team:
    members: set[str]

def tag(
    repos: set[str],
    labels: Labels,
    owners: dict[str, set[str]] | None = None,
    by_id: dict[int, set[str]] | None = None,
    archived: frozenset[Repo] = frozenset(),
    team: Team | None = None,
) -> str:
    return "tagged"

arguments = tool(tag).validate(json.loads(sys.argv[1]))
print(json.dumps([arguments, call_hash("fp", "tag", arguments)]))
"""


def test_a_set_argument_has_one_json_form_in_every_process() -> None:
    """Python orders a set of strings differently in each process: the call a reviewer saw
    (and its hash, and an edit's) must be the one every other process checks and runs."""
    words = ["prod-db", "billing", "web", "auth", "cache", "queue", "search", "mail"]
    raw = {
        "repos": words,
        "labels": {"labelNames": words[::-1], "pairs": [words[:4], words[4:]]},
        "owners": {"ops": words[2:6]},
        "by_id": {"7": words[1:5]},
        "archived": [{"name": word} for word in words],
        "team": {"members": words[3:]},
    }
    forms = {
        subprocess.run(
            [sys.executable, "-c", SETS_IN_ANOTHER_PROCESS, json.dumps(raw)],
            env=os.environ | {"PYTHONHASHSEED": str(seed)},
            cwd=Path(__file__).resolve().parents[3],  # the repository: agent_host imports
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(6)
    }

    assert len(forms) == 1
    [[arguments, _]] = [json.loads(form) for form in forms]
    assert arguments == {
        "repos": sorted(words),
        "labels": {"labelNames": sorted(words), "pairs": [sorted(words[:4]), sorted(words[4:])]},
        "owners": {"ops": sorted(words[2:6])},
        "by_id": {"7": sorted(words[1:5])},
        "archived": [{"name": word} for word in sorted(words)],
        "team": {"members": sorted(words[3:])},
    }
