"""Shared test set-up: no real model calls, ever; real Redis servers from tests/support."""

from __future__ import annotations

from agent_host.runtime.models import set_allow_model_requests

pytest_plugins = ["tests.support.redis_fixtures"]

set_allow_model_requests(False)
