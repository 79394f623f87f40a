"""An entry that kills every process taking it: a real `countersign serve`, armed to
SIGKILL itself before it posts an approval request (COUNTERSIGN_CRASH_AT, as a crash in
native code or the kernel's out-of-memory killer would), is started again and again.

Nothing is caught when a process dies, so counting errors in the process cannot stop the
loop: every serve that reclaimed the entry would die in turn, and with it the Slack
endpoint. Redis tells the entry apart (its delivery count); handled alone, it stops
POISON_AFTER serves more, and the next gives it up instead of dying on it: the request is
marked undeliverable and the administrators are told, and it stays pending, decidable
from /approvals and the API.
"""

from __future__ import annotations

import signal
from pathlib import Path

from agent_host.durable.poison import POISON_AFTER, SUSPECT_AFTER

from .harness import APPROVALS, Proc, World, until, world

ADMIN_DM = "D0ADMIN"  # the stand-in's DM channel of the bot with ADMIN


async def died(w: World, proc: Proc) -> int:
    """`proc`'s exit code, once it died at its crash point (bounded: the outbox reclaims
    a dead consumer's entry after 5 s idle)."""

    async def exited() -> bool | None:
        return True if not proc.alive() else None

    await until(f"{proc.name} to die at its crash point", exited, within=30.0)
    assert proc.returncode is not None
    return proc.returncode


async def test_a_post_that_kills_every_serve_is_given_up_and_the_admins_told(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        front = w.serve("after_pause_saved")
        await w.ready(front)
        run_id = await w.start_run(front)
        assert await died(w, front) == -signal.SIGKILL
        # SUSPECT_AFTER deliveries in a row that died, then POISON_AFTER deaths alone
        for _ in range(SUSPECT_AFTER + POISON_AFTER - 1):
            front = w.serve("after_pause_saved")  # armed too: it would die the same way
            assert await died(w, front) == -signal.SIGKILL

        survivor = w.serve("after_pause_saved")
        await w.ready(survivor)
        request = await w.only_request(run_id)

        async def given_up() -> bool | None:
            current = await w.request(request.request_id)
            return True if current.delivery == "undeliverable" else None

        await until("the request to be given up", given_up, within=30.0, watch=[survivor])

        assert survivor.alive(), survivor.tail()  # it did not take the entry again
        current = await w.request(request.request_id)
        assert current.status == "pending" and not current.message_ts
        assert await w.indexed(request.request_id) == (True, True)  # still decidable
        assert w.top_level_posts(APPROVALS) == []

        async def admins_told() -> list[str] | None:
            texts = [m.text for m in w.top_level_posts(ADMIN_DM)]
            return texts or None

        [alert] = await until("the administrators to be told", admins_told, within=20.0)
        assert f"`{request.request_id}`" in alert and "`countersign_stopped`" in alert, alert
        assert "killed or crashed" in alert and "/approvals show" in alert, alert
