"""Decisions and commands only from the workspace (or org) the bot is installed in, and forms
only for the pause they were opened in: signed requests sent as Slack would send them."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

from bot import blocks
from bot.middleware import foreign_request
from slack_sandbox.payloads import payload_body
from slack_sandbox.signing import sign_request
from tests.support.stack import CHANNEL, REVIEWER, SECRET, running_stack
from tests.support.waiting import eventually

from .test_bot_signing import click_body, post


def with_team(body: bytes, team: str, user_team: str) -> bytes:
    payload = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
    payload["team"]["id"] = team
    payload["user"]["team_id"] = user_team
    return payload_body(payload)


async def test_a_click_from_another_workspace_is_told_so_and_changes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        home = stack.standin.core.workspace.team.id
        # A Slack Connect guest: the click names the channel's workspace, the user another.
        for team, user_team in (("T0ELSEWHERE", "T0ELSEWHERE"), (home, "T0GUEST")):
            body = with_team(click_body(stack, REVIEWER, request, blocks.APPROVE), team, user_team)
            status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
            assert status == 200
        texts = await stack.wait_ephemerals(REVIEWER, 2)
        assert all("not accept decisions or commands from this workspace" in t for t in texts)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and not current.approvals
        assert stack.effects.count("refund") == 0


async def test_a_payload_of_a_type_the_app_never_uses_decides_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    """Bolt routes an attachment's `interactive_message` to an action's listener by its
    callback id, as it would a button: signed, from another workspace, it is refused at the
    workspace check; from this one, no listener takes it for a click."""
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        home = stack.standin.core.workspace.team.id
        for team in ("T0ELSEWHERE", home):
            body = with_team(click_body(stack, REVIEWER, request, blocks.APPROVE), team, team)
            payload = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
            payload |= {"type": "interactive_message", "callback_id": blocks.APPROVE}
            body = payload_body(payload)
            status, _ = await post(stack, body, sign_request(SECRET, int(time.time()), body))
            assert status in (200, 404)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending" and not current.approvals
        assert stack.effects.count("refund") == 0
    other = {"type": "dialog_submission", "team": {"id": "T2"}, "user": {"id": "U1"}}
    assert foreign_request(other, SimpleNamespace(team_id="T1", enterprise_id=None))


def test_an_org_wide_install_checks_the_org_and_an_unknown_install_accepts_nothing() -> None:
    click = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1", "team_id": "T1"}}
    org = SimpleNamespace(team_id=None, enterprise_id="E1")
    assert foreign_request({**click, "enterprise": {"id": "E2"}}, org)
    assert foreign_request({**click, "enterprise": None}, org)
    assert not foreign_request({**click, "enterprise": {"id": "E1"}}, org)
    command = {"command": "/approvals", "team_id": "T9", "enterprise_id": "E1"}
    assert not foreign_request(command, org)
    assert foreign_request({**command, "enterprise_id": "E2"}, org)
    nobody = SimpleNamespace(team_id=None, enterprise_id=None)
    assert foreign_request(click, nobody) and foreign_request(command, nobody)
    assert foreign_request(click, None)


async def test_a_form_of_a_pause_that_is_over_is_refused(redis_url: str, tmp_path: Path) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        run_id = await stack.start_run("refund-agent", "refund order 123")
        [request] = await stack.pending_requests(run_id)
        await stack.click(REVIEWER, request, blocks.REJECT)
        view = await stack.opened_view(REVIEWER, blocks.REJECT_MODAL)
        # The form now claims another pause of the same request (a stale or forged form).
        shown = stack.standin.core.workspace.view(view["id"])
        assert shown is not None
        shown.view["private_metadata"] = f"{request.request_id}|req_0000000000000000_0001"
        submitted = await stack.standin.submit_view(
            REVIEWER, view["id"], {blocks.REASON_BLOCK: {blocks.REASON_INPUT: "no"}}
        )
        answer = submitted.json()
        assert answer["response_action"] == "errors"
        assert "earlier step of the run" in json.dumps(answer)
        current = await stack.host.store.get_request(request.request_id)
        assert current is not None and current.status == "pending"

        async def still_waiting() -> bool | None:
            info = await stack.host.store.run_info(run_id)
            return True if info is not None and info.status == "waiting" else None

        assert await eventually(still_waiting)
        assert request.message_channel == CHANNEL
