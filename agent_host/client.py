"""A client of countersign's approval API for Python code that runs elsewhere.

    from agent_host import ApprovalClient

    async with ApprovalClient("http://countersign:3000", token) as client:
        result = await client.pause(
            tool="issue_refund", arguments={"order_id": 123}, reason="refunds move money",
            external_id="refund-123", agent="billing-bot",
        )
        if result.decision == "approved":
            ...

The wait lives in countersign, not in this process: `pause` creates the request (the same
`external_id` always names the same request) and long-polls until it is decided. After a
crash, `wait_for(external_id=...)` (or `request_id=`) returns the same decision. Expiry is
a decision like the others (`"expired"`), never an exception.

Only aiohttp and the standard library: no Redis, no Slack.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import aiohttp

from agent_host.errors import CountersignError

__all__ = ["ApprovalClient", "ApprovalClientError", "ApprovalResult", "Verdict"]

Verdict = Literal["approved", "rejected", "request_changes", "answered", "expired"]
POLL_SECONDS = 60  # the server's longest wait
RETRIES = 6  # failed polls in a row (about a minute of backing off) before giving up


class ApprovalClientError(CountersignError):
    """countersign refused the request (the message carries its answer) or could not be
    reached in time."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ApprovalResult:
    """A decided request: the verdict, the reviewer's words (an approval's comment, a
    rejection's reason, the changes asked for, an answer), who decided, and the hash of what
    they saw."""

    decision: Verdict
    feedback: str
    decided_by: str
    call_hash: str
    request_id: str

    @property
    def approved(self) -> bool:
        return self.decision == "approved"


class ApprovalClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session = session
        self._owns_session = session is None
        self._timeout = timeout

    async def __aenter__(self) -> ApprovalClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    async def pause(
        self,
        *,
        tool: str,
        arguments: dict[str, Any],
        reason: str = "",
        expires_in_hours: int | None = None,  # None: the route's expiry
        external_id: str | None = None,
        agent: str = "python-client",
        question: str | None = None,
        requested_by: str | None = None,
        severity: str | None = None,
        callback_url: str | None = None,
    ) -> ApprovalResult:
        """Ask for approval (or, with `question`, an answer) and wait until it is decided.

        Pass an `external_id` that names this very call (e.g. an order and an action): a
        retry after a crash then finds the same request instead of asking twice."""
        created = await self.request_approval(
            tool=tool,
            arguments=arguments,
            reason=reason,
            expires_in_hours=expires_in_hours,
            external_id=external_id,
            agent=agent,
            question=question,
            requested_by=requested_by,
            severity=severity,
            callback_url=callback_url,
        )
        return await self.wait_for(request_id=str(created["request_id"]))

    async def request_approval(
        self,
        *,
        tool: str,
        arguments: dict[str, Any],
        reason: str = "",
        expires_in_hours: int | None = None,
        external_id: str | None = None,
        agent: str = "python-client",
        question: str | None = None,
        requested_by: str | None = None,
        severity: str | None = None,
        callback_url: str | None = None,
    ) -> dict[str, Any]:
        """Create the request and return at once: `{request_id, status, call_hash, url}`."""
        body: dict[str, Any] = {"agent": agent, "tool": tool, "arguments": arguments}
        optional = {
            "reason": reason or None,
            "expires_in_hours": expires_in_hours,
            "external_id": external_id,
            "question": question,
            "requested_by": requested_by,
            "severity": severity,
            "callback_url": callback_url,
        }
        body |= {k: v for k, v in optional.items() if v is not None}
        return await self._call("POST", "/api/v1/approvals", json=body)

    async def get(self, request_id: str, *, wait: float = 0) -> dict[str, Any]:
        """The request's state and decision, as the API shows it; `wait` long-polls."""
        path = f"/api/v1/approvals/{quote(request_id, safe='')}?wait={wait:g}"
        return await self._call("GET", path, extra_timeout=wait)

    async def wait_for(
        self, *, request_id: str | None = None, external_id: str | None = None
    ) -> ApprovalResult:
        """Wait until the request is decided, however long that takes; by `external_id`,
        the request that id created (resend with `pause` if it may never have been made)."""
        if request_id is None:
            if external_id is None:
                raise ValueError("pass request_id or external_id")
            request_id = await self._request_of(external_id)
        failures = 0
        while True:
            try:
                state = await self.get(request_id, wait=POLL_SECONDS)
            except ApprovalClientError as exc:
                # countersign restarting (unreachable, 5xx) is a pause in the wait, not
                # its end; a 4xx (unknown request, wrong token) is an answer.
                failures += 1
                if 0 < exc.status < 500 or failures >= RETRIES:
                    raise
                await asyncio.sleep(min(2.0**failures, 30.0))
                continue
            failures = 0
            if state.get("verdict"):
                return _result(state)

    async def _request_of(self, external_id: str) -> str:
        path = f"/api/v1/approvals/by-external-id/{quote(external_id, safe='')}"
        found = await self._call("GET", path)
        return str(found["request_id"])

    async def _call(
        self, method: str, path: str, *, json: Any = None, extra_timeout: float = 0
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        timeout = aiohttp.ClientTimeout(total=self._timeout + extra_timeout)
        try:
            async with self._session.request(
                method, self.base_url + path, json=json, headers=self._headers, timeout=timeout
            ) as resp:
                try:
                    body: Any = await resp.json(content_type=None)
                except ValueError:
                    body = {"error": (await resp.text())[:200]}
                if resp.status >= 400:
                    message = body.get("error") if isinstance(body, dict) else None
                    raise ApprovalClientError(
                        f"countersign answered {resp.status} to {method} {path}: {message or body}",
                        resp.status,
                    )
                if not isinstance(body, dict):
                    raise ApprovalClientError(f"countersign answered {body!r} to {method} {path}")
                return body
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApprovalClientError(
                f"countersign at {self.base_url} could not be reached for {method} {path} "
                f"({type(exc).__name__}: {exc}); check the URL and that it runs, then retry"
            ) from exc


def _result(state: dict[str, Any]) -> ApprovalResult:
    return ApprovalResult(
        decision=state["verdict"],
        feedback=state.get("feedback") or "",
        decided_by=state.get("decided_by") or "",
        call_hash=state.get("call_hash") or "",
        request_id=state["request_id"],
    )
