"""Configuration: one pydantic-settings object read from the environment at start-up.

A missing or invalid setting stops start-up with a message naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_host.errors import ConfigurationError

__all__ = ["Settings", "load_settings"]


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, name.lower())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    slack_bot_token: str | None = Field(None, validation_alias=_env("SLACK_BOT_TOKEN"))
    slack_signing_secret: str | None = Field(None, validation_alias=_env("SLACK_SIGNING_SECRET"))
    slack_app_token: str | None = Field(None, validation_alias=_env("SLACK_APP_TOKEN"))
    slack_api_url: str = Field("https://slack.com/api/", validation_alias=_env("SLACK_API_URL"))
    redis_url: str | None = Field(None, validation_alias=_env("REDIS_URL"))
    data_dir: Path = Field(Path(".countersign"), validation_alias=_env("COUNTERSIGN_DATA_DIR"))
    encryption_keys: str | None = Field(None, validation_alias=_env("COUNTERSIGN_ENCRYPTION_KEYS"))
    api_token: str | None = Field(None, validation_alias=_env("COUNTERSIGN_API_TOKEN"))
    webhook_secret: str | None = Field(None, validation_alias=_env("COUNTERSIGN_WEBHOOK_SECRET"))
    default_channel: str = Field("", validation_alias=_env("COUNTERSIGN_DEFAULT_CHANNEL"))
    admins: str = Field("", validation_alias=_env("COUNTERSIGN_ADMINS"))
    agents: str = Field(
        "agent_host.examples:default_registry", validation_alias=_env("COUNTERSIGN_AGENTS")
    )
    routes_file: Path | None = Field(None, validation_alias=_env("COUNTERSIGN_ROUTES_FILE"))
    port: int = Field(3000, ge=1, le=65535, validation_alias=_env("PORT"))
    crash_at: str | None = Field(None, validation_alias=_env("COUNTERSIGN_CRASH_AT"))  # tests only
    max_body_bytes: int = Field(256 * 1024, ge=1024, validation_alias=_env("COUNTERSIGN_MAX_BODY"))

    @property
    def admin_ids(self) -> frozenset[str]:
        return frozenset(a.strip() for a in self.admins.split(",") if a.strip())


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from `environ` (default: the process environment)."""
    try:
        if environ is None:
            return Settings()
        return Settings.model_validate(dict(environ))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = error["loc"][0] if error["loc"] else "?"
            problems.append(f"{str(loc).upper()}: {error['msg']}")
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from exc
