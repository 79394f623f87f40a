"""A real three-master Redis Cluster on loopback for the tests of this package.

`cluster`: one cluster per test module (bounded start, stopped at teardown).
`flushed_cluster_url`: that cluster emptied (FLUSHALL on every master) before the test, for
tests that expect a fresh database the way `tests/support/redis_fixtures.py`'s `redis_url`
gives one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_sync

from agent_host.durable.redis_server import RedisCluster

MASTERS = 3
START_WITHIN = 15.0  # seconds: each node's PING and the cluster reaching `ok`


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    started = RedisCluster(tmp_path_factory.mktemp("cluster"), masters=MASTERS)
    # Bounded: each node answers PING and every node reports cluster_state:ok within
    # START_WITHIN s, else StoreError; a failed start stops whatever it had started.
    started.start(timeout=START_WITHIN)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def flushed_cluster_url(cluster: RedisCluster) -> str:
    """A node URL of the module's cluster, every master emptied first."""
    for url in cluster.urls:
        with redis_sync.Redis.from_url(url, socket_timeout=2) as node:
            node.flushall()
    return cluster.url
