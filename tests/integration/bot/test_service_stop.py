"""Stopping the service stops its host even when an earlier step of the stop fails: the
workers are told to stop (and finish or leave pending what they hold), not left to the
event loop's teardown, which cancels them without a word. A process with no /healthz
(`countersign worker`) is told when its work stopped, to exit and be started again."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot import server
from bot.composition import Service, build_service
from slack_sandbox import SlackStandIn, open_workspace, workspace_to_dict
from tests.support.stack import SECRET, TOKEN, quicken, stack_settings
from tests.support.waiting import eventually


@contextlib.asynccontextmanager
async def built_service(redis_url: str, tmp_path: Path) -> AsyncIterator[Service]:
    """A service built as `serve` and `worker` build theirs, beside a Slack stand-in; not
    started."""
    async with service_beside_standin(redis_url, tmp_path) as (service, _):
        yield service


@contextlib.asynccontextmanager
async def service_beside_standin(
    redis_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Service, SlackStandIn]]:
    standin = SlackStandIn(open_workspace(tmp_path / "slack"), token=TOKEN, signing_secret=SECRET)
    await standin.start()
    try:
        service = await build_service(stack_settings(standin, redis_url, tmp_path))
        quicken(service.host)
        yield service, standin
    finally:
        await standin.stop()


async def test_a_post_under_way_when_the_service_stops_is_made_not_cut_off(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deploy's stop lets the outbox end a post on its way to Slack: the Web API session
    is closed after the outbox stops, not before (the post then failed with "Session is
    closed", an error of countersign's own, left for the next process to post again)."""
    async with service_beside_standin(redis_url, tmp_path) as (service, standin):
        await service.start(workers=1)
        standin.inject("chat.postMessage", status=200, delay=1.0)  # slow, then answered
        run_id = await service.host.store.create_run("refund-agent", "refund order 123", "U0R")
        await eventually(lambda: bool(standin.calls_to("chat.postMessage")) or None)
        assert not [m for m in workspace_to_dict(standin.workspace)["messages"] if m["blocks"]]
        await service.stop()  # while the request's message is on its way

        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert not errors, errors
        assert len(standin.calls_to("chat.postMessage")) == 1  # made once, not failed, retried
        [message] = [m for m in workspace_to_dict(standin.workspace)["messages"] if m["blocks"]]
        again = await build_service(service.settings)  # the next process
        try:
            [request] = await again.host.store.run_requests(run_id)
            assert request.message_ts == message["ts"]  # recorded: nothing left to post
        finally:
            await again.stop()


@pytest.mark.parametrize("failing", ["http", "work", "bot"])
async def test_a_stop_takes_every_step_in_order_whichever_fails(
    redis_url: str, tmp_path: Path, failing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP server first (long polls answered), then the workers and the outbox end
    what is under way, then the bot's work and Slack's session, then Redis: a step that
    fails leaves none of the later ones untaken."""
    async with built_service(redis_url, tmp_path) as service:
        await service.start(http=("127.0.0.1", 0), workers=1)
        assert service.host._tasks and service._runner is not None
        taken: list[str] = []

        def recorded(name: str, step: Callable[[], Awaitable[None]]) -> Any:
            async def take(*args: Any) -> None:
                taken.append(name)
                await step(*args)
                if name == failing:
                    raise RuntimeError(f"{name} failed")

            return take

        runner, host = service._runner, service.host
        cleanup = web.AppRunner.cleanup

        async def cleanup_recorded(self: web.AppRunner) -> None:  # (slots: patched on its class)
            step = functools.partial(cleanup, self)
            await (recorded("http", step) if self is runner else step)()

        monkeypatch.setattr(web.AppRunner, "cleanup", cleanup_recorded)
        host.stop_work = recorded("work", host.stop_work)  # type: ignore[method-assign]
        service.bot.close = recorded("bot", service.bot.close)  # type: ignore[method-assign]
        host.close = recorded("redis", host.close)  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match=f"{failing} failed"):
            await service.stop()
        assert taken == ["http", "work", "bot", "redis"]
        assert host._stop.is_set() and not host._tasks  # stopped and gathered, not cancelled


async def test_a_stop_s_waits_share_one_grace_from_its_start(
    redis_url: str, tmp_path: Path
) -> None:
    """The workers' wait and the wait for the work started after acks come out of one
    grace counted from the stop's start, not one grace each: a stop ends within what a
    platform gives it before its kill."""
    async with built_service(redis_url, tmp_path) as service:
        await service.start(http=("127.0.0.1", 0), workers=1)
        service.host.stop_grace = 2.0
        given: dict[str, float] = {}
        stop_work, close = service.host.stop_work, service.bot.close

        async def slow_stop_work(within: float | None = None) -> None:
            given["work"] = within if within is not None else -1.0
            await asyncio.sleep(0.5)  # the workers took half a second of it
            await stop_work(within)

        async def bot_close(within: float) -> None:
            given["bot"] = within
            await close(within)

        service.host.stop_work = slow_stop_work  # type: ignore[method-assign]
        service.bot.close = bot_close  # type: ignore[method-assign]
        await service.stop()

        assert 0 < given["work"] <= 2.0, given
        assert 0 <= given["bot"] <= given["work"] - 0.5, given  # what was left of it


async def test_a_request_still_handled_over_http_is_waited_for_within_its_bound(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As over Socket Mode, the HTTP server waits REQUESTS_END_WITHIN for the requests it is
    handling, within the stop's grace, not aiohttp's own 60 s: one still going then is cut
    off, and the stop goes on. (Countersign's own handlers end sooner: a Slack request
    within its listener's budget, an API request within its store budget.)"""
    monkeypatch.setattr(server, "REQUESTS_END_WITHIN", 0.5)
    async with built_service(redis_url, tmp_path) as service:
        held = asyncio.Event()

        async def stuck(_: web.Request) -> web.Response:
            held.set()
            await asyncio.sleep(60)
            return web.Response(text="too late")

        service.app.router.add_get("/stuck", stuck)
        await service.start(http=("127.0.0.1", 0), workers=1)
        async with aiohttp.ClientSession() as session:
            asking = asyncio.create_task(session.get(f"{service.url}/stuck"))
            await asyncio.wait_for(held.wait(), 10)
            await asyncio.wait_for(service.stop(), 15)  # (aiohttp's own bound: 60 s)
            [answered] = await asyncio.gather(asking, return_exceptions=True)
        assert isinstance(answered, aiohttp.ClientError), answered  # cut off, not answered


@pytest.mark.parametrize("how", ["work lost", "stopped"])
async def test_a_worker_process_learns_its_work_stopped_or_that_it_was_stopped(
    redis_url: str, tmp_path: Path, how: str
) -> None:
    async with built_service(redis_url, tmp_path) as service:
        await service.start(workers=1)  # as `countersign worker`: no HTTP
        stop = asyncio.Event()
        waiting = asyncio.create_task(service.until_stopped_or_work_lost(stop))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        try:
            if how == "work lost":
                [outbox] = [task for task in service.host._tasks if task.get_name() == "outbox"]
                outbox.cancel()  # as a consumer ending by itself would
            else:
                stop.set()  # a signal
            assert await asyncio.wait_for(waiting, 5) is (how == "work lost")
        finally:
            await service.stop()
