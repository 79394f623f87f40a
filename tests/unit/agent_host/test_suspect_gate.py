"""A suspect (an entry that may be what stopped the last process handling it) is handled
alone: after what was in flight, before what comes next, one suspect at a time."""

from __future__ import annotations

import asyncio

from agent_host.durable.suspects import SuspectGate


async def test_a_suspect_waits_for_what_is_in_flight_and_holds_back_what_comes_next() -> None:
    gate = SuspectGate()
    order: list[str] = []
    running: set[str] = set()

    async def entry(name: str, delay: float, seconds: float) -> None:
        await asyncio.sleep(delay)
        async with gate.entry():
            assert not any(r.startswith("suspect") for r in running), running
            running.add(name)
            order.append(f"{name} begins")
            await asyncio.sleep(seconds)
            running.discard(name)

    async def suspect(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async with gate.suspect():
            assert not running, f"{name} began beside {running}"
            running.add(name)
            order.append(f"{name} begins")
            await asyncio.sleep(0.02)
            running.discard(name)
            order.append(f"{name} ends")

    await asyncio.gather(
        entry("in flight", 0, 0.05),
        suspect("suspect 1", 0.01),  # arrives while "in flight" runs
        suspect("suspect 2", 0.015),
        entry("next", 0.02, 0.01),  # arrives while suspect 1 waits for its turn
    )
    assert order[:2] == ["in flight begins", "suspect 1 begins"]
    assert order.index("next begins") > order.index("suspect 1 ends")
    assert "suspect 2 begins" in order


async def test_entries_above_suspicion_run_side_by_side() -> None:
    gate = SuspectGate()
    running, most = 0, 0

    async def entry() -> None:
        nonlocal running, most
        async with gate.entry():
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(entry() for _ in range(5)))
    assert most == 5


async def test_a_suspect_waits_for_what_is_in_flight_only_so_long() -> None:
    """A resume in a long model call does not hold every stream of the process back: the
    suspect goes on beside it after `quiet_wait`, and what comes next waits for the
    suspect."""
    gate = SuspectGate(quiet_wait=0.05)
    order: list[str] = []
    long_call_ends = asyncio.Event()

    async def long_call() -> None:
        async with gate.entry():
            order.append("long call begins")
            await long_call_ends.wait()

    async def suspect() -> None:
        await asyncio.sleep(0.01)
        async with gate.suspect():
            order.append("suspect begins")
            await asyncio.sleep(0.02)
            order.append("suspect ends")

    async def next_entry() -> None:
        await asyncio.sleep(0.02)
        async with gate.entry():
            order.append("next begins")

    tasks = [asyncio.create_task(t()) for t in (long_call, suspect, next_entry)]
    await asyncio.wait_for(asyncio.gather(tasks[1], tasks[2]), 2)
    long_call_ends.set()
    await tasks[0]
    assert order == ["long call begins", "suspect begins", "suspect ends", "next begins"]


async def test_a_stop_as_the_wait_ends_is_never_swallowed() -> None:
    """The last entry in flight ends, and the process stops a loop turn or three later: the
    suspect waiting for its turn stops too, never begins during the shutdown."""
    for turns in range(4):
        gate = SuspectGate()
        began: list[str] = []
        entry_ends = asyncio.Event()

        async def in_flight(
            entry_ends: asyncio.Event = entry_ends, gate: SuspectGate = gate
        ) -> None:
            async with gate.entry():
                await entry_ends.wait()

        async def suspect(gate: SuspectGate = gate, began: list[str] = began) -> None:
            async with gate.suspect():
                task = asyncio.current_task()
                assert task is not None
                began.append("after the stop" if task.cancelling() else "before it")

        entry = asyncio.create_task(in_flight())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(suspect())
        await asyncio.sleep(0.01)
        entry_ends.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(entry, waiting, return_exceptions=True)
        assert "after the stop" not in began, f"a stop {turns} loop turns later was swallowed"
