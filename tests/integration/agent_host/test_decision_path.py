"""The one decision path (approval service + DECIDE) against a real Redis: unique request ids,
decisions that must fit the request's kind, Redis's clock for deadlines, the webhook as one
identity, and standing approvals that never reach beyond their route and severity."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import ApprovalService, Route
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.decisions import Answer, Approve, Reject, RequestChanges
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.pause import pause
from agent_host.runtime.policy import Severity, Verdict
from agent_host.runtime.tools import tool
from tests.support.agents import Recorder, registry_of, scripted, tc
from tests.support.host_env import make_env
from tests.support.keyspace import pass_deadline
from tests.support.routers import QuorumRouter, TwoRoutes


def approve_then_ask_registry(rec: Recorder) -> AgentRegistry:
    """An ASK tool that, once approved, asks a question while it runs (seed 002 after 001)."""

    def gate(arguments: dict[str, Any], context: dict[str, Any]) -> Verdict:
        return Verdict.ask("moves money", Severity.HIGH)

    @tool(permission=gate)
    def transfer(target: str) -> str:
        """Transfer to a target; asks which account when run."""
        answer = pause(f"Which account for {target}?", Severity.HIGH)
        rec.invocations.append(("transfer", "", f"{target}:{answer}"))
        return f"sent from {answer}"

    return registry_of(
        "payer", [transfer], scripted([tc("m1", "transfer", target="acme")], reply("done"))
    )


async def test_a_question_asked_by_an_approved_tool_gets_its_own_request_and_pause(
    redis: Redis,
) -> None:
    rec = Recorder()
    env = make_env(redis, registry=approve_then_ask_registry(rec))
    service = ApprovalService(env.store)
    run_id = await env.start("payer", "pay acme")
    (approval,) = await env.requests(run_id)
    assert approval.kind == "approval"
    result = await service.decide(
        approval.request_id, Approve(decided_by="U1", call_hash=approval.call_hash), via="slack"
    )
    assert result.outcome == "decided"
    await env.drain()

    approval, question = await env.requests(run_id)
    assert question.kind == "question" and question.status == "pending"
    assert question.request_id != approval.request_id
    assert question.pause_id != approval.pause_id
    # The approval's record (who, when) is kept as it was.
    assert approval.status == "approved" and approval.decided_by == "U1"

    # A Reject form opened on the approval, submitted now, changes nothing.
    stale = await service.decide(
        approval.request_id, Reject(decided_by="U2"), via="slack", pause_id=approval.pause_id
    )
    assert stale.outcome == "already_decided"
    # A form that names the request but another pause is refused as stale.
    other = await service.decide(
        question.request_id,
        Answer(text="x", decided_by="U2"),
        via="slack",
        pause_id=approval.pause_id,
    )
    assert other.outcome == "stale"
    # Replaying the approval (the webhook's exact decision) does not touch the question.
    replay = await service.decide(approval.request_id, Approve(decided_by="x"), via="webhook")
    assert replay.outcome == "already_decided"
    current = await env.store.get_request(question.request_id)
    assert current is not None and current.status == "pending"

    answered = await service.decide(
        question.request_id, Answer(text="savings", decided_by="U2"), via="slack"
    )
    assert answered.outcome == "decided"
    await env.drain()
    assert await env.status(run_id) == "succeeded"
    # The tool ran once, up to its question; the answer became its result (seed 002).
    assert rec.invocations == []
    (call,) = (await env.final_state(run_id)).calls
    assert call.outcome == "answered" and call.result == "savings"


async def test_a_decision_must_fit_the_requests_kind(redis: Redis) -> None:
    env = make_env(redis)
    approval_run = await env.start("refund-agent", "refund order 123")
    question_run = await env.start("support-agent", "where is my parcel?")
    (approval,) = await env.requests(approval_run)
    (question,) = await env.requests(question_run)
    service = ApprovalService(env.store)

    answer_to_approval = await service.decide(
        approval.request_id, Answer(text="yes", decided_by="U1"), via="slack"
    )
    assert answer_to_approval.outcome == "wrong_kind"
    for wrong in (Approve(decided_by="U1"), RequestChanges(feedback="x", decided_by="U1")):
        assert (await service.decide(question.request_id, wrong, via="slack")).outcome == (
            "wrong_kind"
        )
    # The script itself refuses it too, whoever calls it.
    raw = await env.store.decide(approval.request_id, Answer(text="yes", decided_by="U1"))
    assert raw.outcome == "wrong_kind"
    for request in (approval, question):
        current = await env.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"


async def test_deadlines_use_redis_time_not_the_callers_clock(redis: Redis) -> None:
    lagging = make_env(redis, clock=lambda: time.time() - 3600)  # an hour behind
    run_id = await lagging.start("refund-agent", "refund order 123")
    (request,) = await lagging.requests(run_id)
    await pass_deadline(redis, request.request_id)
    late = await ApprovalService(lagging.store).decide(
        request.request_id, Approve(decided_by="U1"), via="slack"
    )
    assert late.outcome == "past_deadline"

    ahead = make_env(redis, clock=lambda: time.time() + 10**6)
    run_id = await ahead.start("refund-agent", "refund order 123")
    (fresh,) = await ahead.requests(run_id)
    from agent_host.durable.sweeper import Sweeper

    # Only the request that is due by Redis's clock expires, not the one due by the
    # sweeper's own clock (a million seconds ahead).
    assert await Sweeper(ahead.store).sweep() == 1
    current = await ahead.store.get_request(fresh.request_id)
    assert current is not None and current.status == "pending"


def refunds_registry(rec: Recorder, *amounts: int) -> AgentRegistry:
    def judge(arguments: dict[str, Any], context: dict[str, Any]) -> Verdict:
        big = int(arguments["target"]) >= 1000
        return Verdict.ask("refund", Severity.CRITICAL if big else Severity.LOW)

    @tool(permission=judge)
    def refund(target: str) -> str:
        """Refund an amount."""
        rec.invocations.append(("refund", "", target))
        return f"refunded {target}"

    turns = [[tc(f"m{n}", "refund", target=str(a))] for n, a in enumerate(amounts)]
    return registry_of("refunder", [refund], scripted(*turns, reply("done")))


async def test_a_standing_approval_never_reaches_another_route_or_a_higher_severity(
    redis: Redis,
) -> None:
    rec = Recorder()
    env = make_env(redis, router=TwoRoutes(), registry=refunds_registry(rec, 5, 7, 5000))
    service = ApprovalService(env.store)
    run_id = await env.start("refunder", "refund things")
    (first,) = await env.requests(run_id)
    given = await service.decide(
        first.request_id, Approve(decided_by="U1", always=True), via="slack"
    )
    assert given.outcome == "decided"
    await env.drain()

    requests = await env.requests(run_id)
    assert len(requests) == 3
    covered, critical = requests[1], requests[2]
    # The second small refund: same route, same severity, approved by the standing decision,
    # with its own request and audit entry naming who gave it.
    assert covered.status == "approved" and covered.decided_by == "U1" and not covered.asked
    assert getattr(covered.decision, "standing_of", None) == first.request_id
    audit = await env.store.audit(run_id)
    assert any(
        e.get("request_id") == covered.request_id and e.get("event") == "approved" for e in audit
    )
    # The big refund goes to named reviewers: asked, not covered, nothing ran for it.
    assert critical.status == "pending" and critical.route.route_id == "r-critical"
    assert not critical.allow_always  # not even offered there
    assert rec.targets("refund") == ["5", "7"]

    refused = await service.decide(
        critical.request_id, Approve(decided_by="U8", always=True), via="slack"
    )
    assert refused.outcome == "refused"


async def test_the_webhook_is_one_identity_and_cannot_fake_a_quorum(redis: Redis) -> None:
    class Quorum2:
        async def route(self, agent: str, tool: str, severity: str) -> Route:
            return Route(route_id="q2", quorum=2)

    env = make_env(redis, router=Quorum2())
    service = ApprovalService(env.store)
    run_id = await env.start("refund-agent", "refund order 123")
    (request,) = await env.requests(run_id)
    one = await service.decide(request.request_id, Approve(decided_by="U-alice"), via="webhook")
    two = await service.decide(request.request_id, Approve(decided_by="U-bob"), via="webhook")
    assert one.outcome == "progress" and two.outcome == "duplicate_vote"
    current = await env.store.get_request(request.request_id)
    assert current is not None and current.status == "pending"
    assert current.approvals == ["webhook"]
    # A person completes the quorum; nobody is named who did not decide.
    done = await service.decide(request.request_id, Approve(decided_by="U1"), via="slack")
    assert done.outcome == "decided"
    assert done.request is not None and done.request.approvals == ["webhook", "U1"]

    class WebhookDecides:
        async def route(self, agent: str, tool: str, severity: str) -> Route:
            return Route(route_id="q2w", quorum=2, webhook_completes_quorum=True)

    env2 = make_env(redis, router=WebhookDecides())
    run2 = await env2.start("refund-agent", "refund order 123")
    (request2,) = await env2.requests(run2)
    alone = await ApprovalService(env2.store).decide(
        request2.request_id, Approve(decided_by="ci"), via="webhook"
    )
    assert alone.outcome == "decided"


async def test_a_webhook_caller_s_claim_can_refuse_a_vote_never_add_one(redis: Redis) -> None:
    """The name a webhook caller gives is never trusted to decide, only to refuse: the
    run's requester named as the decider is refused as in Slack, and a vote claimed for a
    reviewer is theirs, so they cannot vote again in Slack and fill a quorum of two alone
    (nor the webhook after them)."""
    env = make_env(redis, router=QuorumRouter(2))
    service = ApprovalService(env.store)
    (claimed,) = await env.requests(await env.start("refund-agent", "refund order 123"))
    rid = claimed.request_id
    first = await service.decide(rid, Approve(decided_by="u-BOB"), via="webhook")  # any case
    again = await service.decide(rid, Approve(decided_by="U-bob"), via="slack")
    assert (first.outcome, again.outcome) == ("progress", "duplicate_vote")
    done = await service.decide(rid, Approve(decided_by="U-carol"), via="slack")
    assert done.outcome == "decided"
    assert done.request is not None and done.request.approvals == ["webhook", "U-carol"]

    (voted,) = await env.requests(await env.start("refund-agent", "refund order 123"))
    in_slack = await service.decide(voted.request_id, Approve(decided_by="U-bob"), via="slack")
    claim = await service.decide(voted.request_id, Approve(decided_by="U-BOB"), via="webhook")
    assert (in_slack.outcome, claim.outcome) == ("progress", "duplicate_vote")
    current = await env.store.get_request(voted.request_id)
    assert current is not None and current.approvals == ["U-bob"]

    class WebhookDecides:  # the webhook decides whatever the quorum: a claim blocks nothing
        async def route(self, agent: str, tool: str, severity: str) -> Route:
            return Route(route_id="q2w", quorum=2, webhook_completes_quorum=True)

    env.store.router = WebhookDecides()
    (last,) = await env.requests(await env.start("refund-agent", "refund order 123"))
    await service.decide(last.request_id, Approve(decided_by="U-bob"), via="slack")
    closing = await service.decide(last.request_id, Approve(decided_by="U-bob"), via="webhook")
    assert closing.outcome == "decided"

    own = make_env(redis)  # one approval decides; the requester may not approve their own
    (mine,) = await own.requests(await own.start("refund-agent", "refund order 123", "U-alice"))
    owned = ApprovalService(own.store)
    for decision in (Approve(decided_by="U-alice"), Reject(decided_by="U-alice")):
        refused = await owned.decide(mine.request_id, decision, via="webhook")
        assert refused.outcome == "refused" and "U-alice" in refused.reason
    unchanged = await own.store.get_request(mine.request_id)
    assert unchanged is not None and unchanged.status == "pending" and not unchanged.approvals
    other = await owned.decide(mine.request_id, Approve(decided_by="U-dan"), via="webhook")
    assert other.outcome == "decided"
    await own.drain()
    assert await own.status(mine.run_id) == "succeeded"
