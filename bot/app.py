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
from collections.abc import Coroutine
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from agent_host.approvals import ApprovalRequest, DecideResult
from agent_host.decisions import Answer, Approve, Decision, Reject
from agent_host.store import RunStore

from . import blocks
from .commands import SlashCommands
from .interactions import Click, input_value, parse_click, parse_submission
from .notifier import SlackNotifier
from .reviewers import ReviewerRules

__all__ = ["BackgroundTasks", "build_bolt_app"]

log = logging.getLogger(__name__)

REDIS_TIMEOUT = 1.0  # seconds a click waits on Redis before answering "try again"
UNAVAILABLE = (
    ":hourglass: countersign could not record your decision right now (its database is not "
    "reachable). Nothing was changed; please click again in a moment."
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


class Decider:
    """The shared path of every decision: load, check who may decide, compare-and-set."""

    def __init__(self, store: RunStore, reviewers: ReviewerRules) -> None:
        self.store, self.reviewers = store, reviewers

    async def load(self, request_id: str) -> ApprovalRequest | None:
        return await asyncio.wait_for(self.store.get_request(request_id), REDIS_TIMEOUT)

    async def refusal(
        self, user: str, request: ApprovalRequest | None, click: Click | None = None
    ) -> str:
        """Why `user` may not decide `request` (from the message `click` came from);
        empty when they may."""
        if request is None:
            return "This approval request does not exist (any more). Nothing was changed."
        if click is not None and not _click_belongs(click, request):
            return "This button does not belong to this request's message. Nothing was changed."
        if request.decided:
            return already_decided(request)
        verdict = await self.reviewers.may_decide(user, request)
        return "" if verdict.allowed else f":no_entry: Not allowed: {verdict.reason}."

    async def decide(self, request: ApprovalRequest, decision: Decision) -> DecideResult:
        try:
            return await asyncio.wait_for(
                self.store.decide(request.request_id, decision, current=request), REDIS_TIMEOUT
            )
        except TimeoutError:
            # The script may have run even though its answer came late: look, don't guess.
            return await self._after_timeout(request.request_id, decision.decided_by)

    async def _after_timeout(self, request_id: str, user: str) -> DecideResult:
        try:
            now = await asyncio.wait_for(self.store.get_request(request_id), REDIS_TIMEOUT)
        except (RedisError, TimeoutError, OSError):
            return DecideResult("unknown")
        if now is None:
            return DecideResult("not_found")
        if now.decided:
            return DecideResult("decided" if now.decided_by == user else "already_decided", now)
        if user in now.approvals:
            return DecideResult("progress", now, approvals=len(now.approvals))
        raise TimeoutError("the decision was not recorded")


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
    if result.outcome == "unknown":
        return (
            ":warning: countersign could not confirm whether your decision was recorded (its "
            "database answered too slowly). If the message still shows its buttons, click again."
        )
    if result.outcome == "not_found":
        return "This approval request does not exist (any more). Nothing was changed."
    return ""


def build_bolt_app(
    *,
    client: Any,
    notifier: SlackNotifier,
    signing_secret: str,
    store: RunStore,
    reviewers: ReviewerRules,
    commands: SlashCommands,
    tasks: BackgroundTasks,
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        ignoring_self_events_enabled=False,
    )
    decider = Decider(store, reviewers)

    def ephemeral(channel: str, user: str, text: str) -> None:
        if text and channel:
            tasks.spawn(_post_ephemeral(notifier, channel, user, text))

    def foreign(team: str, context: AsyncBoltContext) -> bool:
        """From another workspace than the one the bot's token belongs to?"""
        installed = context.authorize_result.team_id if context.authorize_result else None
        return bool(installed) and team != installed

    async def on_button(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        click = parse_click(body)
        if click is None or foreign(click.team, context):
            log.warning("ignored a click that is malformed or from another workspace")
            return
        user, channel = click.user, click.channel
        try:
            request = await decider.load(click.request_id)
            refusal = await decider.refusal(user, request, click)
            if refusal or request is None:
                ephemeral(channel, user, refusal)
                return
            if click.action_id in (blocks.REJECT, blocks.ANSWER):
                modal = (
                    blocks.reject_modal if click.action_id == blocks.REJECT else blocks.answer_modal
                )
                tasks.spawn(
                    _open_view(client, notifier, click.trigger_id, modal(request), channel, user)
                )
                return
            always = click.action_id == blocks.APPROVE_ALWAYS and request.allow_always
            decision = Approve(decided_by=user, call_hash=request.call_hash, always=always)
            ephemeral(channel, user, result_text(await decider.decide(request, decision)))
        except (RedisError, TimeoutError, OSError):
            log.warning("click by %s could not reach Redis", user)
            ephemeral(channel, user, UNAVAILABLE)

    for action_id in (blocks.APPROVE, blocks.APPROVE_ALWAYS, blocks.REJECT, blocks.ANSWER):
        app.action(action_id)(on_button)

    async def on_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        is_answer = isinstance(view, dict) and view.get("callback_id") == blocks.ANSWER_MODAL
        block, field = (
            (blocks.ANSWER_BLOCK, blocks.ANSWER_INPUT)
            if is_answer
            else (blocks.REASON_BLOCK, blocks.REASON_INPUT)
        )
        submission = parse_submission(body, view)
        if submission is None or foreign(submission.team, context):
            stale = "This form does not match a request any more; close it and click again."
            await ack(response_action="errors", errors={block: stale})
            return
        user = submission.user
        text = input_value(submission.values, block, field)
        try:
            request = await decider.load(submission.request_id)
            refusal = await decider.refusal(user, request)
            if refusal or request is None:
                await ack(response_action="errors", errors={block: _plain(refusal)})
                return
            if is_answer and not text.strip():
                await ack(response_action="errors", errors={block: "Write an answer to send."})
                return
            decision: Decision = (
                Answer(text=text, decided_by=user, call_hash=request.call_hash)
                if is_answer
                else Reject(message=text, decided_by=user, call_hash=request.call_hash)
            )
            result = await decider.decide(request, decision)
        except (RedisError, TimeoutError, OSError):
            await ack(response_action="errors", errors={block: _plain(UNAVAILABLE)})
            return
        if result.accepted:
            await ack()
        else:
            await ack(response_action="errors", errors={block: _plain(result_text(result))})

    app.view(blocks.REJECT_MODAL)(on_submit)
    app.view(blocks.ANSWER_MODAL)(on_submit)

    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> None:
        user, channel = command.get("user_id"), command.get("channel_id")
        text_in = command.get("text")
        if not isinstance(user, str) or not user or foreign(str(command.get("team_id")), context):
            await ack()
            return
        try:
            text = await asyncio.wait_for(
                commands.handle(
                    user,
                    channel if isinstance(channel, str) else "",
                    text_in if isinstance(text_in, str) else "",
                ),
                REDIS_TIMEOUT * 2,
            )
        except (RedisError, TimeoutError, OSError):
            text = (
                ":hourglass: countersign's database is not reachable right now; try again shortly."
            )
        await ack(response_type="ephemeral", text=text)

    app.command("/approvals")(on_command)
    return app


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
