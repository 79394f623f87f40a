"""The bound on entries in flight: a slot is held while an entry is handled, set aside
while it only waits (for its channel's turn), and never given back twice."""

from __future__ import annotations

import asyncio

from agent_host.durable.slots import holding, set_aside


async def test_a_waiting_entry_lets_another_through_and_takes_its_slot_again() -> None:
    slots = asyncio.Semaphore(1)
    order: list[str] = []
    waiting, other_done = asyncio.Event(), asyncio.Event()

    async def paced() -> None:
        async with holding(slots):
            order.append("paced starts")
            async with set_aside():
                waiting.set()
                await other_done.wait()  # its channel's turn is not yet
            order.append("paced goes on")
            assert slots.locked()  # it holds the one slot again

    async def other() -> None:
        await waiting.wait()
        async with holding(slots):
            order.append("other")
        other_done.set()

    await asyncio.wait_for(asyncio.gather(paced(), other()), 2)
    assert order == ["paced starts", "other", "paced goes on"]
    assert not slots.locked()


async def test_a_wait_cancelled_while_taking_its_slot_back_gives_nothing_back() -> None:
    slots = asyncio.Semaphore(1)
    aside, turn = asyncio.Event(), asyncio.Event()

    async def paced() -> None:
        async with holding(slots):
            async with set_aside():
                aside.set()
                await turn.wait()
            raise AssertionError("it never gets its slot back: it is cancelled first")

    task = asyncio.create_task(paced())
    await asyncio.wait_for(aside.wait(), 1)
    async with holding(slots):  # taken by another while the paced entry waits
        turn.set()
        await asyncio.sleep(0.01)  # the paced entry is waiting to take it back
        assert not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert slots.locked()
    assert not slots.locked()
    assert slots._value == 1  # one slot, not two: nothing was given back twice


async def test_outside_a_bounded_handler_setting_aside_changes_nothing() -> None:
    async with set_aside(), holding(None), set_aside():
        pass


async def test_a_cancelled_wait_does_not_wait_for_a_slot_it_would_give_right_back() -> None:
    """Cancelled while set aside (the consumer stopping), an entry ends at once: it does not
    first wait for a free slot only to give it back."""
    slots = asyncio.Semaphore(1)
    aside = asyncio.Event()

    async def paced() -> None:
        async with holding(slots), set_aside():
            aside.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(paced())
    await asyncio.wait_for(aside.wait(), 1)
    async with holding(slots):  # every slot busy (a slow call)
        task.cancel()
        await asyncio.sleep(0.2)
        done = task.done()
    await asyncio.gather(task, return_exceptions=True)
    assert done, "a cancelled entry waited for a slot before it could stop"
    assert slots._value == 1


async def test_a_task_started_by_a_handler_cannot_set_its_slot_aside() -> None:
    """A task a handler starts inherits the context, slot included; its set_aside changes
    nothing, so it can neither give back the handler's slot nor take one back for nobody
    (one of the bound lost for good)."""
    slots = asyncio.Semaphore(1)

    async def child() -> None:
        async with set_aside():
            await asyncio.sleep(0.05)

    async def handler() -> None:
        async with holding(slots):
            asyncio.get_running_loop().create_task(child())
            await asyncio.sleep(0)  # the child has started (and set the slot aside)

    await handler()
    await asyncio.sleep(0.2)
    assert slots._value == 1, "a slot was taken back by a task that never gives it back"
