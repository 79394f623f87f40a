"""`countersign check`'s durability line for every AOF setting Redis can report, and for a
Redis that refuses CONFIG (the integration tests run the command against real servers)."""

from __future__ import annotations

from bot.check import _durability


def test_what_each_aof_setting_can_lose_is_said_and_an_unsafe_one_fails() -> None:
    always = _durability(("yes", "always"), embedded=False)
    assert always.ok and "nothing acknowledged is lost" in always.detail
    everysec = _durability(("yes", "everysec"), embedded=False)
    assert everysec.ok and "could run again" in everysec.detail
    off = _durability(("no", "everysec"), embedded=False)
    assert not off.ok and off.detail.endswith("set appendonly yes")
    left_to_the_system = _durability(("yes", "no"), embedded=False)
    assert not left_to_the_system.ok
    assert "appendfsync is no" in left_to_the_system.detail
    assert "set appendfsync always" in left_to_the_system.detail


def test_a_redis_that_refuses_config_is_not_failed_but_told_what_to_run_with() -> None:
    refused = _durability(None, embedded=False)
    assert refused.ok and "refuses CONFIG" in refused.detail
    assert "appendonly yes and appendfsync always" in refused.detail
    embedded = _durability(None, embedded=True)  # the embedded server's settings are known
    assert embedded.ok and "AOF on, appendfsync everysec" in embedded.detail
