"""Resume a checkpoint in a fresh process, as a second server would (seed 002).

    python resume_worker.py CHECKPOINT_FILE JOURNAL_FILE DECISIONS_JSON

Builds a fresh registry with `build_registry()` (effects journalled to JOURNAL_FILE), resumes
with the decisions ({call_id: decision as JSON}) and prints the outcome as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agent_host.examples import ExampleEffects, build_registry
from agent_host.runtime.checkpoint import RunState
from agent_host.runtime.decisions import decision_adapter
from agent_host.runtime.models import set_allow_model_requests
from agent_host.runtime.runner import Runner


def main(argv: list[str]) -> None:
    checkpoint, journal, decisions_json = argv
    set_allow_model_requests(False)
    state = RunState.from_json(Path(checkpoint).read_text(encoding="utf-8"))
    decisions = {
        call_id: decision_adapter.validate_python(decision)
        for call_id, decision in json.loads(decisions_json).items()
    }
    runner = Runner(build_registry(ExampleEffects(journal=Path(journal))))
    outcome = asyncio.run(runner.resume(state, decisions))
    print(
        json.dumps(
            {
                "kind": outcome.kind,
                "output": outcome.state.output,
                "state": json.loads(outcome.state.to_json()),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
