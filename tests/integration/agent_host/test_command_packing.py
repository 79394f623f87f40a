"""Commands packed by hiredis on every connection countersign opens: what Redis stores is
what was sent, whatever the value; a value Redis cannot take is refused before anything is
sent, with redis-py's message, and the connection goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import DataError

from agent_host.durable.connections import open_redis
from agent_host.settings import load_settings


@pytest.fixture
async def client(redis_url: str, tmp_path: Path) -> AsyncIterator[Redis]:
    opened, _ = await open_redis(
        load_settings({"REDIS_URL": redis_url, "COUNTERSIGN_DATA_DIR": str(tmp_path)})
    )
    yield opened
    await opened.aclose()


async def test_values_of_every_kind_reach_redis_as_sent(client: Redis) -> None:
    values: dict[str, bytes | str | int | float | memoryview] = {
        "bytes": b"\x00\r\n\xff binary",
        "text": "refund — 10 € to ünïcödé \r\n",
        "int": -(2**63),
        "float": 0.1 + 0.2,
        "big": b"x" * 200_000,
        "view": memoryview(b"a view"),
        "empty": b"",
    }
    async with client.pipeline(transaction=True) as pipe:
        for name, value in values.items():
            pipe.set(f"packing:{name}", value)
        await pipe.execute()
    for name, value in values.items():
        stored = await client.get(f"packing:{name}")
        expected = (
            bytes(value)
            if isinstance(value, bytes | memoryview)
            else value.encode()
            if isinstance(value, str)
            else repr(value).encode()
        )
        assert stored == expected, name
    # A command name of two words is two arguments, as redis-py sends it.
    assert await client.execute_command("CONFIG GET", "maxmemory-policy")


@pytest.mark.parametrize("value", [None, True])
async def test_a_value_redis_cannot_take_is_refused_saying_which_and_nothing_is_sent(
    client: Redis, value: object
) -> None:
    with pytest.raises(DataError, match=type(value).__name__):
        await client.set("packing:refused", value)  # type: ignore[arg-type]
    assert await client.exists("packing:refused") == 0
    assert await client.ping()  # the connection was not left half-written


async def test_the_connections_pack_with_hiredis(client: Redis) -> None:
    """redis-py's own asyncio packer cuts a large command into chunks; hiredis packs it in
    one buffer, in C (about a ninth of the CPU for a script call of a dozen keys)."""
    connection = client.connection_pool.make_connection()
    packed = connection.pack_command("SET", "packing:big", b"x" * 100_000)
    assert len(packed) == 1 and packed[0].endswith(b"x" * 100_000 + b"\r\n")
