"""What is stored at rest, read back raw: every key of a Redis database (any type, every
field, member and stream entry) and every file under a directory (a Redis data dir: its
AOF). For the tests that look for a canary string where nothing readable should be."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_host.durable.connections import as_text
from agent_host.durable.crypto import kid_of
from agent_host.durable.redis_ledger import FINISHED
from agent_host.durable.sealed_fields import PREFIX

__all__ = ["files_holding", "keys_holding", "raw_contents", "sealed_kids"]


async def raw_contents(redis: Any) -> dict[str, tuple[str, list[bytes]]]:
    """key -> (type, every byte string stored under it: the key's name, values, hash
    fields, members, scores, stream entry ids, field names and values)."""
    found: dict[str, tuple[str, list[bytes]]] = {}
    async for raw_key in redis.scan_iter(count=1000):
        key = as_text(raw_key)
        kind = as_text(await redis.type(raw_key))
        chunks: list[bytes] = [_bytes(raw_key)]
        if kind == "string":
            chunks.append(_bytes(await redis.get(raw_key)))
        elif kind == "hash":
            for name, value in (await redis.hgetall(raw_key)).items():
                chunks += [_bytes(name), _bytes(value)]
        elif kind == "list":
            chunks += [_bytes(v) for v in await redis.lrange(raw_key, 0, -1)]
        elif kind == "set":
            chunks += [_bytes(v) for v in await redis.smembers(raw_key)]
        elif kind == "zset":
            for member, score in await redis.zrange(raw_key, 0, -1, withscores=True):
                chunks += [_bytes(member), repr(score).encode()]
        elif kind == "stream":
            for entry_id, fields in await redis.xrange(raw_key):
                chunks.append(_bytes(entry_id))
                for name, value in fields.items():
                    chunks += [_bytes(name), _bytes(value)]
        else:
            raise AssertionError(f"key {key} has a type this scan does not read: {kind}")
        found[key] = (kind, chunks)
    return found


async def keys_holding(redis: Any, needle: str) -> list[str]:
    """Every key whose name or content holds `needle` (case-insensitive)."""
    wanted = needle.lower().encode()
    contents = await raw_contents(redis)
    return sorted(
        k for k, (_, chunks) in contents.items() if any(wanted in c.lower() for c in chunks)
    )


def files_holding(directory: Path, needle: str) -> list[Path]:
    """Every file under `directory` whose bytes hold `needle` (case-insensitive)."""
    wanted = needle.lower().encode()
    return [path for path in _files(directory) if wanted in path.read_bytes().lower()]


async def sealed_kids(redis: Any) -> dict[str, set[str]]:
    """key -> the key ids of every sealed value stored under it (hash values, stream
    values, the ledger's `done:` and `failed:` results)."""
    kids: dict[str, set[str]] = {}
    for key, (_, chunks) in (await raw_contents(redis)).items():
        for chunk in chunks:
            text = chunk.decode(errors="replace")
            for prefix in FINISHED:
                text = text.removeprefix(prefix)
            if text.startswith(PREFIX):
                blob = base64.b64decode(text[len(PREFIX) :])
                kids.setdefault(key, set()).add(kid_of(blob))
    return kids


def _files(directory: Path) -> Iterator[Path]:
    return (p for p in sorted(directory.rglob("*")) if p.is_file())


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
