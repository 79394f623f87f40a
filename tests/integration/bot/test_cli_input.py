"""`countersign serve` and `countersign demo` given a port they cannot use, a default channel
that is not a channel id or a damaged key file, run as an operator runs them (a child
process): one clear line saying what to do, no traceback, nothing started or written."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent_host.durable.crypto import generate_key
from agent_host.durable.host import KEY_FILE
from agent_host.durable.redis_server import free_port
from tests.support.processes import Finished, inherited_env, run_cli

# Without the check, `serve --port 70000` served on 4464: the run would not end by itself.
STARTED_WITHIN = 30


def serve_env(redis_url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    """What `serve` needs to start: Slack is a closed local port (nothing is posted here)."""
    return inherited_env() | {
        "SLACK_BOT_TOKEN": "xoxb-cli-input",
        "SLACK_SIGNING_SECRET": "cli-input-secret",
        "SLACK_API_URL": f"http://127.0.0.1:{free_port()}/api/",
        "REDIS_URL": redis_url,
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_ENCRYPTION_KEYS": generate_key("k1"),
        **more,
    }


def last_line(done: Finished) -> str:
    assert "Traceback" not in done.err and "Unclosed" not in done.err, done.err
    return done.err.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["serve", "demo"])
@pytest.mark.parametrize("port", ["70000", "99999", "65536", "-1", "3k"])
async def test_a_port_outside_1_to_65535_is_refused_saying_what_to_give(
    redis_url: str, tmp_path: Path, command: str, port: str
) -> None:
    env = serve_env(redis_url, tmp_path)
    done = await run_cli(command, "--port", port, env=env, cwd=tmp_path, within=STARTED_WITHIN)

    assert done.code == 2, done
    assert last_line(done) == (
        f"countersign {command}: error: argument --port: {port!r} is not a port: give a "
        "number from 1 to 65535, or 0 for any free port"
    )
    assert not (tmp_path / "data").exists()  # refused before anything was made


async def test_the_demo_on_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    env = inherited_env() | {"COUNTERSIGN_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await run_cli("demo", "--port", str(port), env=env, cwd=tmp_path)

    assert done.code == 2, done  # as `serve` on a port in use
    assert last_line(done) == (
        f"countersign: port {port} on 127.0.0.1 is in use: stop the other process or set "
        "--port (0: any free port)"
    )


async def test_serve_refuses_a_channel_name_as_the_default_channel(
    redis_url: str, tmp_path: Path
) -> None:
    env = serve_env(redis_url, tmp_path, COUNTERSIGN_DEFAULT_CHANNEL="general")
    done = await run_cli("serve", "--port", "0", env=env, cwd=tmp_path, within=STARTED_WITHIN)

    assert done.code == 2, done
    line = last_line(done)
    assert line.startswith(
        "countersign: invalid configuration: COUNTERSIGN_DEFAULT_CHANNEL: 'general' is not a "
        "Slack channel id"
    ), line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("content", [b"", b"garbage\n"], ids=["empty", "garbage"])
async def test_serve_on_a_damaged_key_file_names_the_file_and_leaves_it(
    redis_url: str, tmp_path: Path, content: bytes
) -> None:
    env = serve_env(redis_url, tmp_path)
    del env["COUNTERSIGN_ENCRYPTION_KEYS"]  # so the key file of the data dir is used
    (tmp_path / "data").mkdir(mode=0o700)
    key_file = tmp_path / "data" / KEY_FILE
    key_file.write_bytes(content)
    key_file.chmod(0o600)

    done = await run_cli("serve", "--port", "0", env=env, cwd=tmp_path, within=STARTED_WITHIN)

    assert done.code == 2, done
    line = last_line(done)
    assert line.startswith(f"countersign: the encryption key file {key_file} is "), line
    assert "restore it from a backup" in line and "do not generate a new key" in line, line
    assert key_file.read_bytes() == content
