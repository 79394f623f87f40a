"""Invariant 11 (docs/ARCHITECTURE.md): every decision goes through the approval service;
no product code outside it calls the store's compare-and-set (the DECIDE script)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import PROJECT_ROOT as ROOT

SERVICE = Path("agent_host/approvals/service.py")
STORE = Path("agent_host/durable/store.py")  # defines `decide`, the only user of DECIDE


def product_modules() -> list[Path]:
    return [
        p.relative_to(ROOT)
        for package in ("agent_host", "bot", "slack_sandbox")
        for p in (ROOT / package).rglob("*.py")
    ]


def decide_calls(path: Path) -> list[int]:
    """Lines where `path` calls `<something>.store.decide(...)` or `store.decide(...)`."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if node.func.attr == "decide" and name == "store":
            found.append(node.lineno)
    return found


def test_only_the_approval_service_calls_the_stores_decide() -> None:
    callers = {str(p): lines for p in product_modules() if (lines := decide_calls(p))}
    assert callers == {str(SERVICE): callers.get(str(SERVICE), [])}, callers
    assert callers.get(str(SERVICE)), "the approval service no longer calls store.decide"


def test_only_the_store_runs_the_decide_script() -> None:
    users = [
        str(p)
        for p in product_modules()
        if p != Path("agent_host/durable/scripts.py") and _names_decide_script(p)
    ]
    assert users == [str(STORE)], users


def _names_decide_script(path: Path) -> bool:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "DECIDE":
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name == "DECIDE" for a in node.names):
            return True
    return False
