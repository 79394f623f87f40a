"""What `countersign check` reads of Redis's memory: what Redis counts against its
maxmemory, and the limit and policy from INFO where CONFIG is refused (as managed services
do), so a full Redis is never passed as "maxmemory not read"."""

from __future__ import annotations

from pathlib import Path

from agent_host.durable.eviction import Eviction
from agent_host.durable.reach import reach_redis
from agent_host.settings import load_settings
from tests.support.redis_fixtures import RedisServerFactory


async def test_a_redis_that_refuses_config_has_its_limit_read_from_info(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    limits = ["--maxmemory", "1gb", "--maxmemory-policy", "volatile-lru"]
    server = redis_server_factory(extra_args=[*limits, "--rename-command", "CONFIG", ""])
    settings = load_settings({"REDIS_URL": server.url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})

    reach = await reach_redis(settings)

    assert reach.eviction == Eviction("volatile-lru", 1 << 30)
    assert reach.used_memory is not None and 0 < reach.used_memory < 1 << 30
