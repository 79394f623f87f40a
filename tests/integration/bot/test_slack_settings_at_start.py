"""The Slack settings as `serve` meets them. A bot token Slack refuses: `serve` does not
start with one, saying what to fix; one refused while running (revoked, rotated away) gives
up no request: each waits, and is posted once the token is good again. No default channel:
said at start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent_host.durable.redis_server import free_port
from agent_host.errors import ConfigurationError, RetryLater
from bot import delivery
from bot.cli import _serve
from bot.slack_notifier import SlackNotifier
from slack_sandbox import SlackStandIn, open_workspace, workspace_to_dict
from tests.support.stack import ADMIN, CHANNEL, SECRET, TOKEN, running_stack, stack_settings
from tests.support.waiting import eventually


async def test_serve_does_not_start_with_a_bot_token_slack_refuses(
    redis_url: str, tmp_path: Path
) -> None:
    standin = SlackStandIn(open_workspace(tmp_path / "slack"), token=TOKEN, signing_secret=SECRET)
    async with standin:
        settings = stack_settings(standin, redis_url, tmp_path, SLACK_BOT_TOKEN="xoxb-wrong")
        with pytest.raises(ConfigurationError) as refused:
            await _serve(settings, "127.0.0.1", free_port(), 1)

    assert str(refused.value) == (
        "Slack refused SLACK_BOT_TOKEN (invalid_auth): the bot token is wrong: check "
        "SLACK_BOT_TOKEN; then start countersign again"
    )
    assert standin.calls_to("chat.postMessage") == []


async def test_a_token_refused_while_running_gives_up_no_request_and_it_is_posted_once_fixed(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_stack(redis_url, tmp_path) as stack:
        stack.standin.core.config.token = "xoxb-rotated"  # the one countersign has is revoked
        with caplog.at_level(logging.ERROR, logger="bot.slack_notifier"):
            run_id = await stack.start_run("refund-agent", "refund order 123")

            async def refused_and_said() -> bool:
                return "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in caplog.text

            await eventually(refused_and_said)

            async def tried_again() -> bool:  # the entry delivered again, refused again
                return len(stack.standin.calls_to("chat.postMessage")) >= 2

            await eventually(tried_again)
            [request] = await stack.host.store.run_requests(run_id)
            assert (request.delivery, request.message_ts) == ("", "")  # not given up
            assert caplog.text.count("Slack refused SLACK_BOT_TOKEN") == 1  # once a minute

            stack.standin.core.config.token = TOKEN  # put right (the app reinstalled)
            [posted] = await stack.pending_requests(run_id)

        assert posted.delivery != "undeliverable" and posted.message_ts
        assert len(stack.standin.calls_to("chat.postMessage")) >= 1


async def test_serve_without_a_default_channel_says_so_at_start(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.composition"):
        async with running_stack(redis_url, tmp_path, COUNTERSIGN_DEFAULT_CHANNEL=""):
            pass
        said = [r.getMessage() for r in caplog.records]
    assert said == [
        "COUNTERSIGN_DEFAULT_CHANNEL is unset: a request no route sends to a channel waits "
        "unposted until it is set, and one its channel refuses has no fallback; set it to a "
        "channel id (C…) the bot is in"
    ]


async def test_while_the_token_is_refused_the_admins_alert_and_the_fallback_wait_too(
    tmp_path: Path,
) -> None:
    """The last resorts of a request Slack refused for good (telling the admins, the
    fallback channel's check) say "not now" while the token is refused, so the entry is
    delivered again; they used to swallow it (the admins never told) or take the channel
    for a private one (no fallback)."""
    standin = SlackStandIn(open_workspace(tmp_path / "slack"), token=TOKEN, signing_secret=SECRET)
    async with standin:
        revoked = AsyncWebClient(token="xoxb-revoked", base_url=standin.url)
        good = AsyncWebClient(token=TOKEN, base_url=standin.url)
        for client, waits in ((revoked, True), (good, False)):
            notifier = SlackNotifier(client, CHANNEL, admins=[ADMIN], attempts=1)
            if waits:
                with pytest.raises(RetryLater, match=r"Slack refused SLACK_BOT_TOKEN"):
                    await notifier._tell_admins("request r1 is undeliverable", "r1")
                with pytest.raises(RetryLater, match=r"Slack refused SLACK_BOT_TOKEN"):
                    await delivery.is_public(client, CHANNEL)
            else:
                await notifier._tell_admins("request r1 is undeliverable", "r1")
                assert await delivery.is_public(client, CHANNEL) is True
        posted = workspace_to_dict(standin.workspace)["messages"]
    assert [m["text"] for m in posted] == ["request r1 is undeliverable"]  # told once, when good
