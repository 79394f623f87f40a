"""Tool-initiated pauses (seed 002, docs/ORIGINS.md): a tool asks a human and waits for the answer.

`pause(question)` raises PauseRequest; the runner catches it, pauses the run, and on resume
the human's answer becomes that tool call's result. The tool is not run again.
"""

from __future__ import annotations

from typing import Any, NoReturn

from agent_host.errors import PauseRequest
from agent_host.runtime.policy import Severity
from agent_host.runtime.tools import Tool, tool

__all__ = ["PauseRequest", "ask_human", "pause"]


def pause(question: str, severity: Severity | str = Severity.MEDIUM, **data: Any) -> NoReturn:
    """Stop this tool call until a human answers `question`; never returns."""
    raise PauseRequest(question, Severity(severity), data)


def _ask_human(question: str) -> str:
    """Ask a human operator a question and wait for their answer."""
    pause(question)


ask_human: Tool = tool(name="ask_human")(_ask_human)
