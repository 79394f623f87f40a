"""Pause any Python code until a person approves, with countersign's HTTP API.

    COUNTERSIGN_URL=http://localhost:3000 COUNTERSIGN_API_TOKEN=... python examples/pause_script.py

With `make demo`, use the COUNTERSIGN_URL and token the demo prints (its API is not on the
sandbox page's port). The request appears in Slack (or on the sandbox page); the script waits
until someone decides. Killed meanwhile? Run it again: the same external_id finds the same
request, so it is asked once and the decision is the one already made.
"""

from __future__ import annotations

import asyncio
import os

from agent_host import ApprovalClient


async def main() -> None:
    url = os.environ.get("COUNTERSIGN_URL", "http://localhost:3000")
    token = os.environ["COUNTERSIGN_API_TOKEN"]
    order_id = int(os.environ.get("ORDER_ID", "123"))
    async with ApprovalClient(url, token) as client:
        result = await client.pause(
            agent="billing-bot",
            tool="issue_refund",
            arguments={"order_id": order_id, "amount": 40},
            reason="refunds move money",
            expires_in_hours=48,
            external_id=f"refund-order-{order_id}",
        )
    if result.decision == "approved":
        print(f"approved by {result.decided_by}: refunding order {order_id}")
    else:
        print(f"not refunded: {result.decision} {result.feedback}".strip())


if __name__ == "__main__":
    asyncio.run(main())
