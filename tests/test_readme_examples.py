"""The README's Python examples run as they stand, with the public API only, and print what
their comments say they print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    if "from agent_host import" in block
]
PROMISE = re.compile(r"print\(.*\)\s+#\s*(.+)$", re.M)


def test_the_readme_has_a_runnable_example() -> None:
    assert BLOCKS, "README.md shows no example that imports from agent_host"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"example-{n}" for n in range(len(BLOCKS))])
def test_a_readme_example_runs_and_prints_what_it_promises(block: str, tmp_path: Path) -> None:
    assert not re.search(r"^from agent_host\.", block, re.M), "use the public API only"
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,  # not the checkout: the installed package, as a user has it
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    promised = PROMISE.findall(block)
    printed = done.stdout.strip().splitlines()
    assert printed[-len(promised) :] == [p.strip() for p in promised], done.stdout
