"""A run that pauses twice (the same gated tool in two model turns), and approve-always.

`registry` below is loaded by the stack through COUNTERSIGN_AGENTS, next to the examples.
"""

from __future__ import annotations

from pathlib import Path

from agent_host.approvals import ApprovalRequest
from agent_host.durable.outbox import Outbox
from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import Conversation, ScriptedModel, call, reply
from agent_host.runtime.policy import Permission
from agent_host.runtime.tools import ToolContext, tool
from agent_host.settings import Settings
from bot import blocks
from tests.support.stack import CHANNEL, REVIEWER, REVIEWER2, Stack, running_stack
from tests.support.waiting import eventually

AGENTS = "tests.integration.bot.test_bot_twice:registry"


def archiver(effects: ExampleEffects) -> Agent:
    @tool(permission=Permission.ASK, reason="moves a folder to cold storage", severity="medium")
    def archive(folder: str, ctx: ToolContext) -> str:
        """Archive a folder."""
        effects.record("archive", folder=folder, key=ctx.idempotency_key)
        return f"Archived {folder}"

    def script(c: Conversation) -> ModelResponse:
        # One gated call per turn: turn 0 asks for /one, turn 1 for /two, then a reply.
        if c.turn == 0:
            return ModelResponse(tool_calls=[call("archive", folder="/one")])
        if c.turn == 1:
            return ModelResponse(tool_calls=[call("archive", folder="/two")])
        return reply("Archive finished: " + "; ".join(m.content for m in c.results))

    return Agent(
        name="archiver",
        instructions="Archive two folders, one at a time.",
        tools=[archive],
        model=ScriptedModel(script, name="scripted-archiver"),
    )


def registry(settings: Settings) -> AgentRegistry:
    effects = ExampleEffects(settings.example_journal)
    examples = build_registry(effects)
    examples.register("archiver", lambda: archiver(effects))
    return examples


async def posted_and_waiting(stack: Stack, run_id: str) -> list[ApprovalRequest] | None:
    """The run's requests posted and still waiting (its second pause's), or None yet."""
    requests = await stack.host.store.run_requests(run_id)
    return [r for r in requests if not r.decided and r.message_ts] or None


async def test_run_pausing_twice_posts_two_messages_and_the_outcome_in_the_second_thread(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("archiver", "archive both")
        [first] = await stack.pending_requests(run_id)
        assert first.arguments == {"folder": "/one"}
        await stack.click(REVIEWER, first, blocks.APPROVE)
        [second] = await eventually(lambda: posted_and_waiting(stack, run_id))
        assert second.request_id != first.request_id
        assert second.arguments == {"folder": "/two"}
        assert second.message_ts != first.message_ts
        assert stack.effects.count("archive") == 1

        await stack.click(REVIEWER2, second, blocks.APPROVE)
        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert "Archived /one" in info.output and "Archived /two" in info.output
        assert stack.effects.count("archive") == 2

        stored = {r.request_id: r for r in await stack.host.store.run_requests(run_id)}
        assert len(stored) == 2
        assert stored[first.request_id].decided_by == REVIEWER
        assert stored[second.request_id].decided_by == REVIEWER2
        assert len(stack.channel_messages(CHANNEL)) == 2

        first_message = await stack.decided_message(CHANNEL, first.message_ts)
        second_message = await stack.decided_message(CHANNEL, second.message_ts)
        assert "<@U0REVIEWER>" in str(first_message["blocks"])
        assert "<@U0REVIEWER2>" in str(second_message["blocks"])
        [outcome] = await stack.thread_replies(CHANNEL, second.message_ts)
        assert "Archive finished" in outcome["text"]
        assert stack.thread(CHANNEL, first.message_ts) == []


async def test_approve_for_this_run_skips_later_asks_for_the_same_tool(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("archiver", "archive both")
        [first] = await stack.pending_requests(run_id)
        posted = stack.message(CHANNEL, first.message_ts)
        [actions] = [b for b in posted["blocks"] if b["type"] == "actions"]
        assert blocks.APPROVE_ALWAYS in [e["action_id"] for e in actions["elements"]]

        reply = await stack.click(REVIEWER, first, blocks.APPROVE_ALWAYS)
        assert reply.status == 200

        info = await stack.run_status(run_id, "succeeded", "failed")
        assert info.status == "succeeded"
        assert "Archived /two" in info.output
        assert stack.effects.count("archive") == 2
        # Only the first call was asked (one Slack message); the second has its own request,
        # approved by the standing decision and naming who gave it.
        only, covered = await stack.host.store.run_requests(run_id)
        assert only.request_id == first.request_id
        assert only.status == "approved"
        assert getattr(only.decision, "always", None) is True
        assert covered.status == "approved" and not covered.asked
        assert covered.decided_by == REVIEWER
        assert getattr(covered.decision, "standing_of", None) == first.request_id
        audit = await stack.host.store.audit(run_id)
        assert any(e.get("request_id") == covered.request_id for e in audit)
        posts = stack.standin.calls_to("chat.postMessage")
        assert len([p for p in posts if not p.get("thread_ts")]) == 1

        message = await stack.decided_message(CHANNEL, first.message_ts)
        assert "also for later calls" in str(message["blocks"])
        [outcome] = await stack.thread_replies(CHANNEL, first.message_ts)
        assert "Archived /two" in outcome["text"]


async def test_plain_approve_still_asks_for_the_next_call(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("archiver", "archive both")
        [first] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, first, blocks.APPROVE)

        async def second_pause() -> list | None:
            requests = await stack.host.store.run_requests(run_id)
            waiting = [r for r in requests if not r.decided]
            return waiting or None

        [second] = await eventually(second_pause)
        assert second.tool == "archive"
        info = await stack.host.store.run_info(run_id)
        assert info is not None and info.status == "waiting"
        assert stack.effects.count("archive") == 1


async def test_an_outcome_entry_written_without_request_ids_still_answers_in_the_last_thread(
    redis_url: str, tmp_path: Path
) -> None:
    """FINISH names the run's requests in its `run_finished` entry so that the delivery reads
    them with the run in one round trip; an entry written before it did still finds them."""
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_AGENTS=AGENTS) as stack:
        run_id = await stack.start_run("archiver", "archive both")
        [first] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, first, blocks.APPROVE)
        [second] = await eventually(lambda: posted_and_waiting(stack, run_id))
        await stack.click(REVIEWER2, second, blocks.APPROVE)
        await stack.run_status(run_id, "succeeded")
        [outcome] = await stack.thread_replies(CHANNEL, second.message_ts)

        older = Outbox(stack.host.store, stack.host.notifier, "older-entry")
        await older.handle("0-1", {"type": "run_finished", "run_id": run_id})
        replies = stack.thread(CHANNEL, second.message_ts)
        assert len(replies) == 2 and replies[1]["text"] == outcome["text"]
        assert stack.thread(CHANNEL, first.message_ts) == []
