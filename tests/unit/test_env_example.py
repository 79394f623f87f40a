""".env.example lists every environment variable a settings field reads (and the ones the
contract names), each with a comment, so it cannot drift from the settings."""

from __future__ import annotations

import re

import pytest
from pydantic import AliasChoices

from bot.slack_settings import ServiceSettings
from tests.support.paths import PROJECT_ROOT

ENV_EXAMPLE = PROJECT_ROOT / ".env.example"
CONTRACT_ONLY = ["COUNTERSIGN_CALLBACK_HOSTS"]  # named by the contract before its field exists


def variables() -> list[str]:
    names = []
    for name, field in ServiceSettings.model_fields.items():
        alias = field.validation_alias
        assert isinstance(alias, AliasChoices), f"{name} has no environment variable"
        names.append(str(alias.choices[0]))
    return sorted({*names, *CONTRACT_ONLY})


def listed() -> dict[str, int]:
    """Each variable's line number in .env.example, set (`X=`) or left as `# X=`."""
    lines = ENV_EXAMPLE.read_text().splitlines()
    found = {}
    for number, line in enumerate(lines):
        match = re.fullmatch(r"(?:# )?([A-Z][A-Z0-9_]*)=.*", line)
        if match:
            found[match.group(1)] = number
    return found


@pytest.mark.parametrize("variable", variables())
def test_every_variable_is_in_env_example_with_its_meaning(variable: str) -> None:
    found = listed()
    assert variable in found, f"{variable} is missing from .env.example"
    lines = ENV_EXAMPLE.read_text().splitlines()
    above = lines[: found[variable]]
    assert above and above[-1].startswith("#"), f"{variable} has no comment above it"


def test_env_example_lists_nothing_countersign_does_not_read() -> None:
    assert sorted(listed()) == variables()
