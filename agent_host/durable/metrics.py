"""/metrics in Prometheus' text format, read from Redis so every replica reports the same."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_host.approvals import TERMINAL
from agent_host.durable import keys as K
from agent_host.durable.connections import as_text
from agent_host.durable.store import DELIVERED

if TYPE_CHECKING:
    from agent_host.durable.host import Host

__all__ = ["render_metrics"]


async def render_metrics(host: Host) -> str:
    redis = host.redis
    counters: dict[str, float] = {}
    outbox_depth = resume_backlog = dead_letters = 0
    for shard in K.shards():  # every shard counts its own; the figures are their sums
        raw: dict[Any, Any] = await redis.hgetall(shard.metrics)
        for key, count in raw.items():
            name = as_text(key)
            counters[name] = counters.get(name, 0.0) + float(count)
        outbox_depth += await _group_backlog(redis, shard.outbox, K.OUTBOX_GROUP)
        resume_backlog += await _group_backlog(redis, shard.resume, K.RESUME_GROUP)
        dead_letters += int(await redis.xlen(shard.deadletter))
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
        "# HELP countersign_callbacks_total Decision callbacks delivered, retried after a "
        "failed attempt, and dead-lettered (GET /api/v1/callbacks/dead).",
        "# TYPE countersign_callbacks_total counter",
    ]
    for result in ("delivered", "retried", "dead"):
        value = int(counters.get(f"callbacks:{result}", 0))
        lines.append(f'countersign_callbacks_total{{result="{result}"}} {value}')
    return "\n".join(lines) + "\n"


async def _group_backlog(redis: Any, stream: str, group: str) -> int:
    """Entries not yet delivered (lag) plus delivered but not acknowledged (pending)."""
    try:
        groups = await redis.xinfo_groups(stream)
    except Exception:
        return int(await redis.xlen(stream)) if await redis.exists(stream) else 0
    for info in groups:
        name = info.get("name")
        if as_text(name) == group:
            return int(info.get("lag") or 0) + int(info.get("pending") or 0)
    return int(await redis.xlen(stream))
