"""Stopping a host (SIGTERM to `serve` or `worker`, a routine deploy): nothing new is begun,
and a tool call already running ends and is recorded, instead of being cut short into an
"unknown outcome" that a person must then check by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent_host.durable.redis_server import RedisServer
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


async def test_a_tool_call_still_running_when_the_grace_runs_out_is_cut_short_and_said(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop waits for work under way within its grace, not for ever (a platform's kill
    would come first, before Redis is closed): a call still running then is cancelled, and
    the log says so and what becomes of it."""
    journal: list[str] = []

    @tool(name="backup", description="back up a target")
    async def backup(target: str, ctx: ToolContext) -> str:
        journal.append("start")
        await asyncio.sleep(60)
        journal.append("end")
        return f"backed up {target}"

    model: ScriptedModel = scripted([tc("m1", "backup", target="/srv")], ModelResponse(text="done"))
    redis = Redis.from_url(redis_url)  # the host closes it when it stops
    host, _ = make_host(redis, tmp_path, registry=registry_of("backups", [backup], model))
    host.stop_grace = 0.3
    host.start_background(1, sweeper=False, outbox=False)
    await host.store.create_run("backups", "back up /srv", "U0REQUESTER")
    await eventually(lambda: journal == ["start"] or None, what="the tool to start")

    await asyncio.wait_for(host.stop(), 10)

    assert journal == ["start"]  # cut short, not waited for
    assert "1 consumer(s) still busy when the stop's grace ran out; cancelled" in caplog.text
    assert "reported as unknown_outcome, not run again" in caplog.text


async def test_a_close_that_fails_on_the_way_still_closes_redis_and_stops_its_server(
    redis_url: str, tmp_path: Path
) -> None:
    """Redis is closed last, and the embedded server stopped, whatever failed before: a
    process whose stop met an error must not leave its redis-server running."""
    with RedisServer(tmp_path / "embedded", unix_socket=True) as embedded:
        redis = Redis.from_url(embedded.url)
        host, _ = make_host(redis, tmp_path / "host")
        host.embedded = embedded
        closed: list[str] = []
        aclose = redis.aclose

        async def aclose_noted() -> None:
            closed.append("redis")
            await aclose()

        async def watch_close_fails() -> None:
            raise RuntimeError("the long polls' watch could not be closed")

        redis.aclose = aclose_noted  # type: ignore[method-assign]
        host.external.watch.close = watch_close_fails  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="could not be closed"):
            await host.stop()
        assert closed == ["redis"] and not embedded.running
