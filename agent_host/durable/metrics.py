"""/metrics in Prometheus' text format, read from Redis so every replica reports the same.

A scrape is two round trips (one pipeline over the shards, and the pending count), and
scrapes that arrive while one is being read share it: /metrics answers without a token, so
a flood of scrapes costs Redis no more than one at a time. A Redis that cannot be read is
`StoreUnavailable`, which the API answers 503 with Retry-After, as it does everywhere.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agent_host.approvals import TERMINAL
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text, unavailable_on_redis_errors
from agent_host.durable.poison import ABANDONED
from agent_host.durable.store import DELIVERED

if TYPE_CHECKING:
    from agent_host.durable.host import Host

__all__ = ["MetricsPage"]


@unavailable_on_redis_errors
class MetricsPage:
    """/metrics of one host: a scrape that arrives while another is read waits for it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._reading: asyncio.Task[str] | None = None

    async def render(self) -> str:
        if self._reading is None:
            self._reading = asyncio.create_task(_render(self.host))
            self._reading.add_done_callback(self._read)
        # shielded: a scraper that hangs up does not cancel the others' answer
        return await asyncio.shield(self._reading)

    def _read(self, task: asyncio.Task[str]) -> None:
        self._reading = None
        if not task.cancelled():
            task.exception()  # retrieved here too, in case every scraper hung up


async def _render(host: Host) -> str:
    counters: dict[str, float] = {}
    outbox_depth = resume_backlog = dead_letters = 0
    async with host.redis.pipeline(transaction=False) as pipe:
        for shard in K.shards():  # every shard counts its own; the figures are their sums
            pipe.hgetall(shard.metrics)
            for stream in (shard.outbox, shard.resume):
                pipe.xinfo_groups(stream)  # an error (no stream yet) is read as such below
                pipe.xlen(stream)
            pipe.xlen(shard.deadletter)
        replies = iter(await pipe.execute(raise_on_error=False))
    for _ in range(K.SHARDS):
        for key, count in _value(next(replies)).items():
            name = as_text(key)
            counters[name] = counters.get(name, 0.0) + float(count)
        outbox_depth += _group_backlog(next(replies), _value(next(replies)), K.OUTBOX_GROUP)
        resume_backlog += _group_backlog(next(replies), _value(next(replies)), K.RESUME_GROUP)
        dead_letters += int(_value(next(replies)))
    delivered = int(counters.get(f"{DELIVERED}ok", 0))
    lines = [
        "# HELP countersign_pending_requests Approval requests waiting for a decision.",
        "# TYPE countersign_pending_requests gauge",
        f"countersign_pending_requests {await host.store.pending_count()}",
        "# HELP countersign_decisions_total Terminal decisions by status.",
        "# TYPE countersign_decisions_total counter",
    ]
    for status in TERMINAL:
        value = int(counters.get(f"decisions_{status}", 0))
        lines.append(f'countersign_decisions_total{{status="{status}"}} {value}')
    lines += [
        "# HELP countersign_resume_latency_seconds From the last decision to the resume.",
        "# TYPE countersign_resume_latency_seconds summary",
        f"countersign_resume_latency_seconds_sum {counters.get('resume_latency_seconds_sum', 0.0)}",
        "countersign_resume_latency_seconds_count "
        f"{int(counters.get('resume_latency_seconds_count', 0))}",
        "# HELP countersign_outbox_depth Chat notifications not yet delivered.",
        "# TYPE countersign_outbox_depth gauge",
        f"countersign_outbox_depth {outbox_depth}",
        "# HELP countersign_resume_backlog Runs waiting for a worker.",
        "# TYPE countersign_resume_backlog gauge",
        f"countersign_resume_backlog {resume_backlog}",
        "# HELP countersign_chat_deliveries_total Notifications chat accepted (ok) or refused "
        "for good (failed, by the chat side's error code).",
        "# TYPE countersign_chat_deliveries_total counter",
        f'countersign_chat_deliveries_total{{result="ok"}} {delivered}',
    ]
    for name in sorted(counters):
        if name.startswith(f"{DELIVERED}failed:"):
            error = name.removeprefix(f"{DELIVERED}failed:")  # [a-z0-9_] only: store.py
            lines.append(
                f'countersign_chat_deliveries_total{{result="failed",error="{error}"}} '
                f"{int(counters[name])}"
            )
    lines += [
        "# HELP countersign_dead_letters Posts chat refused for good, kept in the dead-letter "
        "streams.",
        "# TYPE countersign_dead_letters gauge",
        f"countersign_dead_letters {dead_letters}",
    ]
    lines += [
        "# HELP countersign_entries_abandoned_total Stream entries acknowledged unhandled: "
        "their handling, and then their giving up, stopped every process that took them "
        "(copies in the shard's <stream>:abandoned).",
        "# TYPE countersign_entries_abandoned_total counter",
    ]
    for stream in ABANDONABLE:
        value = int(counters.get(f"{ABANDONED}{stream}", 0))
        lines.append(f'countersign_entries_abandoned_total{{stream="{stream}"}} {value}')
    lines += [
        "# HELP countersign_callbacks_total Decision callbacks delivered, retried after a "
        "failed attempt, and dead-lettered (GET /api/v1/callbacks/dead).",
        "# TYPE countersign_callbacks_total counter",
    ]
    for result in ("delivered", "retried", "dead"):
        value = int(counters.get(f"callbacks:{result}", 0))
        lines.append(f'countersign_callbacks_total{{result="{result}"}} {value}')
    return "\n".join(lines) + "\n"


# The streams whose consumers give entries up (the last part of their names).
ABANDONABLE = ("resume", "outbox", "callbacks")


def _value(reply: Any) -> Any:
    """A pipelined reply, raised if it is an error."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _group_backlog(groups: Any, length: int, group: str) -> int:
    """Entries not yet delivered (lag) plus delivered but not acknowledged (pending); the
    stream's length when it has no such group (or no stream: 0)."""
    if isinstance(groups, Exception):
        return length
    for info in groups:
        if as_text(info.get("name")) == group:
            return int(info.get("lag") or 0) + int(info.get("pending") or 0)
    return length
