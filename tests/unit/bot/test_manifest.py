"""manifest.yml: valid against Slack's manifest schema, least-privilege scopes, our endpoint."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
import yaml

from bot.check import REQUIRED_SCOPES
from slack_sandbox.core import BOT_SCOPES as SANDBOX_SCOPES
from tests.support.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
MANIFEST = ROOT / "manifest.yml"
SCHEMA_NAME = "manifest.schema.1.0.0.json"
# Vendored copy first, then the shared project folder beside the checkout.
SCHEMA_CANDIDATES = (
    ROOT / "tests" / "fixtures" / "slack" / SCHEMA_NAME,
    ROOT.parent / "shared" / "slack" / SCHEMA_NAME,
)
EVENTS_URL = "https://countersign.example.com/slack/events"
BOT_SCOPES = {
    "chat:write",
    "commands",
    "usergroups:read",
    "channels:read",
    "groups:read",
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    document = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    path = next((p for p in SCHEMA_CANDIDATES if p.is_file()), None)
    if path is None:
        pytest.skip(f"Slack manifest schema {SCHEMA_NAME} not found in {SCHEMA_CANDIDATES}")
    schema = json.loads(path.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)  # the draft its `$schema` names
    cls.check_schema(schema)
    return cls(schema)


def errors(validator: jsonschema.protocols.Validator, document: Any) -> list[str]:
    return [e.message for e in validator.iter_errors(document)]


def test_manifest_is_valid_against_the_slack_schema(
    validator: jsonschema.protocols.Validator, manifest: dict[str, Any]
) -> None:
    assert errors(validator, manifest) == []


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(lambda m: m.update(bogus_key=True), id="unknown top-level key"),
        pytest.param(
            lambda m: m["features"]["bot_user"].update(always_online="yes"), id="wrong type"
        ),
        pytest.param(
            lambda m: m["features"]["slash_commands"][0].pop("description"),
            id="missing required",
        ),
        pytest.param(lambda m: m["settings"].update(interactive=True), id="misspelt setting"),
        pytest.param(
            lambda m: m["features"]["slash_commands"][0].update(command="approvals"),
            id="command without slash",
        ),
    ],
)
def test_negative_control_broken_copies_fail_validation(
    validator: jsonschema.protocols.Validator, manifest: dict[str, Any], break_it: Any
) -> None:
    broken = copy.deepcopy(manifest)
    break_it(broken)
    assert errors(validator, broken), "the schema check accepted a broken manifest"


def test_display_information_and_bot_user(manifest: dict[str, Any]) -> None:
    assert manifest["display_information"]["name"] == "countersign"
    assert manifest["display_information"]["description"]
    assert manifest["features"]["bot_user"] == {
        "display_name": "countersign",
        "always_online": True,
    }


def test_bot_scopes_are_exactly_the_least_privilege_set(manifest: dict[str, Any]) -> None:
    scopes = manifest["oauth_config"]["scopes"]
    assert set(scopes) == {"bot"}, "no user or optional scopes"
    assert len(scopes["bot"]) == len(set(scopes["bot"]))
    assert set(scopes["bot"]) == BOT_SCOPES
    # `countersign check` asks for exactly these, and the stand-in grants them.
    assert set(REQUIRED_SCOPES) == set(SANDBOX_SCOPES) == BOT_SCOPES


def test_the_approvals_slash_command(manifest: dict[str, Any]) -> None:
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/approvals"
    assert command["url"] == EVENTS_URL
    assert command["description"]
    assert command["usage_hint"] == (
        "pending [all] | show <request-id> | routes | route add … | route remove <id> | help"
    )
    assert command["should_escape"] is True


def test_settings_and_both_urls_point_at_slack_events(manifest: dict[str, Any]) -> None:
    settings = manifest["settings"]
    assert settings["interactivity"] == {"is_enabled": True, "request_url": EVENTS_URL}
    assert settings["org_deploy_enabled"] is False
    assert settings["socket_mode_enabled"] is False
    assert settings["token_rotation_enabled"] is False
    urls = [manifest["features"]["slash_commands"][0]["url"]]
    urls.append(settings["interactivity"]["request_url"])
    urls.append(settings["event_subscriptions"]["request_url"])
    assert all(url.startswith("https://") and url.endswith("/slack/events") for url in urls)


def test_the_home_tab_is_enabled_and_its_event_subscribed(manifest: dict[str, Any]) -> None:
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    events = manifest["settings"]["event_subscriptions"]
    assert events["request_url"] == EVENTS_URL
    assert events["bot_events"] == ["app_home_opened"]
    assert "user_events" not in events  # nothing is read on a person's behalf


def test_top_comment_says_to_replace_the_host_name() -> None:
    first = MANIFEST.read_text(encoding="utf-8").splitlines()[:5]
    header = " ".join(line for line in first if line.startswith("#"))
    assert "Replace countersign.example.com" in header
