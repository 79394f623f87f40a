"""The hostile tests' fixture: one running stack (with its cast) per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_host.durable.redis_server import RedisServer

from .harness import Hostile, Snapshot, hostile_stack


@pytest.fixture(scope="module")
def hostile(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hostile]:
    with hostile_stack(redis_server.url, tmp_path_factory.mktemp("hostile")) as running:
        yield running


@pytest.fixture
def before(hostile: Hostile) -> Snapshot:
    """The settled state at the start of a test, to compare every example against."""
    return hostile.settle()
