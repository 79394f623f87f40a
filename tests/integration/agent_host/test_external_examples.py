"""examples/curl_walkthrough.sh and examples/pause_script.py, run as a user runs them,
against a whole stack (real Redis, the Slack stand-in)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from bot import blocks
from tests.support.paths import PROJECT_ROOT
from tests.support.stack import API_TOKEN, CHANNEL, REVIEWER, Stack, running_stack
from tests.support.waiting import eventually

EXAMPLES = PROJECT_ROOT / "examples"
SECRET = "walkthrough-secret"


async def run(stack: Stack, *command: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command,
        env=os.environ | {"COUNTERSIGN_URL": stack.url, "COUNTERSIGN_API_TOKEN": API_TOKEN} | env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("openssl") and shutil.which("bash")),
    reason="the walkthrough needs bash, curl and openssl",
)
async def test_the_curl_walkthrough_creates_approves_and_reads(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET) as stack:
        proc = await run(
            stack, "bash", str(EXAMPLES / "curl_walkthrough.sh"), COUNTERSIGN_WEBHOOK_SECRET=SECRET
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert "verdict: approved" in out.decode()
        messages = [m for m in stack.channel_messages(CHANNEL) if "issue_refund" in str(m)]
        assert len(messages) == 1


async def test_the_pause_script_waits_for_a_click(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        proc = await run(stack, sys.executable, str(EXAMPLES / "pause_script.py"), ORDER_ID="77")

        async def posted() -> str | None:
            page = await stack.host.store.list_pending()
            return page.requests[0].request_id if page.requests else None

        request = await stack.posted(await eventually(posted))
        assert request.arguments == {"order_id": 77, "amount": 40}
        await stack.click(REVIEWER, request, blocks.APPROVE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == f"approved by {REVIEWER}: refunding order 77"
