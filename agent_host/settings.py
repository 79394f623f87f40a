"""Configuration of the agent host, by concern, read from the environment at start-up.

Every environment variable countersign reads is a field here (or, for Slack's, in
`bot.slack_settings`): nothing else reads the environment. A missing or invalid setting stops
start-up with a message naming the variable.

    CoreSettings   data directory, agents, encryption keys, routes, channels, admins,
                   the bulk-message threshold
    RedisSettings  where Redis is (unset: an embedded redis-server)
    HttpSettings   the port, the API token, the webhook secret, body limits, callback hosts
    ModelSettings  the OpenAI-compatible model your own agents may use
    Settings       all four: what the agent host needs
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_host.approvals.routes import CHANNEL_ID  # the rule `route add` checks channels by
from agent_host.errors import ConfigurationError

__all__ = [
    "CoreSettings",
    "HttpSettings",
    "ModelSettings",
    "RedisSettings",
    "Settings",
    "env",
    "load_settings",
]


_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")


def _each_matches(value: str, pattern: re.Pattern[str], otherwise: str) -> str:
    """`value` if each of its comma-separated entries matches `pattern`; else ValueError
    naming the first that does not, and `otherwise`."""
    for entry in (e.strip() for e in value.split(",")):
        if entry and not pattern.fullmatch(entry):
            raise ValueError(f"{entry!r} {otherwise}")
    return value


def env(name: str) -> AliasChoices:
    """The environment variable `name` (or its lower-case spelling) for a field."""
    return AliasChoices(name, name.lower())


class _Base(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)


class CoreSettings(_Base):
    data_dir: Path = Field(Path(".countersign"), validation_alias=env("COUNTERSIGN_DATA_DIR"))
    agents: str = Field(
        "agent_host.examples:default_registry", validation_alias=env("COUNTERSIGN_AGENTS")
    )
    encryption_keys: str | None = Field(None, validation_alias=env("COUNTERSIGN_ENCRYPTION_KEYS"))
    routes_file: Path | None = Field(None, validation_alias=env("COUNTERSIGN_ROUTES_FILE"))
    default_channel: str = Field("", validation_alias=env("COUNTERSIGN_DEFAULT_CHANNEL"))
    admins: str = Field("", validation_alias=env("COUNTERSIGN_ADMINS"))
    # More approval calls than this in one turn, to one channel: one message for them all
    # (Approve all, Reject all, Review one by one); 0 posts every call on its own.
    bulk_threshold: int = Field(5, ge=0, validation_alias=env("COUNTERSIGN_BULK_THRESHOLD"))
    # For tests only: a crash point to stop at, and a file the example agents journal to.
    crash_at: str | None = Field(None, validation_alias=env("COUNTERSIGN_CRASH_AT"))
    example_journal: Path | None = Field(None, validation_alias=env("COUNTERSIGN_EXAMPLE_JOURNAL"))

    @property
    def admin_ids(self) -> frozenset[str]:
        return frozenset(a.strip() for a in self.admins.split(",") if a.strip())

    @field_validator("default_channel")
    @classmethod
    def _channel_id(cls, value: str) -> str:
        """A channel id, as routes need: a name (`general`, `#general`) reached Slack as an
        unknown channel, and `countersign check` then said to invite the bot there."""
        channel = value.strip()
        if channel and not CHANNEL_ID.fullmatch(channel):
            raise ValueError(
                f"{value!r} is not a Slack channel id: in Slack, open the channel, click its "
                "name at the top and copy the Channel ID (C… or G…) at the bottom of About"
            )
        return channel

    @field_validator("admins")
    @classmethod
    def _user_ids(cls, value: str) -> str:
        return _each_matches(
            value,
            _USER_ID,
            "is not a Slack user id: use each admin's member ID (U… or W…, from their "
            "profile's ⋮ menu), comma-separated",
        )


class RedisSettings(_Base):
    redis_url: str | None = Field(None, validation_alias=env("REDIS_URL"))


class HttpSettings(_Base):
    port: int = Field(3000, ge=1, le=65535, validation_alias=env("PORT"))
    api_token: str | None = Field(None, validation_alias=env("COUNTERSIGN_API_TOKEN"))
    webhook_secret: str | None = Field(None, validation_alias=env("COUNTERSIGN_WEBHOOK_SECRET"))
    max_body_bytes: int = Field(256 * 1024, ge=1024, validation_alias=env("COUNTERSIGN_MAX_BODY"))
    # host[:port], comma-separated: where decision callbacks may be POSTed (an allow-list)
    callback_hosts: str = Field("", validation_alias=env("COUNTERSIGN_CALLBACK_HOSTS"))

    @field_validator("callback_hosts")
    @classmethod
    def _hosts(cls, value: str) -> str:
        return _each_matches(
            value,
            _HOST,
            "is not host or host:port: write the callback URL's host alone "
            "(hooks.example.com, hooks.example.com:8443, [::1]:8080), no scheme or path",
        )


class ModelSettings(_Base):
    """An OpenAI-compatible Chat Completions model (`agent_host.llm.model_from_settings`):
    read here like every other variable, used only by agents whose factory asks for it."""

    model: str = Field("", validation_alias=env("COUNTERSIGN_MODEL"))
    openai_base_url: str = Field("", validation_alias=env("OPENAI_BASE_URL"))
    openai_api_key: str | None = Field(None, validation_alias=env("OPENAI_API_KEY"))


class Settings(CoreSettings, RedisSettings, HttpSettings, ModelSettings):
    """What the agent host needs: core, Redis, HTTP and model settings."""


S = TypeVar("S", bound=BaseSettings)


def load_settings(environ: Mapping[str, str] | None = None, kind: type[S] = Settings) -> S:  # type: ignore[assignment]
    """Read `kind` of settings from `environ` (default: the process environment)."""
    try:
        if environ is None:
            return kind()
        return kind.model_validate(dict(environ))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = error["loc"][0] if error["loc"] else "?"
            message = str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix
            problems.append(f"{str(loc).upper()}: {message}")
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from exc
