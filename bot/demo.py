"""`countersign demo`: the example agents end to end (replaced by the sandbox page later)."""

from __future__ import annotations

from agent_host.settings import Settings


async def run_demo(settings: Settings, port: int) -> None:
    raise NotImplementedError
