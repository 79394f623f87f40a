"""`countersign check` as an operator runs it: the real command in a child process, against
a real Redis and the Slack stand-in. A good configuration passes with one `ok` line per
check; a channel the bot is not in, an archived one, a wrong token, an unreachable Redis and
a bad agents setting each fail with a line saying what to fix, and the exit status is 1."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_host.approvals.external import ExternalRequestSpec
from agent_host.approvals.routes import load_routes_file, parse_spec
from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.external_store import ExternalRequests
from agent_host.durable.keys import ROUTES
from agent_host.durable.redis_server import free_port
from agent_host.durable.route_book import RouteBook
from slack_sandbox import SlackStandIn, seed_workspace
from slack_sandbox.workspace import Channel
from tests.support.host_env import make_env
from tests.support.processes import Finished, inherited_env, run_cli
from tests.support.redis_fixtures import RedisServerFactory

TOKEN = "xoxb-check-token"
APPROVALS, OPS = "C0APPROVALS", "C0OPS"  # the bot is in both (the sandbox's seed)
SECRET_ROOM, ARCHIVED = "C0SECRETROOM", "C0ARCHIVED"
PRIVATE_OPS = "G0PRIVATEOPS"  # private, the bot in it
EXAMPLE_AGENTS = ("refund-agent", "cleanup-agent", "support-agent")  # agent_host.examples


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    workspace = seed_workspace()
    workspace.channels += [
        Channel(SECRET_ROOM, "secret-room", 1_700_000_000, ["U0REVIEWER"]),
        Channel(ARCHIVED, "old-approvals", 1_700_000_000, ["U0BOT"], is_archived=True),
        Channel(PRIVATE_OPS, "private-ops", 1_700_000_000, ["U0BOT"], is_private=True),
    ]
    served = SlackStandIn(workspace, token=TOKEN)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


def routes_file(tmp_path: Path, *channels: str) -> Path:
    path = tmp_path / "routes.yml"
    lines = ["routes:"]
    for agent, channel in zip(EXAMPLE_AGENTS, channels, strict=False):
        lines += [f'  - agent: "{agent}"', f"    channel: {channel}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def good_env(standin: SlackStandIn, redis_url: str, tmp_path: Path) -> dict[str, str]:
    return inherited_env() | {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "check-secret",
        "SLACK_API_URL": standin.url,
        "REDIS_URL": redis_url,
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key("k1"),
        "COUNTERSIGN_DEFAULT_CHANNEL": APPROVALS,
        "COUNTERSIGN_ROUTES_FILE": str(routes_file(tmp_path, OPS)),
    }


def failures(done: Finished) -> list[str]:
    return [line for line in done.out.splitlines() if line.startswith("FAIL")]


async def check(env: dict[str, str], cwd: Path) -> Finished:
    done = await run_cli("check", env=env, cwd=cwd)
    assert "Traceback" not in done.err, done.err
    return done


async def test_a_good_configuration_passes(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    done = await check(good_env(standin, redis_url, tmp_path), tmp_path)

    assert done.code == 0, done
    assert failures(done) == [], done.out
    assert f"ok    channel {APPROVALS} (COUNTERSIGN_DEFAULT_CHANNEL)" in done.out
    assert f"ok    channel {OPS} (route refund-agent/*)" in done.out
    assert "ok    redis: Redis at redis://" in done.out
    assert "ok    slack token: bot @countersign (U0BOT)" in done.out
    assert "ok    agents: agent_host.examples:default_registry: cleanup-agent" in done.out
    assert "ok    keys in use: 0 waiting run(s), each under a key the ring holds" in done.out
    assert "ok    durability: AOF on, appendfsync everysec: a power cut of" in done.out
    assert "countersign check: all 13 checks passed" in done.out
    assert not [name for name, _ in standin.core.calls if name.startswith("chat.")]


async def test_channels_the_bot_cannot_post_in_fail_with_the_fix(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path)
    env["COUNTERSIGN_ROUTES_FILE"] = str(routes_file(tmp_path, OPS, SECRET_ROOM, ARCHIVED))

    done = await check(env, tmp_path)

    assert done.code == 1, done
    assert failures(done) == [
        f"FAIL  channel {SECRET_ROOM} (route cleanup-agent/*): I am not a member of "
        f"#{SECRET_ROOM}; invite the bot with `/invite @countersign` in #{SECRET_ROOM}, then run "
        "`countersign check` again.",
        f"FAIL  channel {ARCHIVED} (route support-agent/*): #{ARCHIVED} is archived: unarchive it, "
        "or choose another channel.",
    ], done.out
    assert "countersign check: 2 of 15 checks failed" in done.out


async def test_a_wrong_token_fails_and_names_the_variable(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path) | {"SLACK_BOT_TOKEN": "xoxb-wrong"}

    done = await check(env, tmp_path)

    assert done.code == 1, done
    assert failures(done) == [
        "FAIL  slack token: Slack refused SLACK_BOT_TOKEN (invalid_auth): the bot token is "
        "wrong: check SLACK_BOT_TOKEN",
        "FAIL  channels: not checked: auth.test did not succeed (see the line above)",
    ], done.out


async def test_a_token_without_a_scope_countersign_calls_with_fails_naming_it(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """Installed from an old manifest, say: every post would fail with missing_scope."""
    standin.grant("commands", "usergroups:read", "channels:read", "groups:read")
    done = await check(good_env(standin, redis_url, tmp_path), tmp_path)

    assert done.code == 1, done
    [token, *_] = failures(done)
    assert token.startswith("FAIL  slack token: the app lacks the scope(s) chat:write"), token
    assert "reinstall the app" in token


async def test_a_wrong_app_token_fails_naming_it(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """Socket Mode with an app-level token Slack refuses: `serve` would not start, so
    `check` must not pass."""
    env = good_env(standin, redis_url, tmp_path) | {"SLACK_APP_TOKEN": "xapp-bogus"}
    done = await check(env, tmp_path)

    assert done.code == 1, done
    [line] = failures(done)
    assert line.startswith("FAIL  socket mode: SLACK_APP_TOKEN was refused"), line
    assert "invalid_auth" in line

    async with SlackStandIn(seed_workspace(), token=TOKEN, app_token="xapp-right") as right:
        env = good_env(right, redis_url, tmp_path) | {"SLACK_APP_TOKEN": "xapp-right"}
        done = await check(env, tmp_path)
    assert done.code == 0, done
    assert "ok    socket mode: SLACK_APP_TOKEN opens a Socket Mode connection" in done.out


async def test_waiting_runs_under_a_key_no_longer_in_the_ring_fail_the_check(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """An operator about to retire a key learns which waiting runs still need it, before
    a reviewer's decision finds out."""
    old, new = generate_key("kOld"), generate_key("kNew")
    async with Redis.from_url(redis_url) as redis:
        env = make_env(redis, keyring=KeyRing.parse(old))
        for name in ("a", "b"):
            await env.start("cleanup-agent", f"remove /srv/{name}.docx")
        settled = make_env(redis, keyring=KeyRing.parse(f"{new},{old}"))
        await settled.start("cleanup-agent", "remove /srv/c.docx")
        # an approval asked by an agent that runs elsewhere: no checkpoint here, none needed
        spec = ExternalRequestSpec(agent="billing", tool="refund", arguments={"order": 1})
        await ExternalRequests(settled.store).create(spec)
    base = good_env(standin, redis_url, tmp_path)

    retired = await check(base | {"COUNTERSIGN_ENCRYPTION_KEYS": new}, tmp_path)
    both = await check(base | {"COUNTERSIGN_ENCRYPTION_KEYS": f"{new},{old}"}, tmp_path)

    assert retired.code == 1, retired
    assert failures(retired) == [
        "FAIL  keys in use: 2 under 'kOld' of 3 waiting run(s): COUNTERSIGN_ENCRYPTION_KEYS no "
        "longer holds that key, so once decided they wait unresumed for a worker that has "
        "it (those decided already wait now). Put it back after the active key, run "
        "`countersign keys rotate`, then remove it"
    ], retired.out
    assert both.code == 0, both
    assert "ok    keys in use: 3 waiting run(s), each under a key the ring holds" in both.out


async def test_an_unreachable_redis_fails_and_says_what_to_fix(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    nowhere = f"redis://:s3cret@127.0.0.1:{free_port()}/0"  # nothing listens there
    env = good_env(standin, redis_url, tmp_path) | {"REDIS_URL": nowhere}

    done = await check(env, tmp_path)

    assert done.code == 1, done
    [line] = failures(done)
    assert line.startswith("FAIL  redis: Redis at redis://***@127.0.0.1:"), line
    assert line.endswith("start it, or fix REDIS_URL"), line
    assert "s3cret" not in done.out + done.err
    assert "ok    slack token" in done.out  # the other checks still ran


async def checked_on_own_redis(
    standin: SlackStandIn, redis_server_factory: RedisServerFactory, tmp_path: Path
) -> tuple[Any, dict[str, str], Finished]:
    """A good configuration on a Redis of the test's own (its settings are the test's to
    change), checked once and passing: (that server, the environment, the check)."""
    server = redis_server_factory(appendfsync="always")
    env = good_env(standin, server.url, tmp_path)
    done = await check(env, tmp_path)
    assert done.code == 0, done
    return server, env, done


async def test_the_durability_line_says_what_redis_can_lose_and_fails_without_an_aof(
    standin: SlackStandIn, redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server, env, done = await checked_on_own_redis(standin, redis_server_factory, tmp_path)
    assert "ok    durability: AOF on, appendfsync always: nothing acknowledged is lost" in done.out

    async with Redis.from_url(server.url) as redis:
        await redis.config_set("appendonly", "no")
    done = await check(env, tmp_path)
    assert done.code == 1, done
    [line] = failures(done)
    assert line.startswith("FAIL  durability: appendonly is off: a restart of Redis loses"), line
    assert line.endswith("set appendonly yes"), line


async def test_a_routes_file_redis_already_holds_other_routes_for_is_said_not_in_force(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path)
    async with Redis.from_url(redis_url) as redis:
        await RouteBook(redis, APPROVALS).add(parse_spec(f"tool=other channel={OPS}"), "U0ADMIN")

    done = await check(env, tmp_path)

    assert done.code == 0, done  # the usual course once admins change routes in Slack
    [line] = [x for x in done.out.splitlines() if x.startswith("ok    routes file:")]
    assert line.endswith(
        "1 route(s); COUNTERSIGN_ROUTES_FILE's 1 route(s) are not in force: Redis holds 1 "
        "route(s) of its own, which differ (a routes file fills only a Redis that never held "
        "routes, so that admins' changes survive a restart). To put the file's rules in force, "
        f"change the routes with /approvals route, or delete the key {ROUTES} and restart"
    ), line

    async with Redis.from_url(redis_url) as redis:  # admins removed every route since
        await RouteBook(redis, APPROVALS).remove("r1", "U0ADMIN")
    emptied = await check(env, tmp_path)
    [line] = [x for x in emptied.out.splitlines() if x.startswith("ok    routes file:")]
    assert "not in force: Redis holds 0 route(s) of its own" in line, line  # as serve says


async def test_routes_for_an_agent_countersign_does_not_run_are_said_once_not_failed(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """A mistyped agent name would leave the agent's calls to another route; an agent
    asking over the HTTP API sends a name of its own, so such a route is said, on an `ok`
    line, once for the file's copy and Redis's, naming the closest agent."""
    env = good_env(standin, redis_url, tmp_path)
    typo = tmp_path / "typo.yml"
    typo.write_text(f'routes:\n  - agent: "refund-agnet"\n    channel: {OPS}\n')
    env["COUNTERSIGN_ROUTES_FILE"] = str(typo)
    async with Redis.from_url(redis_url) as redis:
        await RouteBook(redis, APPROVALS).seed(load_routes_file(typo))
        await RouteBook(redis, APPROVALS).add(parse_spec(f"agent=refund-* channel={OPS}"), "U0A")

    done = await check(env, tmp_path)

    assert done.code == 0, done
    notes = [x for x in done.out.splitlines() if x.startswith("ok    routes for agent")]
    assert notes == [
        "ok    routes for agent refund-agnet: note: no agent countersign runs is called "
        "'refund-agnet' (did you mean 'refund-agent'?) (r1); such a route applies only to "
        "agents that ask over the HTTP API under that name"
    ], done.out


async def test_the_eviction_line_fails_on_a_redis_that_drops_keys_when_full(
    standin: SlackStandIn, redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server, env, done = await checked_on_own_redis(standin, redis_server_factory, tmp_path)
    assert "ok    eviction: no maxmemory: Redis never drops keys to make room" in done.out

    async with Redis.from_url(server.url) as redis:
        await redis.config_set("maxmemory-policy", "allkeys-lru")  # no limit: never used
        assert (await check(env, tmp_path)).code == 0
        await redis.config_set("maxmemory", "1gb")
        done = await check(env, tmp_path)
        assert done.code == 1, done
        [line] = failures(done)
        assert line.startswith("FAIL  eviction: Redis's maxmemory-policy is allkeys-lru under"), (
            line
        )
        assert "set maxmemory-policy noeviction" in line, line

        await redis.config_set("maxmemory-policy", "volatile-lru")  # only keys with an expiry
        done = await check(env, tmp_path)
        assert done.code == 1, done  # the replay guard's among them
        [line] = failures(done)
        assert line.startswith("FAIL  eviction: Redis's maxmemory-policy is volatile-lru under"), (
            line
        )
        assert "keys with an expiry, the replay guard's among them" in line, line
        await redis.config_set("maxmemory", "0")


async def test_the_memory_line_says_how_much_is_in_use_and_fails_when_redis_is_full(
    standin: SlackStandIn, redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server, env, done = await checked_on_own_redis(standin, redis_server_factory, tmp_path)
    [line] = [x for x in done.out.splitlines() if "  memory: " in x]
    assert re.fullmatch(r"ok    memory: \d+\.\d MB in use \(no maxmemory\)", line), line

    async with Redis.from_url(server.url) as redis:
        await redis.config_set("maxmemory", "100kb")  # below what is in use: writes refused
        done = await check(env, tmp_path)
        await redis.config_set("maxmemory", "0")
    assert done.code == 1, done
    [line] = failures(done)
    assert line.startswith("FAIL  memory: Redis is full: "), line
    assert "in use of a 100.0 KB maxmemory" in line, line
    assert "raise Redis's maxmemory, or delete other applications' keys (never " in line, line


async def test_unset_redis_url_says_the_embedded_server_would_be_used(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path)
    del env["REDIS_URL"]

    done = await check(env, tmp_path)

    assert done.code == 0, done
    assert "ok    redis: REDIS_URL is unset: the embedded redis-server (" in done.out
    assert "ok    durability: AOF on, appendfsync everysec" in done.out  # the embedded's
    assert "ok    eviction: no maxmemory: Redis never drops keys to make room" in done.out
    assert not (tmp_path / "data" / "redis").exists()  # nothing was started


async def test_bad_settings_and_agents_fail_with_the_variable(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path) | {
        "COUNTERSIGN_AGENTS": "nomodule:registry",
        "COUNTERSIGN_ENCRYPTION_KEYS": "not-a-key",
    }
    del env["SLACK_SIGNING_SECRET"]

    done = await check(env, tmp_path)

    assert done.code == 1, done
    lines = failures(done)
    assert len(lines) == 3, done.out
    assert lines[0].startswith("FAIL  slack settings: SLACK_SIGNING_SECRET must be set")
    assert lines[1].startswith("FAIL  keys: ") and "COUNTERSIGN_ENCRYPTION_KEYS" in lines[1]
    assert lines[2].startswith("FAIL  agents: COUNTERSIGN_AGENTS='nomodule:registry': module")

    done = await check(env | {"PORT": "not-a-port"}, tmp_path)
    assert done.code == 1, done
    assert failures(done) == [
        "FAIL  settings: invalid configuration: PORT: Input should be a valid integer, "
        "unable to parse string as an integer"
    ], done.out

    # Admins by name, and a callback URL where its host goes: each passed, and did nothing.
    for name, value, says in (
        ("COUNTERSIGN_ADMINS", "U0ADMIN, @alice", "'@alice' is not a Slack user id"),
        (
            "COUNTERSIGN_CALLBACK_HOSTS",
            "https://hooks.example.com/path",
            "'https://hooks.example.com/path' is not host or host:port",
        ),
    ):
        done = await check(env | {name: value}, tmp_path)
        assert done.code == 1, done
        [line] = failures(done)
        assert line.startswith(f"FAIL  settings: invalid configuration: {name}: {says}"), line


async def test_an_escalation_channel_the_bot_cannot_post_in_fails_with_the_fix(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    env = good_env(standin, redis_url, tmp_path)
    path = tmp_path / "escalating.yml"
    path.write_text(
        "routes:\n"
        f"  - channel: {OPS}\n    escalate_after: 4h\n    escalate_to: {SECRET_ROOM}\n"
        f"  - channel: {OPS}\n    escalate_after: 4h\n    escalate_to: S0REVIEWERS\n"
    )
    env["COUNTERSIGN_ROUTES_FILE"] = str(path)

    done = await check(env, tmp_path)

    assert done.code == 1, done
    assert failures(done) == [
        f"FAIL  channel {SECRET_ROOM} (route */*'s escalation): I am not a member of "
        f"#{SECRET_ROOM}; invite the bot with `/invite @countersign` in #{SECRET_ROOM}, then "
        "run `countersign check` again.",
    ], done.out


async def test_a_route_escalating_from_a_private_channel_to_a_public_one_is_said_not_failed(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """A routes file's escalation from a private channel to a public one passes (it may be
    meant) with a line saying who will read its requests; one between private channels, or
    from a public one, says nothing of it."""
    env = good_env(standin, redis_url, tmp_path)
    path = tmp_path / "escalating.yml"
    path.write_text(
        "routes:\n"
        f"  - agent: exposed\n    channel: {PRIVATE_OPS}\n    escalate_after: 4h\n"
        f"    escalate_to: {OPS}\n"
        f"  - agent: kept\n    channel: {OPS}\n    escalate_after: 4h\n"
        f"    escalate_to: {PRIVATE_OPS}\n"
    )
    env["COUNTERSIGN_ROUTES_FILE"] = str(path)

    done = await check(env, tmp_path)

    assert done.code == 0 and failures(done) == [], done
    said = [line for line in done.out.splitlines() if "escalates from the private" in line]
    assert said == [
        f"ok    route exposed/*'s escalation: note: it escalates from the private "
        f"#{PRIVATE_OPS} to the public #{OPS}; once escalated, anyone there reads its "
        "requests, arguments included (escalate to a private channel, a user group or a "
        "person to keep them private)"
    ], done.out
