"""What one Redis round trip costs the client in CPU: countersign's redis-py client (through
its pool and its hiredis packing) against a bare asyncio protocol that packs and parses
with hiredis and does nothing else, the floor any asyncio client pays.

    python -m bench.round_trip          # 20,000 GETs a run, three runs

Each run times, in CPU seconds of this process, a lone GET awaited at a time, and two GETs
written at once (a redis-py pipeline against two commands in one write). A Redis of its
own, on loopback TCP, as the other benchmarks reach theirs. Not part of `make bench`: it
measures the client alone, to say what a leaner client could save of an approval cycle.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import hiredis
from redis.asyncio import Redis

from agent_host.durable.connection_pool import WaitingConnectionPool
from agent_host.durable.connections import _client_options
from agent_host.durable.redis_server import RedisServer

from .common import run_as_serve_runs

GETS = 20_000
RUNS = 3


class BareProtocol(asyncio.Protocol):
    """Commands written as they come; replies matched to them in order."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.transport: Any = None  # (uvloop's is not an asyncio.Transport)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            self.waiting.popleft().set_result(reply)

    def call(self, *args: str) -> asyncio.Future[Any]:
        reply = asyncio.get_running_loop().create_future()
        self.waiting.append(reply)
        self.transport.write(hiredis.pack_command(args))  # type: ignore[arg-type]  # (stub: a 1-tuple)
        return reply


def _per_call(started: float, count: int) -> float:
    return (time.process_time() - started) / count * 1e6


async def _one_run(client: Redis, bare: BareProtocol) -> dict[str, float]:
    started = time.process_time()
    for _ in range(GETS):
        await client.get("k")
    redis_py = _per_call(started, GETS)
    started = time.process_time()
    for _ in range(GETS):
        await bare.call("GET", "k")
    lean = _per_call(started, GETS)
    started = time.process_time()
    for _ in range(GETS):
        async with client.pipeline(transaction=False) as pipe:
            pipe.get("k")
            pipe.get("k")
            await pipe.execute()
    redis_py_two = _per_call(started, GETS)
    started = time.process_time()
    for _ in range(GETS):
        first, second = bare.call("GET", "k"), bare.call("GET", "k")
        await first
        await second
    lean_two = _per_call(started, GETS)
    return {
        "get_redis_py_us": round(redis_py, 1),
        "get_bare_us": round(lean, 1),
        "two_gets_redis_py_pipeline_us": round(redis_py_two, 1),
        "two_gets_bare_one_write_us": round(lean_two, 1),
    }


async def measure(url: str) -> list[dict[str, float]]:
    options = _client_options(url, one_shot=False)  # as `serve` connects
    client = Redis.from_pool(WaitingConnectionPool.from_url(url, **options))
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    _, bare = await asyncio.get_running_loop().create_connection(BareProtocol, host, int(port))
    try:
        await client.set("k", "v" * 100)
        return [await _one_run(client, bare) for _ in range(RUNS)]
    finally:
        bare.transport.close()
        await client.aclose()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="countersign-rt-") as tmp:
        server = RedisServer(Path(tmp) / "redis", appendfsync="everysec").start()
        try:
            for figures in run_as_serve_runs(measure(server.url)):
                print(figures)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
