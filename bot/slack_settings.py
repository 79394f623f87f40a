"""The Slack side's settings, and the settings of the whole service (agent host + bot)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_host.settings import Settings, env
from agent_host.settings import load_settings as _load

__all__ = ["ServiceSettings", "SlackSettings", "load_settings"]


class SlackSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    slack_bot_token: str | None = Field(None, validation_alias=env("SLACK_BOT_TOKEN"))
    slack_signing_secret: str | None = Field(None, validation_alias=env("SLACK_SIGNING_SECRET"))
    slack_app_token: str | None = Field(None, validation_alias=env("SLACK_APP_TOKEN"))
    slack_api_url: str = Field("https://slack.com/api/", validation_alias=env("SLACK_API_URL"))


class ServiceSettings(Settings, SlackSettings):
    """Everything `countersign serve`, `worker` and `demo` read: the agent host's settings
    (core, Redis, HTTP) and Slack's."""


def load_settings(environ: Mapping[str, str] | None = None) -> ServiceSettings:
    """The service's settings from `environ` (default: the process environment)."""
    return _load(environ, ServiceSettings)
