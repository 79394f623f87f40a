"""The Slack libraries' loggers, each with its level set to the one in effect.

slack_sdk and Bolt decide whether to build their debug lines (each Web API request's
arguments, each response's headers and body, each middleware applied) from a logger's own
level, not its effective one. With the level unset, as it is unless configured, they build
every line and then drop it: about 1% of an approval cycle's CPU (paired `bench.steps`
runs). Set to the level in effect when the app is built (`serve` and `worker` configure
logging first), they log as before. A level set on them later still applies; one set later
on a parent (`slack_sdk`, `slack_bolt`) no longer reaches them.
"""

from __future__ import annotations

import logging

__all__ = ["LIBRARY_LOGGERS", "bolt_logger", "web_api_logger"]

WEB_API_LOGGER = "slack_sdk.web.async_base_client"  # slack_sdk's Web API client's default
BOLT_LOGGER = "slack_bolt.AsyncApp"  # Bolt's AsyncApp's default
LIBRARY_LOGGERS = (WEB_API_LOGGER, BOLT_LOGGER)


def web_api_logger() -> logging.Logger:
    """The logger slack_sdk's Web API client uses by default."""
    return _level_in_effect(logging.getLogger(WEB_API_LOGGER))


def bolt_logger() -> logging.Logger:
    """The logger Bolt's AsyncApp uses by default (it hands its level to its middleware's)."""
    return _level_in_effect(logging.getLogger(BOLT_LOGGER))


def _level_in_effect(logger: logging.Logger) -> logging.Logger:
    if logger.level == logging.NOTSET:
        logger.setLevel(logger.getEffectiveLevel())
    return logger
