"""`countersign keys rotate` run as an operator runs it: the real command in a child process,
against a real Redis (REDIS_URL) or the embedded one (REDIS_URL unset, data dir).

Damaged checkpoints among good ones are reported and skipped, every other one is rotated,
and the exit status is non-zero with a summary. The command refuses to run with no key
configured, with a key file others can read, or beside another process's embedded Redis;
the data dir and the embedded Redis's files are private to their owner."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from redis.asyncio import Redis

from agent_host.durable import keys as K
from agent_host.durable.crypto import KeyRing, generate_key, kid_of
from agent_host.durable.redis_server import RedisServer
from agent_host.runtime.decisions import Approve
from tests.support.host_env import make_env
from tests.support.paths import PROJECT_ROOT
from tests.support.redis_fixtures import RedisServerFactory

KEY_A = generate_key("kA")
KEY_B = generate_key("kB")
KEY_GONE = generate_key("kGone")
ROOT = PROJECT_ROOT


def rotate(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`countersign keys rotate` with only the given countersign settings, umask 022."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COUNTERSIGN_", "REDIS_", "SLACK_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "keys", "rotate"],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        umask=0o022,
        check=False,
    )


async def test_damaged_checkpoints_are_reported_and_every_other_one_is_rotated(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    env_a = make_env(redis, keyring=KeyRing.parse(KEY_A))
    runs = [await env_a.start("refund-agent", "refund order 123") for _ in range(10)]
    good, damaged = runs[::2][:4], [r for r in runs if r not in runs[::2][:4]]
    assert len(damaged) == 6

    async def blob_and_pause(run_id: str) -> tuple[bytes, str]:
        blob = await redis.get(K.Keys(run_id).checkpoint)
        assert isinstance(blob, bytes)
        return blob, (await env_a.info(run_id)).pause_id

    truncated, garbage, unknown_kid, tampered, wrong_type, empty = damaged
    blob, _ = await blob_and_pause(truncated)
    await redis.set(K.Keys(truncated).checkpoint, blob[:10])
    await redis.set(K.Keys(garbage).checkpoint, b"garbage, not a checkpoint")
    blob, pause = await blob_and_pause(unknown_kid)
    plain = KeyRing.parse(KEY_A).decrypt(blob, run_id=unknown_kid, request_id=pause)
    gone = KeyRing.parse(KEY_GONE).encrypt(plain, run_id=unknown_kid, request_id=pause)
    await redis.set(K.Keys(unknown_kid).checkpoint, gone)
    blob, _ = await blob_and_pause(tampered)
    await redis.set(K.Keys(tampered).checkpoint, blob[:-1] + bytes([blob[-1] ^ 1]))
    await redis.delete(K.Keys(wrong_type).checkpoint)
    await redis.hset(K.Keys(wrong_type).checkpoint, "not", "a blob")
    await redis.set(K.Keys(empty).checkpoint, b"")
    left = {r: await redis.dump(K.Keys(r).checkpoint) for r in damaged}

    done = rotate(tmp_path, REDIS_URL=redis_url, COUNTERSIGN_ENCRYPTION_KEYS=f"{KEY_B},{KEY_A}")

    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert (
        "examined 10 runs, re-encrypted 4 checkpoints and 0 saved turns under key 'kB', "
        "6 damaged, "
        "0 already current or empty"
    ) in done.stdout, done
    for run_id in damaged:
        assert f"damaged: run {run_id}: " in done.stderr, done.stderr
    assert "kGone" in done.stderr and "is not a string" in done.stderr
    for run_id in good:
        rotated = await redis.get(K.Keys(run_id).checkpoint)
        assert isinstance(rotated, bytes) and kid_of(rotated) == "kB"
    for run_id in damaged:  # left exactly as they were
        assert await redis.dump(K.Keys(run_id).checkpoint) == left[run_id]
    assert not await redis.exists(K.ROTATION)

    # a damaged run fails with the reason when it is resumed, as it would have anyway;
    # a rotated one resumes under the new key
    env_b = make_env(redis, keyring=KeyRing.parse(f"{KEY_B},{KEY_A}"))
    env_b.runner, env_b.effects = env_a.runner, env_a.effects
    for run_id in (garbage, good[0]):
        for request in await env_b.pending_requests(run_id):
            approve = Approve(decided_by="bob")
            assert (await env_b.store.decide(request.request_id, approve)).accepted
    await env_b.drain()
    info = await env_b.info(garbage)
    assert info.status == "failed" and "could not be decrypted" in info.error, info
    assert await env_b.status(good[0]) == "succeeded"


def test_rotate_refuses_when_no_key_is_configured(redis_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = rotate(tmp_path, REDIS_URL=redis_url, COUNTERSIGN_DATA_DIR=str(data))

    assert done.returncode == 2, done
    assert "COUNTERSIGN_ENCRYPTION_KEYS is unset" in done.stderr, done.stderr
    assert str(data / "encryption.keys") in done.stderr
    assert "Traceback" not in done.stderr
    assert not (data / "encryption.keys").exists()  # no new key made up


def test_rotate_refuses_beside_another_process_using_the_embedded_redis(tmp_path: Path) -> None:
    data = tmp_path / "data"
    keys = {"COUNTERSIGN_DATA_DIR": str(data), "COUNTERSIGN_ENCRYPTION_KEYS": f"{KEY_B},{KEY_A}"}
    with RedisServer(data / "redis") as serving:  # what a running `countersign serve` holds
        pid = serving.pid
        done = rotate(tmp_path, **keys)
        assert done.returncode == 2, done
        assert "in use by another process" in done.stderr, done.stderr
        assert f"pid {pid}" in done.stderr and "set REDIS_URL" in done.stderr
        assert serving.running and serving.pid == pid
        log = serving.log_path.read_text()
        assert log.count("Ready to accept connections") == 1  # no second server on its AOF

    done = rotate(tmp_path, **keys)  # once it has stopped, the command runs
    assert done.returncode == 0, done
    assert "examined 0 runs" in done.stdout


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_and_embedded_redis_files_are_private_and_a_readable_key_file_is_refused(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)  # as an earlier version left it
    key_file = data / "encryption.keys"
    key_file.write_text(KEY_A + "\n")
    os.chmod(key_file, 0o644)

    done = rotate(tmp_path, COUNTERSIGN_DATA_DIR=str(data))
    assert done.returncode == 2, done
    assert f"chmod 600 {key_file}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (data / "redis").exists()  # refused before anything started

    os.chmod(key_file, 0o600)
    done = rotate(tmp_path, COUNTERSIGN_DATA_DIR=str(data))
    assert done.returncode == 0, done

    assert mode(data) == 0o700
    redis_files = list((data / "redis").rglob("*"))
    assert any(p.name.endswith(".aof") for p in redis_files), redis_files
    for path in [data / "redis", *redis_files]:
        expected = 0o700 if path.is_dir() else 0o600
        assert mode(path) == expected, f"{path}: {mode(path):03o}"


def test_a_redis_that_answers_nothing_makes_it_give_up_not_wait(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """`serve` has no socket timeout (a timer around every read costs it CPU); a command-line
    run has one, and says Redis did not answer rather than wait for ever."""
    server = redis_server_factory()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)  # it accepts connections, and answers nothing
    try:
        started = time.monotonic()
        done = rotate(tmp_path, REDIS_URL=server.url, COUNTERSIGN_ENCRYPTION_KEYS=KEY_A)
        took = time.monotonic() - started
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert done.returncode != 0, done
    assert "Redis" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert took < 60, took
