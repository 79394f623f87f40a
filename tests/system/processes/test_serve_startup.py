"""`countersign serve` started the way a developer starts it in their first hour: their own
agents module in the current directory, a mistake in COUNTERSIGN_AGENTS, an agent whose model
is not configured, a port someone else holds. Each mistake is one line naming what to fix,
exit status 2, no traceback; a good start prints no Bolt warning."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from agent_host.durable.crypto import generate_key
from agent_host.durable.host import MAX_WORKERS
from agent_host.durable.redis_server import RedisServer, free_port, running_in
from slack_sandbox import SlackStandIn, seed_workspace
from tests.support.paths import PROJECT_ROOT
from tests.support.processes import CLI, Finished, Proc, inherited_env, run_cli, until

TOKEN = "xoxb-startup-token"
API_TOKEN = "startup-api-token"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}

MYMODULE = """
from agent_host import Agent, AgentRegistry, ScriptedModel, reply
from agent_host.llm import model_from_settings


def greeter(model):
    return Agent(name="greeter", instructions="Greet.", tools=[], model=model)


registry = AgentRegistry(
    {"greeter": lambda: greeter(ScriptedModel(lambda c: reply("hello from mymodule")))}
)


def unconfigured(settings):
    model = model_from_settings(settings)
    return AgentRegistry({"greeter": lambda: greeter(model)})


no_model = AgentRegistry({"greeter": lambda: greeter(None)})
"""


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    served = SlackStandIn(seed_workspace(), token=TOKEN)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A developer's folder: their agents module, and nothing of countersign's."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "mymodule.py").write_text(MYMODULE)
    return folder


@pytest.fixture
def serves() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


def env_for(standin: SlackStandIn, redis_url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    return inherited_env() | {
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "startup-secret",
        "SLACK_API_URL": standin.url,
        "REDIS_URL": redis_url,
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key("k1"),
        "COUNTERSIGN_API_TOKEN": API_TOKEN,
        "COUNTERSIGN_DEFAULT_CHANNEL": "C0APPROVALS",
        **more,
    }


def only_line(done: Finished) -> str:
    assert "Traceback" not in done.err and "Unclosed" not in done.err, done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    return lines[0]


async def test_an_agents_module_in_the_current_directory_is_found(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, project: Path, serves: list[Proc]
) -> None:
    env = env_for(
        standin,
        redis_url,
        tmp_path,
        COUNTERSIGN_AGENTS="mymodule:registry",
        PYTHONPATH=str(PROJECT_ROOT),  # countersign itself; not the developer's folder
    )
    port = free_port()
    args = [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)]
    serve = Proc("serve", args, env, tmp_path / "serve.log", port, cwd=project)
    serves.append(serve)

    async with aiohttp.ClientSession() as session:
        body = {"agent": "greeter", "input": "hi"}
        run_id = await until(
            "a run of greeter to start",
            lambda: start_run(session, serve, body),
            watch=[serve],
        )

        async def output() -> str | None:
            async with session.get(f"{serve.url}/api/v1/runs/{run_id}", headers=AUTH) as resp:
                detail = await resp.json()
                return detail["output"] if detail["status"] == "succeeded" else None

        assert await until("the run to succeed", output, watch=[serve]) == "hello from mymodule"
    serve.stop()
    log = serve.log.read_text()
    assert "will be unused" not in log, log  # Bolt's warning about the token
    assert "Traceback" not in log and "Unclosed" not in log, log


async def start_run(session: aiohttp.ClientSession, serve: Proc, body: dict[str, str]) -> str:
    async with session.post(f"{serve.url}/api/v1/runs", json=body, headers=AUTH) as resp:
        assert resp.status == 202, await resp.text()
        run_id: str = (await resp.json())["run_id"]
        return run_id


@pytest.mark.parametrize(
    ("agents", "says"),
    [
        ("nomodule", "COUNTERSIGN_AGENTS='nomodule': module 'nomodule' cannot be imported"),
        ("x:", "COUNTERSIGN_AGENTS='x:': module 'x' cannot be imported"),
        ("mymodule:missing", "COUNTERSIGN_AGENTS='mymodule:missing': mymodule has no 'missing'"),
        ("my module", "COUNTERSIGN_AGENTS='my module' is not module:attribute"),
        (
            "mymodule:unconfigured",
            "COUNTERSIGN_MODEL is unset, and an agent uses the OpenAI-compatible model: set "
            "COUNTERSIGN_MODEL",
        ),
        ("mymodule:no_model", "agent 'greeter' (COUNTERSIGN_AGENTS='mymodule:no_model') has no"),
        ("json:dumps", "names json.dumps, which is neither an AgentRegistry nor a function"),
    ],
)
async def test_a_bad_agents_setting_is_one_line_naming_the_variable(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, project: Path, agents: str, says: str
) -> None:
    env = env_for(standin, redis_url, tmp_path, COUNTERSIGN_AGENTS=agents)
    done = await run_cli("serve", "--port", str(free_port()), env=env, cwd=project)

    assert done.code == 2, done
    line = only_line(done)
    assert line.startswith("countersign: ") and says in line, line


@pytest.mark.parametrize("how", ["--port", "PORT"])
async def test_a_port_in_use_is_one_clear_line(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, how: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = env_for(standin, redis_url, tmp_path)
        args = ["serve", "--host", "127.0.0.1"]
        if how == "--port":
            args += ["--port", str(port)]
        else:
            env["PORT"] = str(port)
        done = await run_cli(*args, env=env, cwd=tmp_path)

    assert done.code == 2, done
    assert only_line(done) == (
        f"countersign: port {port} on 127.0.0.1 is in use: stop the other process or set "
        "PORT / --port"
    )


@pytest.mark.parametrize("workers", ["-1", str(MAX_WORKERS + 1), "80"])
async def test_a_number_of_workers_one_process_cannot_run_is_one_clear_line(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, workers: str
) -> None:
    """Negative used to start no worker without a word; dozens asked for more Redis
    connections than the client has, and every click then failed with `Too many
    connections`."""
    env = env_for(standin, redis_url, tmp_path)
    done = await run_cli("serve", "--port", str(free_port()), "--workers", workers, env=env)

    assert done.code == 2, done
    assert only_line(done) == (
        f"countersign: --workers {workers}: give 0 to {MAX_WORKERS} resume workers per "
        "process (0 leaves resuming to `countersign worker`); for more, start more "
        "`countersign worker` processes"
    )


async def test_a_failed_start_leaves_no_embedded_redis_running(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """REDIS_URL unset and a routes file that is not there: refused, and no redis-server is
    left running on the data dir (it would hold its AOF for the next start)."""
    env = env_for(standin, redis_url, tmp_path, COUNTERSIGN_ROUTES_FILE=str(tmp_path / "none"))
    del env["REDIS_URL"]
    done = await run_cli("serve", "--port", str(free_port()), env=env)

    assert done.code == 2, done
    assert "COUNTERSIGN_ROUTES_FILE" in only_line(done)
    assert running_in(tmp_path / "data" / "redis") is None


async def test_an_embedded_redis_that_cannot_start_is_its_log_not_a_traceback(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    """REDIS_URL unset and an AOF Redis refuses to read: the operator is told that Redis did
    not start, and why in its own words, with no traceback above them."""
    aof_dir = tmp_path / "data" / "redis" / "appendonlydir"
    for made in (aof_dir.parent.parent, aof_dir.parent, aof_dir):
        made.mkdir(0o700)  # (private already: no warning that it was made so)
    (aof_dir / "appendonly.aof.manifest").write_text("not a manifest\n")
    env = env_for(standin, redis_url, tmp_path)
    del env["REDIS_URL"]
    done = await run_cli("serve", "--port", str(free_port()), env=env)

    assert done.code == 1, done
    assert "Traceback" not in done.err, done.err
    first, *log = done.err.strip().splitlines()
    assert first.startswith("countersign: redis-server did not start"), done.err
    assert "fix the cause below and retry" in first
    assert any("Invalid AOF manifest file format" in line for line in log), done.err
    assert running_in(tmp_path / "data" / "redis") is None


@pytest.mark.parametrize("command", ["serve", "worker"])
async def test_a_redis_not_reached_at_start_is_said_with_its_cause_and_nothing_left_open(
    standin: SlackStandIn, tmp_path: Path, command: str
) -> None:
    """Seeding the routes file needs Redis: what failed and why (its address, refused),
    not a traceback, and no connection left unclosed behind it."""
    routes = tmp_path / "routes.yml"
    routes.write_text('routes:\n  - agent: "*"\n    channel: C0OPS\n')
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    env = env_for(standin, nowhere, tmp_path, COUNTERSIGN_ROUTES_FILE=str(routes))
    args = ["serve", "--port", str(free_port())] if command == "serve" else ["worker"]
    done = await run_cli(*args, env=env)

    assert done.code == 1, done
    assert "Traceback" not in done.err and "Unclosed" not in done.err, done.err
    lines = done.err.strip().splitlines()  # (after any lines the log wrote first)
    said, cause = lines[-2:]
    assert all(" INFO " in line for line in lines[:-2]), done.err
    assert said.startswith("countersign: Redis could not be used (ConnectionError)"), said
    assert cause.startswith("  cause: ConnectionError: ") and nowhere[8:-2] in cause, cause


@pytest.mark.parametrize("on_a_socket", [True, False], ids=["unix-socket", "tcp-older"])
async def test_a_second_process_on_a_data_dir_in_use_is_told_to_share_its_redis(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, on_a_socket: bool
) -> None:
    """Two processes on one data dir with REDIS_URL unset ran one embedded Redis each on the
    same AOF, and did not see each other's runs: the second is refused, told how to share
    (the first's embedded Redis listens on a unix socket; one an older version started, on
    loopback TCP)."""
    env = env_for(standin, redis_url, tmp_path)
    del env["REDIS_URL"]
    # the first process's
    with RedisServer(tmp_path / "data" / "redis", unix_socket=on_a_socket) as first:
        done = await run_cli("serve", "--port", str(free_port()), env=env)
        assert done.code == 2, done
        line = only_line(done)
        assert "in use by another process" in line and f"pid {first.pid}" in line
        assert f"set REDIS_URL={first.url} to share it" in line, line
        assert first.log_path.read_text().lower().count("ready to accept connections") == 1


async def test_a_data_dir_that_cannot_be_made_is_one_line_naming_the_variable(
    standin: SlackStandIn, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("not a directory")
    env = env_for(standin, redis_url, tmp_path, COUNTERSIGN_DATA_DIR=str(tmp_path / "afile/sub"))
    del env["COUNTERSIGN_ENCRYPTION_KEYS"]  # so that the key file is looked for there
    done = await run_cli("serve", "--port", str(free_port()), env=env)

    assert done.code == 2, done
    line = only_line(done)
    assert "data directory" in line and "set COUNTERSIGN_DATA_DIR" in line, line


async def test_port_zero_listens_on_a_free_port(
    standin: SlackStandIn, redis_url: str, tmp_path: Path, serves: list[Proc]
) -> None:
    env = env_for(standin, redis_url, tmp_path, PYTHONPATH=str(PROJECT_ROOT))
    args = [*CLI, "serve", "--host", "127.0.0.1", "--port", "0"]
    serve = Proc("serve", args, env, tmp_path / "serve.log", None)
    serves.append(serve)

    async def serving() -> str | None:
        found = re.search(r"serving on http://127\.0\.0\.1:(\d+)", serve.log.read_text())
        return found.group(1) if found else None

    port = int(await until("serve to listen", serving, watch=[serve]))
    assert port not in (0, 3000)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        assert resp.status == 200
