"""Router stubs (`agent_host.approvals.Router`) for tests and the bench: fixed answers, so a
test states the route it needs in one line instead of configuring routing rules."""

from __future__ import annotations

from collections.abc import Mapping

from agent_host.approvals import Route
from agent_host.runtime.policy import Severity

__all__ = ["QuorumRouter", "RouterByAgent", "StaticRouter", "TwoRoutes"]


class StaticRouter:
    """Every request to one route."""

    def __init__(self, route: Route) -> None:
        self.route_value = route

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return self.route_value


class QuorumRouter(StaticRouter):
    """Every request needs `quorum` distinct approvals."""

    def __init__(self, quorum: int, expiry_seconds: int = 3600) -> None:
        super().__init__(Route(route_id="quorum", quorum=quorum, expiry_seconds=expiry_seconds))


class RouterByAgent:
    """Each agent's requests to its own route (an agent missing from `routes` is a test bug)."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = routes

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        return self.routes[agent]


class TwoRoutes:
    """Low and medium severity to an open channel; high and above to two named reviewers."""

    async def route(self, agent: str, tool: str, severity: str) -> Route:
        if Severity(severity).rank >= Severity.HIGH.rank:
            return Route(route_id="r-critical", destination="C-SEC", reviewers=("U8", "U9"))
        return Route(route_id="r-open", destination="C-OPS")
