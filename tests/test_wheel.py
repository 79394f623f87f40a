"""The wheel built from the project holds the product (agent_host, bot) and the demo's
sandbox, and no test or benchmark code."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_contains_no_test_code(tmp_path: Path) -> None:
    # Built from a clean copy of the tree: a build in the checkout would leave build/ there,
    # whose stale files a later build could package.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", ".*"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    [wheel] = tmp_path.glob("countersign-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.endswith(".dist-info/")}
    assert {"agent_host", "bot", "slack_sandbox"} <= tops
    assert not {"tests", "bench", "scripts"} & tops, tops
    assert not [n for n in names if "/test_" in n or n.startswith("tests/")]
    assert "slack_sandbox/static/app.js" in names  # the demo page ships with it
