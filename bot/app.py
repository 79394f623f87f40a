"""The Bolt app: Approve / Reject / Answer buttons, their modals, and `/approvals`.

Bolt verifies every request's signature first (401 on a bad or stale one). Each listener
then applies the reviewer rules and the store's compare-and-set and acks; anything slow
(opening a modal, ephemeral replies) runs after the ack as an owned background task, and
message updates and the resume happen through the outbox and the workers. The app runs
with `process_before_response=True`, so Bolt sends the response as soon as the listener
returns instead of polling for the ack every 10 ms.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse

from agent_host.approvals import ApprovalRequest, ApprovalService, DecideResult
from agent_host.errors import StoreUnavailable
from agent_host.runtime.decisions import Answer, Approve, Decision, Reject
from bot import blocks
from bot.commands import SlashCommands
from bot.installation import foreign_request
from bot.parsing import Click, input_value, parse_click, parse_submission
from bot.slack_notifier import SlackNotifier

__all__ = ["BackgroundTasks", "build_bolt_app"]

log = logging.getLogger(__name__)

# Slack wants its answer within 3 s: everything one listener does (load, the reviewer-group
# lookup, the compare-and-set) shares this one budget, then the reviewer is told to look again.
LISTENER_BUDGET = 2.0  # leaves room for Bolt, the HTTP round trip and network jitter
UNAVAILABLE = (
    ":hourglass: countersign could not record your decision right now (its database is not "
    "reachable). Nothing was changed; please click again in a moment."
)
UNCONFIRMED = (
    ":warning: countersign could not confirm your decision in time. If the message still "
    "shows its buttons, click again; if your decision was recorded, you will be told so."
)
NOT_FOUND = "This approval request does not exist (any more). Nothing was changed."
FOREIGN = (
    ":no_entry: countersign does not accept decisions or commands from this workspace; "
    "ask someone in the workspace where it is installed."
)


class BackgroundTasks:
    """Owns the work a listener starts after its ack."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def refusal(request: ApprovalRequest | None, click: Click | None = None) -> str:
    """Why a click cannot lead anywhere, before anyone's rights are checked; empty if it can."""
    if request is None:
        return NOT_FOUND
    if click is not None and not _click_belongs(click, request):
        return "This button does not belong to this request's message. Nothing was changed."
    if request.decided:
        return already_decided(request)
    return ""


def _click_belongs(click: Click, request: ApprovalRequest) -> bool:
    """The button sits in the block built for this very request, in its channel, on its
    message: a value naming another request is refused. (A message posted twice after a
    lost answer from Slack carries the same block, so either copy works.)"""
    block = blocks.actions_block_id(request.request_id)
    if click.block_id != block:
        return False
    if request.message_channel and click.channel != request.message_channel:
        return False
    return click.message_ts == request.message_ts or block in click.message_block_ids


def already_decided(request: ApprovalRequest) -> str:
    who = f"<@{request.decided_by}>" if request.decided_by.startswith("U") else request.decided_by
    status = request.status.replace("_", " ")
    return f"This request was already *{status}* by {who}. Nothing was changed."


def result_text(result: DecideResult) -> str:
    request = result.request
    if result.outcome == "progress" and request is not None:
        return (
            f":ballot_box_with_check: Your approval is recorded: {result.approvals} of "
            f"{request.route.quorum} approvals."
        )
    if result.outcome == "duplicate_vote":
        return "You have already approved this request; another reviewer must approve too."
    if result.outcome == "already_decided" and request is not None:
        return already_decided(request)
    if result.outcome == "hash_mismatch":
        return "The request changed after it was shown to you; nothing was decided."
    if result.outcome == "past_deadline" and request is not None:
        return (
            ":hourglass: This request's deadline has passed, so it can no longer be approved "
            "or rejected; it is being marked expired and the call will not run."
        )
    if result.outcome in ("refused", "wrong_kind"):
        return f":no_entry: Not allowed: {result.reason}. Nothing was changed."
    if result.outcome == "stale":
        return (
            "This form belongs to an earlier step of the run that is over; nothing was "
            "changed. Close it and use the buttons on the current message."
        )
    if result.outcome == "unknown":
        return UNCONFIRMED
    if result.outcome == "not_found":
        return NOT_FOUND
    return ""


def build_bolt_app(
    *,
    client: Any,
    notifier: SlackNotifier,
    signing_secret: str,
    approvals: ApprovalService,
    commands: SlashCommands,
    tasks: BackgroundTasks,
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        ignoring_self_events_enabled=False,
    )

    def ephemeral(channel: str, user: str, text: str) -> None:
        if text and channel:
            tasks.spawn(_post_ephemeral(notifier, channel, user, text))

    async def from_installed_workspace(
        body: dict[str, Any], context: AsyncBoltContext, next: Any
    ) -> BoltResponse | None:
        """Clicks, forms and commands only from the workspace (or org) the bot is installed
        in; anything else is answered, and nothing is changed."""
        if not foreign_request(body, context.authorize_result):
            await next()
            return None
        log.warning("refused a %s from another workspace", body.get("type") or "command")
        return _foreign_response(body, ephemeral)

    app.use(from_installed_workspace)

    async def on_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        click = parse_click(body)
        if click is None:
            log.warning("ignored a malformed click")
            return
        stage = {"deciding": False}  # a timeout before the compare-and-set changed nothing
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                text = await _on_click(click, stage)
        except TimeoutError:
            text = UNCONFIRMED if stage["deciding"] else UNAVAILABLE
        except StoreUnavailable:
            log.warning("click by %s could not reach Redis", click.user)
            text = UNAVAILABLE
        ephemeral(click.channel, click.user, text)

    async def _on_click(click: Click, stage: dict[str, bool]) -> str:
        request = await approvals.load(click.request_id)
        if reason := refusal(request, click):
            return reason
        assert request is not None
        if click.action_id in (blocks.REJECT, blocks.ANSWER):
            eligibility = await approvals.may_decide(click.user, request)
            if not eligibility.allowed:
                return f":no_entry: Not allowed: {eligibility.reason}."
            modal = blocks.reject_modal if click.action_id == blocks.REJECT else blocks.answer_modal
            tasks.spawn(
                _open_view(
                    client, notifier, click.trigger_id, modal(request), click.channel, click.user
                )
            )
            return ""
        decision = Approve(
            decided_by=click.user,
            call_hash=request.call_hash,
            always=click.action_id == blocks.APPROVE_ALWAYS,
        )
        stage["deciding"] = True
        return result_text(
            await approvals.decide(request.request_id, decision, via="slack", current=request)
        )

    for action_id in (blocks.APPROVE, blocks.APPROVE_ALWAYS, blocks.REJECT, blocks.ANSWER):
        app.action(action_id)(on_button)

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        is_answer = isinstance(view, dict) and view.get("callback_id") == blocks.ANSWER_MODAL
        block, field = (
            (blocks.ANSWER_BLOCK, blocks.ANSWER_INPUT)
            if is_answer
            else (blocks.REASON_BLOCK, blocks.REASON_INPUT)
        )
        submission = parse_submission(body, view)
        if submission is None:
            stale = "This form does not match a request any more; close it and click again."
            await ack(response_action="errors", errors={block: stale})
            return
        text = input_value(submission.values, block, field)
        if is_answer and not text.strip():
            await ack(response_action="errors", errors={block: "Write an answer to send."})
            return
        user = submission.user
        decision: Decision = (
            Answer(text=text, decided_by=user)
            if is_answer
            else Reject(message=text, decided_by=user)
        )
        try:
            async with asyncio.timeout(LISTENER_BUDGET):
                result = await _submit(submission.request_id, submission.pause_id, decision)
        except TimeoutError:
            result = DecideResult("unknown")
        except StoreUnavailable:
            await ack(response_action="errors", errors={block: _plain(UNAVAILABLE)})
            return
        if result.accepted:
            await ack()
        else:
            await ack(response_action="errors", errors={block: _plain(result_text(result))})

    async def _submit(request_id: str, pause_id: str, decision: Decision) -> DecideResult:
        request = await approvals.load(request_id)
        if request is not None:  # what the reviewer saw when the form opened
            decision = decision.model_copy(update={"call_hash": request.call_hash})
        return await approvals.decide(
            request_id, decision, via="slack", current=request, pause_id=pause_id
        )

    app.view(blocks.REJECT_MODAL)(on_submit)
    app.view(blocks.ANSWER_MODAL)(on_submit)

    async def on_command(ack: AsyncAck, command: dict[str, Any]) -> None:
        user, channel = command.get("user_id"), command.get("channel_id")
        text_in = command.get("text")
        if not isinstance(user, str) or not user:
            await ack()
            return
        try:
            text = await asyncio.wait_for(
                commands.handle(
                    user,
                    channel if isinstance(channel, str) else "",
                    text_in if isinstance(text_in, str) else "",
                ),
                LISTENER_BUDGET,
            )
        except (StoreUnavailable, TimeoutError):
            text = (
                ":hourglass: countersign's database is not reachable right now; try again shortly."
            )
        await ack(response_type="ephemeral", text=text)

    app.command("/approvals")(on_command)
    return app


def _foreign_response(
    body: dict[str, Any], ephemeral: Callable[[str, str, str], None]
) -> BoltResponse:
    kind = body.get("type")
    if kind == "block_actions":
        click = parse_click(body)
        if click is not None:
            ephemeral(click.channel, click.user, FOREIGN)
        return BoltResponse(status=200, body="")
    if kind == "view_submission":
        view = body.get("view")
        shown = view.get("blocks") if isinstance(view, dict) else None
        inputs = [
            b.get("block_id")
            for b in (shown if isinstance(shown, list) else [])
            if isinstance(b, dict) and b.get("type") == "input" and b.get("block_id")
        ]
        if inputs:
            errors = {str(inputs[0]): _plain(FOREIGN)}
            return BoltResponse(status=200, body={"response_action": "errors", "errors": errors})
        return BoltResponse(status=200, body="")
    if "command" in body:
        return BoltResponse(status=200, body={"response_type": "ephemeral", "text": FOREIGN})
    return BoltResponse(status=200, body="")


def _plain(text: str) -> str:
    return text.replace("*", "")[:150]


async def _post_ephemeral(notifier: SlackNotifier, channel: str, user: str, text: str) -> None:
    try:
        await notifier.post_ephemeral(channel, user, text)
    except Exception as exc:  # retried already; a lost answer must not end the task noisily
        log.warning("ephemeral reply to %s failed: %s", user, exc)


async def _open_view(
    client: Any,
    notifier: SlackNotifier,
    trigger_id: str,
    view: dict[str, Any],
    channel: str,
    user: str,
) -> None:
    try:
        await asyncio.wait_for(client.views_open(trigger_id=trigger_id, view=view), 2.5)
    except Exception as exc:
        log.warning("views.open failed: %s", exc)
        await _post_ephemeral(
            notifier, channel, user, "Could not open the form; click the button again."
        )
