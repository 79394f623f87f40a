"""Shared test set-up: no real model calls, ever; real Redis servers from tests/support."""

from __future__ import annotations

from agent_host.runtime.models import set_allow_model_requests

pytest_plugins = ["tests.support.redis_fixtures"]

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
