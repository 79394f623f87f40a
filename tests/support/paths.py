"""Where the project and the tests' frozen fixtures are, for tests that read files or start
the CLI from the project's root (independent of the folder a test module sits in)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES", "PROJECT_ROOT"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = PROJECT_ROOT / "tests" / "fixtures"
