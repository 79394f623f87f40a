"""Every test the docs cite as proof exists: docs/ARCHITECTURE.md (the invariants) and
docs/SECURITY.md (the threats closed) name tests as `dir/test_file.py::test_name`, or
`::test_name` for another test of the file named just before."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.paths import PROJECT_ROOT

TESTS = PROJECT_ROOT / "tests"
CITATION = re.compile(r"`((?:[\w/]+/)?test_\w+\.py)?(?:::(\w+))?`")


def citations(doc: Path) -> list[tuple[str, str | None]]:
    """(test file under tests/, test name or None), in the order the doc names them."""
    found: list[tuple[str, str | None]] = []
    last_file = ""
    for match in CITATION.finditer(doc.read_text(encoding="utf-8")):
        path, name = match.groups()
        if path is None and name is None:
            continue
        if path is not None:
            last_file = path
        elif not last_file:
            continue
        found.append((last_file, name))
    return found


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


@pytest.mark.parametrize("doc", ["docs/ARCHITECTURE.md", "docs/SECURITY.md"])
def test_every_cited_test_exists(doc: str) -> None:
    cited = citations(PROJECT_ROOT / doc)
    missing = []
    for relative, name in cited:
        candidates = [TESTS / relative, *TESTS.glob(f"**/{relative}")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            missing.append(f"{relative} (no such file)")
        elif name is not None and name not in defined_tests(path):
            missing.append(f"{relative}::{name}")

    assert len(cited) > 20, f"{doc} cites almost no tests; did its format change?"
    assert not missing, f"{doc} cites tests that do not exist: {missing}"
