"""A sample of the in-process bot suite (tests/bot) run against a real 3-master Redis Cluster.

Each sampled flow is the bot suite's own test function, called with a cluster node's URL in
place of its `redis_url` fixture: `running_stack` hands that URL to `build`, whose
`open_redis` detects the cluster and uses `redis.asyncio.cluster.RedisCluster`. The bot tests
expect a fresh database, so `flushed_cluster_url` empties every master first (what the
`redis_url` fixture's FLUSHDB does on a single server).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from agent_host import keys as K
from bot import blocks
from tests.bot import (
    test_approve_flow,
    test_bot_commands,
    test_bot_expiry,
    test_bot_modals,
    test_bot_reviewers,
    test_bot_routing,
)
from tests.bot.stack import ADMIN, CHANNEL, OPS, REVIEWER, running_stack

# (module, test function): approve, reject with a reason, `/approvals pending [all]`,
# `/approvals route add|remove` (admin), a 1-second route's expiry, quorum 2, routing.
SAMPLE: list[tuple[ModuleType, str]] = [
    (test_approve_flow, "test_approve_updates_message_resumes_run_and_posts_outcome"),
    (test_approve_flow, "test_outsider_and_self_approval_are_refused_and_change_nothing"),
    (test_bot_modals, "test_reject_with_reason_via_modal_reaches_the_model_and_the_message"),
    (test_bot_commands, "test_pending_lists_this_channel_and_pending_all_lists_every_channel"),
    (test_bot_commands, "test_pending_paginates_with_a_next_cursor"),
    (test_bot_commands, "test_routes_and_route_add_remove_by_admin"),
    (test_bot_expiry, "test_request_expires_on_a_short_route_expiry"),
    (test_bot_reviewers, "test_quorum_of_two_needs_two_different_reviewers"),
    (test_bot_routing, "test_requests_land_in_the_first_matching_route_or_the_default_channel"),
]


@pytest.mark.parametrize(
    ("module", "name"),
    [pytest.param(m, n, id=f"{m.__name__.rsplit('.', 1)[-1]}::{n}") for m, n in SAMPLE],
)
async def test_bot_flow_on_the_cluster(
    module: ModuleType, name: str, flushed_cluster_url: str, tmp_path: Path
) -> None:
    flow: Callable[[str, Path], Awaitable[None]] = getattr(module, name)
    await flow(flushed_cluster_url, tmp_path)


def _listed(text: str) -> list[str]:
    return re.findall(r"^• `([^`]+)`", text, flags=re.M)


def _next(text: str) -> str | None:
    found = re.search(r"next:(\S+?)`", text)
    return found.group(1) if found else None


async def test_stack_uses_cluster_mode_and_lists_runs_of_many_shards_once(
    flushed_cluster_url: str, tmp_path: Path
) -> None:
    """The in-process stack talks cluster; `/approvals pending all` pages over every shard."""
    async with running_stack(flushed_cluster_url, tmp_path) as stack:
        assert isinstance(stack.host.redis, AsyncRedisCluster)
        assert isinstance(stack.bot.routes.redis, AsyncRedisCluster)
        slash = stack.standin.slash
        added = await slash(ADMIN, CHANNEL, "/approvals", f"route add agent=cleanup-agent channel={OPS}")
        assert "Added route `r1`" in (added.json() or {}).get("text", ""), added

        runs = [await stack.start_run("refund-agent", "refund order 123") for _ in range(12)]
        runs.append(await stack.start_run("cleanup-agent", "delete /tmp/cluster.txt"))
        assert len({K.Keys(r).shard for r in runs}) > 1, "all runs landed in one shard"
        requests = [(await stack.pending_requests(r))[0] for r in runs]
        nodes = {
            stack.host.redis.get_node_from_key(K.Keys(r).run).name  # type: ignore[attr-defined]
            for r in runs
        }
        assert len(nodes) > 1, f"all runs on one master: {nodes}"

        seen: list[str] = []
        reply: Any = (await slash(REVIEWER, CHANNEL, "/approvals", "pending all")).json()
        for _ in range(5):
            seen += _listed(reply["text"])
            cursor = _next(reply["text"])
            if cursor is None:
                break
            page = await slash(REVIEWER, CHANNEL, "/approvals", f"pending all next:{cursor}")
            reply = page.json()
        assert len(seen) == len(set(seen)), seen
        assert sorted(seen) == sorted(r.request_id for r in requests)
        here = (await slash(REVIEWER, OPS, "/approvals", "pending")).json()["text"]
        assert _listed(here) == [requests[-1].request_id]

        for request in requests[:3]:
            assert (await stack.click(REVIEWER, request, blocks.APPROVE)).status == 200
        for request in requests[:3]:
            await stack.run_status(request.run_id, "succeeded")
        assert stack.effects.count("refund") == 3
        assert await stack.host.store.pending_count() == len(requests) - 3
