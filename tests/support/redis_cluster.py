"""A real Redis Cluster on loopback for the tests: `masters` cluster-enabled redis-servers
joined with `redis-cli --cluster create`, no replicas.

Named `LocalRedisCluster` so it is never mistaken for redis-py's client,
`redis.asyncio.cluster.RedisCluster`, which the same tests use to talk to it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Self

import redis

from agent_host.durable.redis_server import RedisServer, find_executable
from agent_host.errors import StoreError

__all__ = ["START_WITHIN", "LocalRedisCluster"]

START_WITHIN = 15.0  # seconds: each node's PING, the cluster's creation, `cluster_state:ok`


class LocalRedisCluster:
    """`masters` cluster-enabled servers on free ports, in `data_dir/node-<n>`."""

    def __init__(self, data_dir: Path, masters: int = 3, *, host: str = "127.0.0.1") -> None:
        cluster_args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
        self.nodes = [
            RedisServer(Path(data_dir) / f"node-{i}", host=host, extra_args=cluster_args)
            for i in range(masters)
        ]

    @property
    def url(self) -> str:
        """One node's URL: a cluster client discovers the others from it."""
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def start(self, timeout: float = START_WITHIN) -> Self:
        """Bounded: every node answers and the cluster reports `ok` within `timeout` s each,
        else StoreError; a failed start stops whatever it had started."""
        try:
            for node in self.nodes:
                node.start(timeout)
            addresses = [f"{node.host}:{node.port}" for node in self.nodes]
            create = ["--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"]
            done = subprocess.run(
                [find_executable("redis-cli"), *create],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode != 0:
                raise StoreError(
                    f"redis-cli --cluster create failed (exit {done.returncode}):\n"
                    f"{done.stdout}{done.stderr}"
                )
            self._wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ok(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self.nodes)
        while pending:
            client = redis.Redis.from_url(pending[0].url, socket_timeout=1, decode_responses=True)
            with client:
                info: object = client.cluster("INFO")
            state = info.get("cluster_state") if isinstance(info, dict) else str(info)
            if state == "ok" or "cluster_state:ok" in str(state):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise StoreError(
                    f"Redis Cluster at {pending[0].url} is not ok after {timeout:g}s "
                    f"(cluster_state={state!r}): see {pending[0].log_path}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
