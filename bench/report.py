"""results.json and the markdown table (also results.md).

When `results_before.json` exists (the figures measured on main before the approval-cycle work, same
format), the table shows each figure's value from it beside the one just measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import Figure

__all__ = ["BEFORE", "before_value", "markdown", "write"]

BEFORE = Path(__file__).resolve().parent / "results_before.json"


def _before() -> dict[str, Any]:
    if not BEFORE.exists():
        return {}
    document: dict[str, Any] = json.loads(BEFORE.read_text())
    return document


def before_value(name: str) -> float | None:
    """The figure's value before the approval-cycle work, if recorded."""
    for figure in _before().get("figures", []):
        if figure["figure"] == name:
            value = figure["value"]
            return float(value) if value is not None else None
    return None


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    text = f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"
    return f"{text} {unit}".strip()


def _met(figure: Figure) -> str:
    return {True: "yes", False: "**NO**", None: "—"}[figure.met]


def markdown(figures: list[Figure], conditions: dict[str, Any], errors: dict[str, str]) -> str:
    before = {f["figure"]: f for f in _before().get("figures", [])}
    when = _before().get("conditions", {}).get("date", "")
    head = f"before ({when[:10]})" if when else "before"
    lines = [
        f"| figure | value | baseline | goal | met? | {head} |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        baseline = _number(f.baseline, f.unit)
        if f.baseline_label:
            baseline += f" — {f.baseline_label}"
        goal = f"{f.goal.replace('>=', '≥').replace('<=', '≤')} {f.unit}" if f.goal else "—"
        value = _number(f.value, f.unit) + (f" ⚠ {f.note}" if f.note else "")
        old = before.get(f.name)
        then = "—"
        if old is not None:
            then = _number(old["value"], old["unit"])
            if old.get("baseline") is not None:
                then += f" (baseline {_number(old['baseline'], old['unit'])})"
        lines.append(f"| `{f.name}` | {value} | {baseline} | {goal} | {_met(f)} | {then} |")
    for name, message in errors.items():
        lines.append(f"| `{name}` | error: {message} | — | — | **NO** | — |")
    lines += ["", "Conditions:", ""]
    for key, value in conditions.items():
        lines.append(f"- {key}: {_condition(value)}")
    return "\n".join(lines) + "\n"


def _condition(value: Any) -> str:
    """A module's CPU meter reading in words; anything else as it is."""
    if not isinstance(value, dict) or "bench_cores" not in value:
        return str(value)
    return (
        f"{value['wall_s']} s; of {value['cpus']} cores the bench used {value['bench_cores']}, "
        f"other processes {value['other_processes_cores']} (steal {value['steal_cores']}); "
        f"load average {value['loadavg_1m_end']}"
    )


def write(
    directory: Path,
    figures: list[Figure],
    conditions: dict[str, Any],
    errors: dict[str, str],
) -> str:
    document = {
        "conditions": conditions,
        "figures": [f.to_dict() for f in figures],
        "errors": errors,
    }
    (directory / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    text = markdown(figures, conditions, errors)
    (directory / "results.md").write_text(text)
    return text
