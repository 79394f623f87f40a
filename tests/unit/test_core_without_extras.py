"""The core installs and runs without the optional frameworks: every module of countersign but
the adapters imports in a Python where `agents` and `pydantic_ai` cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.paths import PROJECT_ROOT

PROBE = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class NoExtras:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"agents", "pydantic_ai"}:
                raise ImportError(f"{name} is an optional extra, not installed here")
            return None

    sys.meta_path.insert(0, NoExtras())
    imported = []
    for top in ("agent_host", "bot", "slack_sandbox"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            if info.name.startswith("agent_host.adapters."):
                continue
            importlib.import_module(info.name)
            imported.append(info.name)
    assert not {"agents", "pydantic_ai"} & set(sys.modules), "an extra was imported"
    try:
        importlib.import_module("agent_host.adapters.pydantic_ai")
    except ImportError as exc:
        print("adapter refused:", exc)
    print(len(imported))
    """
)


def test_every_core_module_imports_without_the_framework_extras() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("adapter refused: pydantic_ai")  # the probe does block them
    assert int(lines[-1]) > 60  # and it walked the whole product
