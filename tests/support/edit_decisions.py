"""An edited approval of a paused call, made as the approval service makes one: the request
the store would post for the call, the approval domain's `ArgumentEditor` checks, then the
`Approve` completed from them. For unit tests of the runner and the hosted adapters, which
run without Redis (the service itself, through Redis and Slack, is in tests/integration)."""

from __future__ import annotations

from typing import Any

from agent_host.approvals import ApprovalRequest, ArgumentEditor, Route
from agent_host.approvals.edits import EditCheck
from agent_host.runtime.checkpoint import CallRecord, RunState
from agent_host.runtime.decisions import Approve
from agent_host.runtime.runner import Runner

__all__ = ["OneRoute", "edit", "request_for"]


class OneRoute:
    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return Route(route_id="ops", destination="C-OPS")


def request_for(state: RunState, record: CallRecord) -> ApprovalRequest:
    """The request the store records for a paused call (what the reviewer is shown)."""
    assert isinstance(record.arguments, dict)
    return ApprovalRequest(
        request_id=f"req_{state.run_id}_{record.call_id}",
        run_id=state.run_id,
        call_id=record.call_id,
        agent=state.agent,
        tool=record.tool,
        arguments=dict(record.arguments),
        call_hash=record.call_hash,
        kind="approval",
        reason=record.reason,
        severity=record.severity,
        requested_by="U0REQUESTER",
        created_at=0.0,
        expires_at=3600.0,
        route=Route(route_id="ops", destination="C-OPS"),
        editable=tuple(record.editable),
    )


async def edit(
    runner: Runner, state: RunState, record: CallRecord, edited: dict[str, Any], by: str
) -> tuple[EditCheck, Approve | None]:
    """The editor's verdict on `edited`, and the approval to record if it passed."""
    check = await ArgumentEditor(runner.agent, OneRoute()).check(request_for(state, record), edited)
    if not check.ok:
        return check, None
    if not check.changed:
        return check, Approve(decided_by=by, call_hash=record.call_hash)
    return check, Approve(
        decided_by=by,
        call_hash=record.call_hash,
        edited_arguments=check.arguments,
        original_arguments=dict(record.arguments),
        edited_hash=check.edited_hash,
        edited_by=by,
    )
