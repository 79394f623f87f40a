"""Edges of the decision path, against a real Redis with the real store, runner, workers and
approval service: a standing approval and a call its policy keeps out, deadlines set by a
lagging replica, and an empty answer from the webhook."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from agent_host.approvals import ApprovalService, Route
from agent_host.examples import ExampleEffects
from agent_host.http.application import create_app
from agent_host.runtime.agents import AgentRegistry
from agent_host.runtime.decisions import Approve
from agent_host.runtime.models.scripted import reply
from agent_host.runtime.policy import Severity, Verdict
from agent_host.runtime.tools import tool
from tests.support.agents import Recorder, registry_of, scripted, tc
from tests.support.host_env import Env, make_env, make_host
from tests.support.signing import webhook_signature

SECRET = "test-webhook-secret"


class OneOpenRoute:
    """Every call to one channel where anyone may decide alone (standing approvals offered)."""

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return Route(route_id="r-open", destination="C-OPS", expiry_seconds=3600)


def deploys_registry(rec: Recorder) -> AgentRegistry:
    """`deploy`: every call is ASK at low severity; a deploy to production is never to be
    approved for the whole run (the tool's own policy says so for that call)."""

    def judge(arguments: dict[str, Any], context: dict[str, Any]) -> Verdict:
        prod = "prod" in str(arguments["target"])
        return Verdict.ask("deploys", Severity.LOW, allow_always=not prod)

    @tool(permission=judge)
    def deploy(target: str) -> str:
        """Deploy to a target."""
        rec.invocations.append(("deploy", "", target))
        return f"deployed {target}"

    return registry_of(
        "deployer",
        [deploy],
        scripted(
            [tc("m1", "deploy", target="staging")],
            [tc("m2", "deploy", target="prod")],
            reply("done"),
        ),
    )


async def test_a_call_its_policy_keeps_out_of_standing_approvals_is_asked_again(
    redis: Redis,
) -> None:
    """A standing approval ("approve for this run") never covers a later call whose own verdict
    says `allow_always=False` (the policy's "never approve this call for the whole run"),
    even on the same route at no higher severity: the prod deploy below is asked again."""
    rec = Recorder()
    env = make_env(redis, router=OneOpenRoute(), registry=deploys_registry(rec))
    service = ApprovalService(env.store)
    run_id = await env.start("deployer", "deploy staging then prod")
    (staging,) = await env.requests(run_id)
    assert staging.allow_always
    given = await service.decide(
        staging.request_id,
        Approve(decided_by="U1", call_hash=staging.call_hash, always=True),
        via="slack",
    )
    assert given.outcome == "decided"
    await env.drain()

    requests = await env.requests(run_id)
    assert len(requests) == 2
    prod = requests[1]
    assert prod.arguments == {"target": "prod"} and not prod.allow_always
    # The policy kept this call out of any approval for the whole run: it must be asked.
    assert prod.status == "pending", (
        f"the prod deploy was {prod.status} by {prod.decided_by}'s standing approval"
    )
    assert rec.targets("deploy") == ["staging"]


class MovingOpenRoute:
    """One open route (anyone in its channel decides alone) whose channel an administrator
    changes: the default channel moved, a route rule edited to another channel."""

    def __init__(self) -> None:
        self.destination = "C-SUPPORT"

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return Route(route_id="default", destination=self.destination, expiry_seconds=3600)


async def test_a_standing_approval_does_not_follow_its_route_to_another_channel(
    redis: Redis,
) -> None:
    """Approve for this run was given by a member of the channel the route posted to. Once
    the route posts elsewhere, the people there decide: the next call is asked again."""
    rec = Recorder()
    router = MovingOpenRoute()
    registry = registry_of(
        "deployer",
        [_low_deploy(rec)],
        scripted(
            [tc("m1", "deploy", target="staging-1")],
            [tc("m2", "deploy", target="staging-2")],
            reply("done"),
        ),
    )
    env = make_env(redis, router=router, registry=registry)
    service = ApprovalService(env.store)
    run_id = await env.start("deployer", "deploy twice")
    (first,) = await env.requests(run_id)
    router.destination = "C-FINANCE"  # meanwhile, the administrator moves the route

    always = Approve(decided_by="U1", call_hash=first.call_hash, always=True)
    assert (await service.decide(first.request_id, always, via="slack")).outcome == "decided"
    await env.drain()

    second = (await env.requests(run_id))[1]
    assert (second.route.route_id, second.route.destination) == ("default", "C-FINANCE")
    assert second.status == "pending", f"{second.status} by {second.decided_by}, unseen there"
    assert rec.targets("deploy") == ["staging-1"]
    assert Approve(decided_by="U2").model_dump().get("destination") is None  # only standing


def _low_deploy(rec: Recorder) -> Any:
    @tool(permission=lambda arguments, context: Verdict.ask("deploys", Severity.LOW))
    def deploy(target: str) -> str:
        """Deploy to a target."""
        rec.invocations.append(("deploy", "", target))
        return f"deployed {target}"

    return deploy


async def test_a_replica_whose_clock_lags_posts_requests_that_can_still_be_decided(
    redis: Redis,
) -> None:
    """A request's deadline is Redis's TIME plus the route's expiry, taken inside PAUSE, like
    the clock DECIDE and the sweeper read: a worker whose own clock lags by more than the
    route's expiry still posts requests that can be decided."""
    lagging = make_env(redis, router=OneOpenRoute(), clock=lambda: time.time() - 2 * 3600)
    run_id = await lagging.start("refund-agent", "refund order 123")
    (request,) = await lagging.requests(run_id)
    seconds, micros = await redis.time()
    redis_now = int(seconds) + int(micros) / 1e6
    left = request.expires_at - redis_now
    result = await ApprovalService(lagging.store).decide(
        request.request_id, Approve(decided_by="U1", call_hash=request.call_hash), via="slack"
    )
    assert result.outcome == "decided", (
        f"a request posted a moment ago with a 1 h route expiry was {result.outcome} "
        f"({left:.0f} s left by Redis's clock)"
    )


async def test_the_webhook_cannot_answer_a_question_with_nothing(
    redis: Redis, tmp_path: Path
) -> None:
    """Seed 003's `approved` on a question becomes an Answer with the feedback as its text; a
    missing or blank feedback is refused (400, nothing decided), as the Slack form refuses
    a blank answer."""
    host, _ = make_host(redis, tmp_path, COUNTERSIGN_WEBHOOK_SECRET=SECRET)
    env = Env(redis, host.keyring, host.store, host.runner, ExampleEffects())
    run_id = await env.start("support-agent", "where is my parcel?")
    (question,) = await env.requests(run_id)
    assert question.kind == "question"
    async with TestClient(TestServer(create_app(host), host="127.0.0.1")) as client:
        raw = json.dumps({"requestId": question.request_id, "decision": "approved"}).encode()
        sig = webhook_signature(raw, SECRET)
        resp = await client.post(
            "/api/v1/webhooks/approval-response",
            data=raw,
            headers={"X-Webhook-Signature": sig, "Content-Type": "application/json"},
        )
        body = await resp.json()
    current = await env.store.get_request(question.request_id)
    assert current is not None
    assert resp.status == 400 and current.status == "pending", (
        f"a blank answer was accepted: HTTP {resp.status} {body}, question {current.status} "
        f"with {current.decision!r}"
    )
