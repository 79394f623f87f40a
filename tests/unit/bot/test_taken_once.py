"""The replay guard's answer, shared by the endpoint and a decision click's listener."""

from __future__ import annotations

import asyncio

from slack_bolt.async_app import AsyncBoltContext

from bot.listeners.taken_once import FIRST_TIME, first_time


async def test_a_listener_out_of_time_does_not_cancel_the_guard_it_shares() -> None:
    """The endpoint awaits the guard after the listener: a listener whose budget ran out
    must leave it running, or the endpoint would answer Slack with a cancellation."""
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    context = AsyncBoltContext({FIRST_TIME: answer})
    try:
        async with asyncio.timeout(0.05):
            await first_time(context)
    except TimeoutError:
        pass
    assert not answer.cancelled()
    answer.set_result(False)
    assert await first_time(context) is False


async def test_without_a_guard_a_request_is_new() -> None:
    assert await first_time(None) is True  # Socket Mode: no copies come over the socket
    assert await first_time(AsyncBoltContext({})) is True
