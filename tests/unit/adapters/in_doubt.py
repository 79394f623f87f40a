"""A case both adapters' tests share: a paused run's one call, claimed in the ledger before
and never finished (a worker died in it, or another runs it), then approved."""

from __future__ import annotations

from agent_host.runtime.checkpoint import CallRecord
from agent_host.runtime.decisions import Approve
from agent_host.runtime.ledger import InMemoryLedger, hosted_entry
from agent_host.runtime.runner import Paused, Runner, Succeeded


async def resumed_with_its_call_in_doubt(
    runner: Runner, ledger: InMemoryLedger, paused: Paused
) -> CallRecord:
    """The run resumed, its one pending call approved and found started before; the call's
    record once the run succeeded."""
    [pending] = paused.pending
    started = paused.state.call(pending.call_id)
    assert started is not None
    await ledger.claim(paused.state.run_id, hosted_entry(started))  # never finished
    done = await runner.resume(
        paused.state, {pending.call_id: Approve(decided_by="U_LEAD", call_hash=pending.call_hash)}
    )
    assert isinstance(done, Succeeded), done
    record = done.state.call(pending.call_id)
    assert record is not None
    return record
