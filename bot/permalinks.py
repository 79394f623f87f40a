"""Links to requests' Slack messages (`chat.getPermalink`), looked up at once and kept.

A message's permalink never changes, so each is asked for once per process (up to KEPT
of them, the least recently used dropped first). A list shows what was found within its
budget; a link Slack could not give in time is left out of that list, not waited for.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent_host.approvals import ApprovalRequest

__all__ = ["Permalinks"]

log = logging.getLogger(__name__)

KEPT = 4096


class Permalinks:
    def __init__(self, client: Any, *, kept: int = KEPT) -> None:
        self.client, self.kept = client, kept
        self._links: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def of_requests(
        self, requests: Sequence[ApprovalRequest], within: float
    ) -> dict[str, str]:
        """The permalink of each posted request's message, by request id, as far as Slack
        answered within `within` seconds."""
        posted = [r for r in requests if r.message_channel and r.message_ts]
        wanted = {(r.message_channel, r.message_ts) for r in posted} - self._links.keys()
        if wanted:
            tasks = [asyncio.ensure_future(self._ask(*where)) for where in sorted(wanted)]
            _, late = await asyncio.wait(tasks, timeout=max(within, 0.0))
            for task in late:
                task.cancel()
        found: dict[str, str] = {}
        for request in posted:
            url = self._links.get((request.message_channel, request.message_ts))
            if url:
                self._links.move_to_end((request.message_channel, request.message_ts))
                found[request.request_id] = url
        return found

    async def _ask(self, channel: str, ts: str) -> None:
        try:
            reply = await self.client.chat_getPermalink(channel=channel, message_ts=ts)
        except Exception as exc:  # a list without this link is still a list
            log.warning("chat.getPermalink %s/%s failed: %s", channel, ts, exc)
            return
        url = reply.get("permalink")
        if isinstance(url, str) and url:
            self._links[(channel, ts)] = url
            while len(self._links) > self.kept:
                self._links.popitem(last=False)
