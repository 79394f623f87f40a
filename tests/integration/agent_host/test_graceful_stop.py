"""Stopping a host (SIGTERM to `serve` or `worker`, a routine deploy): nothing new is begun,
and a tool call already running ends and is recorded, instead of being cut short into an
"unknown outcome" that a person must then check by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis.asyncio import Redis

from agent_host.runtime.messages import ModelResponse
from agent_host.runtime.models.scripted import ScriptedModel
from agent_host.runtime.tools import ToolContext, tool
from tests.support.agents import registry_of, scripted, tc
from tests.support.host_env import make_host
from tests.support.waiting import eventually

TOOL_SECONDS = 1.0


async def test_a_stop_lets_a_running_tool_call_end_and_records_it(
    redis_url: str, tmp_path: Path
) -> None:
    journal: list[str] = []

    @tool(name="backup", description="back up a target")
    async def backup(target: str, ctx: ToolContext) -> str:
        journal.append("start")
        await asyncio.sleep(TOOL_SECONDS)
        journal.append("end")
        return f"backed up {target}"

    model: ScriptedModel = scripted([tc("m1", "backup", target="/srv")], ModelResponse(text="done"))
    redis = Redis.from_url(redis_url)  # the host closes it when it stops
    host, _ = make_host(redis, tmp_path, registry=registry_of("backups", [backup], model))
    host.start_background(1, sweeper=False, outbox=False)
    run_id = await host.store.create_run("backups", "back up /srv", "U0REQUESTER")
    await eventually(lambda: journal == ["start"] or None, what="the tool to start")

    await host.stop()  # while the tool runs

    assert journal == ["start", "end"]  # it ran to its end, once
    later, _ = make_host(Redis.from_url(redis_url), tmp_path)  # as the next process sees it
    try:
        info = await later.store.run_info(run_id)
    finally:
        await later.redis.aclose()
    assert info is not None and info.status == "succeeded", info
