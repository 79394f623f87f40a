"""A reviewer decides with context: every approval message shows what the run did before
the call (its earlier calls and their outcomes) and what the agent said before asking.
And whatever the model wrote, the message, `/approvals pending` and the App Home tab stay
within Slack's limits: 10 KB arguments, newlines, mention and markup injection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.pause import pause
from agent_host.runtime.policy import Permission
from agent_host.runtime.tools import tool
from agent_host.settings import Settings
from bot import blocks
from bot.blocks.limits import SECTION_TEXT_MAX
from slack_sandbox.blockkit import check_blocks
from tests.support.stack import CHANNEL, REVIEWER, Stack, running_stack

from .test_bot_commands import approvals, listed_ids
from .test_bot_home import open_home, waiting_ids

AGENTS = "tests.integration.bot.test_bot_context:registry"
LOOKED_UP = "balance 120 EUR, unpaid since March"
SAID = "Acme has an unpaid balance, so I will close the account as you asked."
SECRET = "hunter2-do-not-show"
# What a hostile or confused model may write: newlines, mentions, links, markup, fences.
HOSTILE = "line\n<!channel> <@U0ADMIN> <https://evil.example|click> *bold* ```fence` &amp; \u202e"
HUGE = (HOSTILE * 200)[:10_240]  # 10 KB


def closer() -> Agent:
    @tool
    def lookup(account: str) -> str:
        """Look an account up."""
        return f"{account}: {LOOKED_UP}"

    @tool(permission=Permission.DENY, reason="never export")
    def export(account: str) -> str:
        """Export an account."""
        return "exported"

    @tool(permission=Permission.ASK, reason="closes a customer account", severity="high")
    def close_account(account: str) -> str:
        """Close an account."""
        return f"closed {account}"

    def script(c: Conversation) -> ModelResponse:
        if c.turn == 0:
            text = "Let me look the account up first."
            return ModelResponse(
                text=text,
                tool_calls=[call("lookup", account="acme"), call("export", account="acme")],
            )
        if c.turn == 1:
            return ModelResponse(text=SAID, tool_calls=[call("close_account", account="acme")])
        return reply(c.result("close_account") or "")

    return Agent(
        name="closer",
        instructions="Close accounts.",
        tools=[lookup, export, close_account],
        model=ScriptedModel(script, name="scripted-closer"),
    )


def hostile() -> Agent:
    @tool
    def note(text: str, extra: dict[str, Any]) -> str:
        """Take a note."""
        return HUGE

    @tool(permission=Permission.ASK, reason=HUGE, severity="high")
    def wire(note: str, password: str, nested: dict[str, Any], items: list[str]) -> str:
        """Wire money."""
        return "wired"

    @tool
    def ask(question: str) -> str:
        """Ask a person."""
        pause(question)

    def script(c: Conversation) -> ModelResponse:
        deep: dict[str, Any] = {"k": HUGE}
        for _ in range(30):
            deep = {"deeper": deep, HOSTILE: HUGE}
        if c.turn == 0:
            calls = [call("note", text=HUGE, extra=deep) for _ in range(8)]
            calls.append(call("x" * 5000 + HOSTILE, text=HUGE))  # an unknown tool: invalid
            return ModelResponse(text=HUGE, tool_calls=calls)
        if c.turn == 1:  # the question is asked by the tool as it runs (not gated itself)
            return ModelResponse(text=HUGE, tool_calls=[call("ask", question=HUGE)])
        if c.turn == 2:
            wire = call("wire", note=HUGE, password=SECRET, nested=deep, items=[HUGE[:300]] * 500)
            return ModelResponse(text=HUGE, tool_calls=[wire])
        return reply("done")

    return Agent(
        name="hostile",
        instructions="Be difficult.",
        tools=[note, wire, ask],
        model=ScriptedModel(script, name="scripted-hostile"),
    )


def registry(settings: Settings) -> AgentRegistry:
    examples = build_registry(ExampleEffects(settings.example_journal))
    examples.register("closer", closer)
    examples.register("hostile", hostile)
    return examples


def texts(shown: Any, kind: str | None = None) -> list[str]:
    """Every text in blocks (sections, fields, contexts, headers, buttons, dialogs), or
    only those of one kind (`mrkdwn`: the ones Slack formats)."""
    found: list[str] = []
    if isinstance(shown, dict):
        if isinstance(shown.get("text"), str) and kind in (None, shown.get("type")):
            found.append(shown["text"])
        for value in shown.values():
            found += texts(value, kind)
    elif isinstance(shown, list):
        for value in shown:
            found += texts(value, kind)
    return found


def assert_safe(shown: list[dict[str, Any]]) -> None:
    """Within Slack's limits, with nothing the model wrote turned into markup or a secret."""
    assert check_blocks(shown, limit=blocks.MESSAGE_BLOCKS_MAX) is None
    for block in shown:
        if block["type"] == "section" and "text" in block:
            assert len(block["text"]["text"]) <= SECTION_TEXT_MAX
    formatted = "\n".join(texts(shown, "mrkdwn"))
    assert "<!channel>" not in formatted and "<@U0ADMIN>" not in formatted
    assert "<https://evil.example" not in formatted
    assert SECRET not in "\n".join(texts(shown))


async def test_the_approval_message_shows_earlier_calls_and_what_the_agent_said(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("closer", "close acme")
        [request] = await stack.pending_requests(run_id)
        message = stack.message(CHANNEL, request.message_ts)
        shown = "\n".join(texts(message["blocks"]))
        assert "Before this call, the run" in shown
        assert "`lookup`" in shown and "ran" in shown and LOOKED_UP in shown
        assert "`export`" in shown and "denied by policy" in shown
        assert "The agent said before asking" in shown and SAID in shown
        assert shown.index("`lookup`") < shown.index("`export`")  # in the order they ran

        # The context is sealed at rest like the checkpoint it comes from.
        raw = await stack.host.redis.hgetall(f"{_request_key(stack, request.request_id)}")
        stored = b"".join(k + v for k, v in raw.items())
        assert LOOKED_UP.encode() not in stored and SAID.encode() not in stored
        assert raw[b"sealed_context"]

        # Still there once decided: the record of what the reviewer decided with.
        await stack.click(REVIEWER, request, blocks.APPROVE)
        decided = await stack.decided_message(CHANNEL, request.message_ts)
        assert LOOKED_UP in "\n".join(texts(decided["blocks"]))
        await stack.run_status(run_id, "succeeded")


def _request_key(stack: Stack, request_id: str) -> str:
    from agent_host.durable import keys as K

    return K.Keys(request_id).request(request_id)


async def test_huge_and_hostile_model_output_stays_within_slacks_limits(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("hostile", "go")
        [question] = await stack.pending_requests(run_id)
        assert question.kind == "question"
        await stack.click(REVIEWER, question, blocks.ANSWER)
        form = await stack.opened_view(REVIEWER, blocks.ANSWER_MODAL)
        answer = {blocks.ANSWER_BLOCK: {blocks.ANSWER_INPUT: "no"}}
        assert (await stack.standin.submit_view(REVIEWER, form["id"], answer)).status == 200
        await stack.decided(question.request_id)
        [wire] = await stack.pending_requests(run_id)
        assert wire.tool == "wire"

        for request in (question, wire):  # the messages
            message = stack.message(CHANNEL, request.message_ts)
            assert_safe(message["blocks"])
            assert len(message["text"]) <= 300
        shown = "\n".join(texts(stack.message(CHANNEL, wire.message_ts)["blocks"]))
        assert "Before this call, the run" in shown and "5 earlier calls" in shown
        assert "The agent said before asking" in shown

        # `/approvals pending` and the App Home tab (checked against a view's limits by
        # `open_home`) list the wire transfer and a question still waiting in another run.
        other = await stack.start_run("hostile", "go")
        [asked] = await stack.pending_requests(other)
        reply = await stack.approvals(REVIEWER, CHANNEL, "pending")
        body = json.loads(reply.body)
        assert_safe(body["blocks"])
        lines = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"][1:]
        assert len(lines) == 2
        for line in lines:  # one line of what it is, one of its arguments and link
            assert line.count("\n") == 1 and len(line) < 2000
            assert "```" not in line
        listed = listed_ids(await approvals(stack, REVIEWER, "pending"))
        assert sorted(listed) == sorted([wire.request_id, asked.request_id])

        view = await open_home(stack, REVIEWER)
        assert sorted(waiting_ids(view)) == sorted([wire.request_id, asked.request_id])
        assert_safe(view["blocks"])
