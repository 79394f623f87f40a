"""The HTTP API's routes, put together: the REST API, the webhook, health and metrics."""

from __future__ import annotations

from aiohttp import web

from agent_host.durable.host import Host
from agent_host.durable.metrics import MetricsPage
from agent_host.http.api import (
    HOST_KEY,
    METRICS_KEY,
    healthz,
    json_errors,
    list_approvals,
    metrics,
    readyz,
    run_detail,
    start_run,
)
from agent_host.http.external_api import (
    approval_by_external_id,
    approval_detail,
    create_approval,
    end_long_polls_on_shutdown,
    list_dead_callbacks,
)
from agent_host.http.webhook import approval_webhook

__all__ = ["add_api_routes", "create_app"]


def add_api_routes(app: web.Application, host: Host) -> None:
    app[HOST_KEY] = host
    app[METRICS_KEY] = MetricsPage(host)
    end_long_polls_on_shutdown(app)
    app.middlewares.append(json_errors)
    app.router.add_post("/api/v1/runs", start_run)
    app.router.add_get("/api/v1/runs/{run_id}", run_detail)
    app.router.add_get("/api/v1/approvals", list_approvals)
    app.router.add_post("/api/v1/approvals", create_approval)
    app.router.add_get("/api/v1/approvals/{request_id}", approval_detail)
    # Any id taken at creation, braces and (percent-encoded) slashes included.
    app.router.add_get(
        "/api/v1/approvals/by-external-id/{external_id:[^/]+}", approval_by_external_id
    )
    app.router.add_get("/api/v1/callbacks/dead", list_dead_callbacks)
    app.router.add_post("/api/v1/webhooks/approval-response", approval_webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


def create_app(host: Host) -> web.Application:
    app = web.Application(client_max_size=host.settings.max_body_bytes)
    add_api_routes(app, host)
    return app
