"""The resume figure of `make bench` is measured at all: it times the worker's save of
each resumed run, whichever step saves it (a final answer is saved as the run's outcome)."""

from __future__ import annotations

from pathlib import Path

from bench import resume


async def test_decision_to_resume_is_measured_for_every_decision(tmp_path: Path) -> None:
    p50, p99 = await resume.run(tmp_path)
    assert p50.value is not None and p99.value is not None
    assert 0 < p50.value <= p99.value, p50.details
    assert p50.details["negative"] == 0, p50.details
