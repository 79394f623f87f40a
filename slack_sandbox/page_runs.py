"""The sandbox page's "Runs" panel: start example agent runs through the bot's HTTP API and
follow them. A local stand-in's helper, NOT Slack.

* ``POST /_sandbox/ui/runs`` ``{agent, input, user}``: forwards to ``POST {api_url}/api/v1/runs``
  (``requested_by`` = ``user``), remembers the run id, and answers with the API's answer.
* ``GET /_sandbox/ui/runs``: ``{"runs": [...]}``, newest first (at most 20): each remembered
  run's ``GET {api_url}/api/v1/runs/{id}`` detail plus the ``input``/``user`` it started with.

The remembered runs live in ``sandbox_runs.json`` next to the workspace file (in memory when the
workspace is), so a restarted sandbox still lists them. Without ``api_url`` and ``api_token``
both routes answer 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from slack_sandbox.core import CORE_KEY, SandboxCore

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
RUNS_FILE = "sandbox_runs.json"
RUNS_SHOWN = 20
RUNS_KEPT = 200
API_TIMEOUT = aiohttp.ClientTimeout(total=10)
EXAMPLE_AGENTS: tuple[tuple[str, str], ...] = (
    ("refund-agent", "refund order 123"),
    ("cleanup-agent", "delete /tmp/draft-1.docx /tmp/draft-2.docx"),
    ("repo-admin", "delete repos scratch, acme-prod"),
    ("support-agent", "Can I pay my invoice in euros?"),
)
NOT_CONFIGURED = (
    "the Runs panel needs the bot's HTTP API: create the sandbox with api_url and api_token "
    "(the demo launcher passes them)"
)


class RunLog:
    """The run ids the page started, oldest first, persisted as one small JSON file."""

    def __init__(self, directory: Path | None) -> None:
        self._path = directory / RUNS_FILE if directory is not None else None
        self.runs: list[JsonDict] = self._load()

    def _load(self) -> list[JsonDict]:
        if self._path is None or not self._path.exists():
            return []
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable %s: %s", self._path, exc)
            return []
        return [r for r in data if isinstance(r, dict) and isinstance(r.get("run_id"), str)]

    def add(self, run_id: str, agent: str, text: str, user: str) -> None:
        entry = {"run_id": run_id, "agent": agent, "input": text, "user": user}
        self.runs = [*self.runs, {**entry, "started_at": time.time()}][-RUNS_KEPT:]
        self._save()

    def newest(self, count: int = RUNS_SHOWN) -> list[JsonDict]:
        return list(reversed(self.runs[-count:]))

    def _save(self) -> None:
        """Temp file + ``os.replace``, as the workspace is saved: never half-written."""
        if self._path is None:
            return
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".runs.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.runs, handle, indent=1)
            os.replace(tmp, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


RUNLOG_KEY: web.AppKey[RunLog] = web.AppKey("countersign_sandbox_runlog", RunLog)


def _api(core: SandboxCore) -> tuple[str, dict[str, str]] | None:
    """The API base URL and auth headers, or None when the sandbox was not given them."""
    url, token = core.config.api_url, core.config.api_token
    if not url or not token:
        return None
    return url.rstrip("/"), {"Authorization": f"Bearer {token}"}


def _unavailable(message: str = NOT_CONFIGURED, status: int = 503) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _call(
    core: SandboxCore, method: str, url: str, headers: dict[str, str], body: Any = None
) -> tuple[int, Any]:
    """One API call: (HTTP status, parsed JSON or {"error": text}). Raises ClientError."""
    async with core.session().request(
        method, url, json=body, headers=headers, timeout=API_TIMEOUT
    ) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, {"error": text.strip() or f"HTTP {response.status}"}


async def _start_run(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    api = _api(core)
    if api is None:
        return _unavailable()
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"error": "body must be JSON"}, status=400)
    if not isinstance(body, dict):
        return web.json_response({"error": "body must be a JSON object"}, status=400)
    agent, text, user = (body.get(k) for k in ("agent", "input", "user"))
    if not all(isinstance(v, str) and v for v in (agent, text, user)):
        return web.json_response({"error": "expected {agent, input, user} strings"}, status=400)
    base, headers = api
    forward = {"agent": agent, "input": text, "requested_by": user}
    try:
        status, answer = await _call(core, "POST", f"{base}/api/v1/runs", headers, forward)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _unavailable(f"the bot's API at {base} could not be reached: {exc}", 502)
    run_id = answer.get("run_id") if isinstance(answer, dict) else None
    if status < 300 and isinstance(run_id, str):
        request.app[RUNLOG_KEY].add(run_id, str(agent), str(text), str(user))
        logger.info("sandbox page: %s started %s (%s)", user, agent, run_id)
    return web.json_response(answer, status=status)


async def _run_detail(
    core: SandboxCore, base: str, headers: dict[str, str], entry: JsonDict
) -> JsonDict:
    url = f"{base}/api/v1/runs/{entry['run_id']}"
    try:
        status, detail = await _call(core, "GET", url, headers)
    except (aiohttp.ClientError, TimeoutError) as exc:
        status, detail = 502, {"error": f"the bot's API could not be reached: {exc}"}
    if status != 200 or not isinstance(detail, dict):
        error = detail.get("error") if isinstance(detail, dict) else None
        detail = {"status": "unknown", "error": error or f"HTTP {status}"}
    return {**detail, **entry}


async def _list_runs(request: web.Request) -> web.Response:
    core = request.app[CORE_KEY]
    api = _api(core)
    if api is None:
        return _unavailable()
    base, headers = api
    entries = request.app[RUNLOG_KEY].newest()
    details = await asyncio.gather(*(_run_detail(core, base, headers, e) for e in entries))
    return web.json_response({"runs": list(details)})


def add_runs_routes(app: web.Application) -> None:
    app[RUNLOG_KEY] = RunLog(app[CORE_KEY].workspace.directory)
    app.router.add_get("/_sandbox/ui/runs", _list_runs)
    app.router.add_post("/_sandbox/ui/runs", _start_run)
