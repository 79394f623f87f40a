"""`countersign check`'s memory line for each maxmemory policy: a Redis is full (and the
line fails) only at its limit under a policy that then refuses writes; one that drops keys
instead is the eviction line's problem, and never said to refuse writes."""

from __future__ import annotations

from agent_host.durable.eviction import Eviction
from bot.check import _memory

MB = 1 << 20


def test_a_redis_at_its_limit_that_refuses_writes_fails_with_what_to_do() -> None:
    for policy in ("noeviction", "volatile-lru", "volatile-ttl"):
        full = _memory(16 * MB + 1, Eviction(policy, 16 * MB))  # Redis refuses once over
        assert not full.ok, policy
        assert full.detail.startswith("Redis is full: 16.0 MB in use of a 16.0 MB maxmemory")
        assert "raise Redis's maxmemory, or delete other applications' keys" in full.detail
        assert "never countersign's cs:* keys" in full.detail


def test_below_its_limit_redis_is_not_full_and_nearly_full_is_said() -> None:
    room = _memory(8 * MB, Eviction("noeviction", 16 * MB))
    assert (room.ok, room.detail) == (True, "8.0 MB in use of a 16.0 MB maxmemory (50%)")
    nearly = _memory(16 * MB - 1, Eviction("noeviction", 16 * MB))
    assert nearly.ok and "(99%): make room before it is full" in nearly.detail
    at_the_limit = _memory(16 * MB, Eviction("noeviction", 16 * MB))  # still takes writes
    assert at_the_limit.ok and "(100%): make room before it is full" in at_the_limit.detail


def test_a_redis_that_drops_keys_is_never_said_to_refuse_writes() -> None:
    over = _memory(21 * MB, Eviction("allkeys-lru", 16 * MB))
    assert (over.ok, over.detail) == (True, "21.0 MB in use of a 16.0 MB maxmemory (131%)")


def test_no_limit_and_nothing_read_are_said_not_failed() -> None:
    unlimited = _memory(1536 * 1024, Eviction("noeviction", 0))
    assert (unlimited.ok, unlimited.detail) == (True, "1.5 MB in use (no maxmemory)")
    assert _memory(1536 * 1024, None).detail == "1.5 MB in use (maxmemory not read)"
    refused = _memory(None, None)
    assert (refused.ok, refused.detail) == (True, "not read (this Redis refuses INFO)")
