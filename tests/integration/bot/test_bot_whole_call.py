"""A call is approved only as someone has seen it whole. Where a surface cuts a call's
arguments (a message past one section, an App Home line past its summary, a bulk row),
nothing on it approves the call at once: Approve opens the arguments whole in a form whose
submission is the approval, and Approve all is withheld, even when clicked on a message
posted before it was. Through real Redis, the Slack stand-in and signed Slack requests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from agent_host.approvals import ApprovalRequest
from bot import blocks
from bot.blocks.elements import button
from bot.mrkdwn import code_block_text
from tests.support.stack import CHANNEL, REVIEWER, Stack, running_stack
from tests.support.waiting import eventually

from .test_bot_bulk import actions, bulk_of, send_signed, signed_click, texts
from .test_bot_home import click_home, open_home

TAIL = "../../../../srv/prod-database"


def long_path(length: int) -> str:
    """A path of `length` characters whose dangerous part comes last."""
    head = "/tmp/drafts/"
    return head + "a" * (length - len(head) - len(TAIL)) + TAIL


def labels(message: dict[str, Any]) -> list[str]:
    return [e["text"]["text"] for e in actions(message).values()]


def shown_whole(view: dict[str, Any]) -> str:
    """The code blocks of a view, joined: the arguments as the form shows them."""
    bodies = [
        b["text"]["text"].removeprefix("```\n").removesuffix("\n```")
        for b in view["blocks"]
        if b["type"] == "section" and b["text"]["text"].startswith("```")
    ]
    return "".join(bodies)


async def one_request(stack: Stack, path: str) -> tuple[str, ApprovalRequest]:
    run_id = await stack.start_run("cleanup-agent", f"delete {path}")
    [request] = await stack.pending_requests(run_id)
    return run_id, request


async def deleted(stack: Stack, run_id: str) -> list[str]:
    await stack.run_status(run_id, "succeeded", "failed")
    return [e["path"] for e in stack.effects.all_events() if e["kind"] == "delete_file"]


async def test_a_call_longer_than_its_message_is_approved_only_from_the_form_showing_it_whole(
    redis_url: str, tmp_path: Path
) -> None:
    path = long_path(3_250)
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, request = await one_request(stack, path)
        message = stack.message(CHANNEL, request.message_ts)
        assert "prod-database" not in texts(message)  # cut, and the cut is noted
        assert "truncated" in texts(message)
        assert "longer than this message shows" in texts(message)
        assert labels(message) == ["Approve", "Reject"]
        assert "confirm" not in actions(message)[blocks.APPROVE]  # the form asks instead

        await stack.click(REVIEWER, request, blocks.APPROVE)
        opened = await stack.opened_view(REVIEWER, blocks.WHOLE_CALL_MODAL)
        view = opened["view"]
        assert view["private_metadata"] == f"{request.request_id}|{request.pause_id}"
        whole = json.dumps({"path": path}, indent=2, ensure_ascii=False)
        assert shown_whole(view) == code_block_text(whole)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"  # the click decided nothing

        submitted = await stack.standin.submit_view(
            REVIEWER,
            opened["id"],
            {blocks.COMMENT_BLOCK: {blocks.COMMENT_INPUT: "read it all, the tail too"}},
        )
        assert submitted.status == 200 and submitted.json() is None
        assert await deleted(stack, run_id) == [path]
        decided = await stack.host.store.get_request(request.request_id)
        assert decided is not None and decided.decided_by == REVIEWER
        assert getattr(decided.decision, "comment", "") == "read it all, the tail too"


async def test_every_approving_button_of_a_message_that_cut_the_call_opens_it_whole(
    redis_url: str, tmp_path: Path
) -> None:
    """A message posted before its buttons were withheld still has them: each opens the
    call whole, and none decides at once."""
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, request = await one_request(stack, long_path(3_250))
        stored = stack.standin.workspace.message(CHANNEL, request.message_ts)
        assert stored is not None
        [row] = [b for b in stored.blocks if b["type"] == "actions"]
        rid = request.request_id
        row["elements"][:1] = [
            button("Approve", blocks.APPROVE, rid, "primary"),
            button("Approve with comment", blocks.APPROVE_COMMENT, rid),
            button("Approve for this run", blocks.APPROVE_ALWAYS, rid),
        ]
        for seen, action in enumerate(
            (blocks.APPROVE, blocks.APPROVE_COMMENT, blocks.APPROVE_ALWAYS)
        ):
            await stack.click(REVIEWER, request, action)
            await stack.opened_view(REVIEWER, blocks.WHOLE_CALL_MODAL, seen)
        await stack.assert_still_waiting(run_id, rid)


async def test_a_call_too_long_for_slack_cannot_be_approved_there(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        _, request = await one_request(stack, long_path(130_000))
        message = stack.message(CHANNEL, request.message_ts)
        assert labels(message) == ["Reject"]
        assert "too long to show in Slack whole" in texts(message)

        stored = stack.standin.workspace.message(CHANNEL, request.message_ts)
        assert stored is not None  # as if posted before Approve was withheld
        [row] = [b for b in stored.blocks if b["type"] == "actions"]
        row["elements"].insert(0, button("Approve", blocks.APPROVE, request.request_id))
        await stack.click(REVIEWER, request, blocks.APPROVE)
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "too long to show in Slack whole" in told
        assert not stack.standin.calls_to("views.open")
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"


async def test_the_app_home_line_that_cuts_a_call_opens_it_whole_before_approving(
    redis_url: str, tmp_path: Path
) -> None:
    path = long_path(290)  # whole in its message, cut on its App Home line
    async with running_stack(redis_url, tmp_path) as stack:
        run_id, request = await one_request(stack, path)
        message = stack.message(CHANNEL, request.message_ts)
        assert "prod-database" in texts(message)
        assert labels(message)[0] == "Approve" and "Approve with comment" in labels(message)

        tab = await open_home(stack, REVIEWER)
        assert "prod-database" not in json.dumps(tab["blocks"])
        row = next(
            b
            for b in tab["blocks"]
            if b.get("block_id") == blocks.actions_block_id(request.request_id)
        )
        assert [e["text"]["text"] for e in row["elements"]] == ["Approve", "Reject"]

        await click_home(stack, REVIEWER, request, blocks.APPROVE)
        opened = await stack.opened_view(REVIEWER, blocks.WHOLE_CALL_MODAL)
        assert TAIL in shown_whole(opened["view"])
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"
        await stack.standin.submit_view(REVIEWER, opened["id"], {})
        assert await deleted(stack, run_id) == [path]


async def test_approve_all_is_withheld_while_a_call_is_cut_even_on_an_older_message(
    redis_url: str, tmp_path: Path
) -> None:
    paths = [f"/tmp/draft-{n}.txt" for n in range(5)] + [long_path(160)]
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("cleanup-agent", "delete " + " ".join(paths))
        requests = await bulk_of(stack, run_id, 6)
        first = requests[0]
        message = stack.message(first.message_channel, first.bulk_ts)
        assert "prod-database" not in texts(message)
        assert set(actions(message)) == {blocks.BULK_REJECT, blocks.BULK_SPLIT}
        assert "1 of the calls waiting are longer" in texts(message)

        # The same message as posted before Approve all was withheld, clicked.
        older = copy.deepcopy(message)
        [row] = [b for b in older["blocks"] if b["type"] == "actions"]
        value = row["elements"][0]["value"]
        row["elements"].insert(0, button("Approve all 6", blocks.BULK_APPROVE, value, "primary"))
        await send_signed(stack, signed_click(stack, REVIEWER, CHANNEL, older, blocks.BULK_APPROVE))
        [told] = await stack.wait_ephemerals(REVIEWER)
        assert "none was approved all at once" in told

        async def still_waiting() -> bool | None:
            current = await stack.host.store.run_requests(run_id)
            return True if all(not r.decided for r in current) else None

        assert await eventually(still_waiting)
        assert not [e for e in stack.effects.all_events() if e["kind"] == "delete_file"]
