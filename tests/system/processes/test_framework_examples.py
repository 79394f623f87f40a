"""examples/pydantic_ai_agent.py and examples/openai_agents_agent.py, run as a user runs them.

Served: `countersign serve` started in examples/ with COUNTERSIGN_AGENTS=<module>:registry
(no model configured, so each example says it uses its framework's offline model), a run
started over the HTTP API, its refund approved with a signed click in the Slack stand-in,
the run finished and its output posted in the thread. Alone: `python examples/<module>.py`
stops before the refund and, with --approve, refunds.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.support.paths import PROJECT_ROOT
from tests.support.processes import inherited_env
from tests.system.faults.harness import APPROVALS, REVIEWER, until, world
from tests.system.faults.harness import AUTH as API_AUTH

EXAMPLES = PROJECT_ROOT / "examples"
MODULES = ["pydantic_ai_agent", "openai_agents_agent"]
REFUNDED = "Refunded $42.50 to order 123"


@pytest.mark.parametrize("module", MODULES)
async def test_the_example_served_by_countersign_pauses_and_refunds_once_approved(
    module: str, tmp_path: Path
) -> None:
    async with world(tmp_path, COUNTERSIGN_AGENTS=f"{module}:registry") as w:
        # from the examples folder, as its docstring says; countersign itself on the path
        serve = w.serve(cwd=EXAMPLES, PYTHONPATH=str(PROJECT_ROOT))
        await w.ready(serve)
        run_id = await w.start_run(serve, agent="refunds", text="refund order 123")
        request = await w.only_request(run_id, posted=True, watch=[serve])

        assert (request.tool, request.arguments) == (
            "issue_refund",
            {"order_id": "123", "amount": 42.5},
        )
        posted = str(w.message(APPROVALS, request.message_ts).blocks)
        assert "issue_refund" in posted and "42.5" in posted
        reply, _ = await w.click(REVIEWER, request, via=serve)
        assert reply.status == 200, reply
        info = await w.run_reaches(run_id, "succeeded", "failed", watch=[serve])

        assert info.status == "succeeded", info
        assert info.output == REFUNDED

        async def answered() -> list[str] | None:
            return [m.text for m in w.thread_replies(APPROVALS, request.message_ts)] or None

        assert await until("the outcome", answered, watch=[serve]) == [f"Run finished: {REFUNDED}"]
        async with w.http.get(f"{serve.url}/api/v1/runs/{run_id}", headers=API_AUTH) as resp:
            detail = await resp.json()
        assert [(c["tool"], c["outcome"]) for c in detail["tool_calls"]] == [
            ("lookup_order", "executed"),
            ("issue_refund", "executed"),
        ]
        assert detail["tool_calls"][1]["arguments"] == {"order_id": "123", "amount": 42.5}
        log = serve.log.read_text()
        assert "offline" in log and "Traceback" not in log, serve.tail()


async def run_alone(module: str, *args: str) -> tuple[int, str, str]:
    """`python examples/<module>.py ARGS` with no model configured."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / f"{module}.py"),
        *args,
        env={**inherited_env(), "PYTHONPATH": str(PROJECT_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("module", MODULES)
async def test_the_example_alone_stops_before_the_refund_and_says_its_model_is_offline(
    module: str,
) -> None:
    code, out, err = await run_alone(module, "refund order 123")
    assert code == 0, err
    assert out == 'waiting for approval: issue_refund {"order_id": "123", "amount": 42.5}\n'
    assert "offline" in err and "Traceback" not in err

    code, out, err = await run_alone(module, "--approve", "refund order 123")
    assert code == 0, err
    assert out.splitlines()[-1] == REFUNDED
