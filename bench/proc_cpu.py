"""CPU time of server processes, read from outside them (`/proc/<pid>/stat`).

A process's user + system time, plus that of its children it has waited for, plus that of
its live descendants (`/proc/<pid>/task/*/children`). CPU time is what a process did, not
how long it waited for a core, so it is robust to other load on the machine, unlike a
latency. Resolution: one clock tick (10 ms on Linux), negligible over a load of seconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ProcessCpu", "cpu_seconds"]

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid` in seconds; 0 if it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0.0
    # Field 2 (the command) is in parentheses and may hold spaces: split after it.
    fields = data.rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    return sum(int(x) for x in fields[11:15]) / _TICK


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _tree(pids: Iterable[int]) -> set[int]:
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += _children(pid)
    return seen


class ProcessCpu:
    """CPU seconds spent by some processes and their descendants since `start`."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = list(pids)
        self._start = 0.0

    def total(self) -> float:
        return sum(cpu_seconds(pid) for pid in _tree(self.pids))

    def start(self) -> ProcessCpu:
        self._start = self.total()
        return self

    def elapsed(self) -> float:
        return self.total() - self._start
