"""The Slack Web API client logs what the operator's logging asks for, and builds nothing
for a debug log that is off: slack_sdk checks its logger's own level, not the effective one,
before formatting each request and response (every call of an approval cycle pays it)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.library_loggers import bolt_logger
from bot.wiring import web_client
from slack_sandbox import SlackStandIn, open_workspace
from tests.support.stack import CHANNEL, SECRET, TOKEN, stack_settings

RESPONSE_LINE = "Received the following response"
LOGGER = "slack_sdk.web.async_base_client"  # the one slack_sdk's Web API client uses


@pytest.fixture
def unset_level() -> Iterator[None]:
    """slack_sdk's logger as a fresh process has it (level unset), and so again after."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(logging.NOTSET)
    yield
    logger.setLevel(logging.NOTSET)


@pytest.fixture
async def standin(tmp_path: Path) -> AsyncIterator[SlackStandIn]:
    slack = SlackStandIn(open_workspace(tmp_path / "slack"), token=TOKEN, signing_secret=SECRET)
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


async def post_once(standin: SlackStandIn, tmp_path: Path) -> logging.Logger:
    """One chat.postMessage through the bot's client; the logger the client used."""
    session, client = web_client(stack_settings(standin, "redis://127.0.0.1:1", tmp_path))
    try:
        reply = await client.chat_postMessage(channel=CHANNEL, text="hello")
        assert reply["ok"], reply
    finally:
        await session.close()
    logger: logging.Logger = client.logger
    return logger


async def test_a_call_builds_no_debug_lines_when_debug_is_off(
    unset_level: None,
    standin: SlackStandIn,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    built: list[str] = []

    def debug(message: str, *args: Any, **kwargs: Any) -> None:
        built.append(message)

    monkeypatch.setattr(logging.getLogger(LOGGER), "debug", debug)

    logger = await post_once(standin, tmp_path)

    assert logger.level == logging.INFO
    assert not [line for line in built if RESPONSE_LINE in line], built


async def test_a_call_is_still_logged_when_debug_is_on(
    unset_level: None, standin: SlackStandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    await post_once(standin, tmp_path)

    lines = [r.getMessage() for r in caplog.records if r.name.startswith("slack_sdk")]
    assert any(RESPONSE_LINE in line for line in lines), lines


def test_bolts_logger_keeps_the_level_in_effect(caplog: pytest.LogCaptureFixture) -> None:
    """Bolt checks its logger's own level before each middleware's debug line."""
    logger = logging.getLogger("slack_bolt.AsyncApp")
    logger.setLevel(logging.NOTSET)
    caplog.set_level(logging.WARNING)
    try:
        assert bolt_logger() is logger and logger.level == logging.WARNING
    finally:
        logger.setLevel(logging.NOTSET)
