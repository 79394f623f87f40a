"""Shared test set-up: no real model calls, ever; real Redis servers from tests/support."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from agent_host.runtime.models import set_allow_model_requests
from bot.library_loggers import LIBRARY_LOGGERS

pytest_plugins = ["tests.support.redis_fixtures", "tests.support.watchdog"]

set_allow_model_requests(False)

try:  # the optional frameworks' own guards: no real model, no trace export
    import pydantic_ai.models

    pydantic_ai.models.ALLOW_MODEL_REQUESTS = False
except ImportError:
    pass
try:
    import agents

    agents.set_tracing_disabled(True)
except ImportError:
    pass


@pytest.fixture(autouse=True)
def library_log_levels_unset() -> Iterator[None]:
    """Each test starts with the Slack libraries' loggers as a fresh process has them: a
    stack built by an earlier test set their level (`bot.library_loggers`), and a test
    asking for their debug lines (`caplog.set_level(DEBUG)`) would otherwise get none."""
    yield
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
