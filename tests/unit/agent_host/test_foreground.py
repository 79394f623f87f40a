"""Clicks first: background steps wait while a request someone waits on is in flight, and
never for longer than the bound."""

from __future__ import annotations

import asyncio
import time

from agent_host.durable.foreground import Foreground


async def test_a_background_step_waits_for_the_click_in_flight() -> None:
    gate = Foreground(max_wait=5.0)
    order: list[str] = []

    async def click() -> None:
        with gate.serving():
            await asyncio.sleep(0.05)
            order.append("acked")

    async def background() -> None:
        await asyncio.sleep(0.01)  # starts while the click is in flight
        await gate.wait_turn()
        order.append("background")

    await asyncio.gather(click(), background())
    assert order == ["acked", "background"]


async def test_a_stream_of_clicks_delays_background_work_but_never_starves_it() -> None:
    gate = Foreground(max_wait=0.05)
    with gate.serving():  # a click that never ends
        started = time.monotonic()
        await gate.wait_turn()
        waited = time.monotonic() - started
    assert 0.04 <= waited < 1.0
    started = time.monotonic()
    await gate.wait_turn()  # nothing in flight: no wait at all
    assert time.monotonic() - started < 0.01
