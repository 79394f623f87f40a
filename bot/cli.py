"""The `countersign` command: serve, worker, demo, check, keys.

This is the composition root: it builds the agent host and, when Slack is configured, the
Slack bot around it. It lives in `bot` because imports go bot -> agent_host only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from agent_host.durable.connections import STORE_ERRORS, close_redis, open_redis
from agent_host.durable.crypto import generate_key
from agent_host.durable.host import check_workers, load_keyring
from agent_host.durable.rotation import rotate_checkpoints
from agent_host.errors import ConfigurationError, StoreError
from bot.check import run_checks
from bot.composition import build_service
from bot.server import stop_on_signals
from bot.slack_settings import ServiceSettings, load_settings

__all__ = ["main"]

log = logging.getLogger("countersign")
T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="countersign", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="HTTP server (Slack + API) plus resume workers")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument(
        "--port", type=_port, default=None, help="default: PORT or 3000; 0: any free port"
    )
    serve.add_argument("--workers", type=int, default=1)
    commands.add_parser("worker", help="resume workers, sweeper and outbox only")
    demo = commands.add_parser("demo", help="the local sandbox: Redis, Slack stand-in, bot")
    demo.add_argument(
        "--port", type=_port, default=3000, help="the sandbox page's; 0: any free port"
    )
    demo.add_argument("--terminal", action="store_true", help="in the terminal, no Redis/Slack")
    commands.add_parser(
        "check", help="check the configuration, Redis, the Slack token and the channels"
    )
    keys = commands.add_parser("keys", help="encryption keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    keys_commands.add_parser("generate", help="print a new kid:base64 key")
    keys_commands.add_parser("rotate", help="re-encrypt every checkpoint under the first key")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.command == "keys" and args.keys_command == "generate":
        print(generate_key())
        return 0
    if args.command == "check":
        return asyncio.run(_check())
    try:
        settings = load_settings()
        if args.command == "serve":
            check_workers(args.workers)  # before anything starts
            port = settings.port if args.port is None else args.port  # 0: any free port
            _run_server(_serve(settings, args.host, port, args.workers))
        elif args.command == "worker":
            return _run_server(_worker(settings))
        elif args.command == "demo" and args.terminal:
            asyncio.run(_sandbox("terminal_demo").run_terminal_demo())
        elif args.command == "demo":
            absolute = settings.model_copy(update={"data_dir": settings.data_dir.absolute()})
            asyncio.run(_sandbox("demo").run_demo(absolute, args.port))
        else:
            return asyncio.run(_rotate(settings))
    except ConfigurationError as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # Redis not reached, or the embedded one did not start
        print(f"countersign: {exc}", file=sys.stderr)
        if exc.__cause__ is not None:  # (Redis's address and why: the operator's to see)
            print(f"  cause: {type(exc.__cause__).__name__}: {exc.__cause__}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _port(text: str) -> int:
    """A `--port`: 1 to 65535, or 0 for any free port (the one bound is shown). Checked
    here because the socket layer does not: 70000 was served on 4464 (70000 - 65536)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port: give a number from 1 to 65535, or 0 for any free port"
        )
    return port


def _run_server(main: Coroutine[Any, Any, T]) -> T:
    """`serve` and `worker` run on uvloop when it is installed (the `fast` extra): the same
    asyncio, with the event loop's own work (callbacks, sockets, timers), which every Redis
    round trip and HTTP request goes through, done in C."""
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def _settle_garbage_collector() -> None:
    """Everything built at start-up (modules, agents, schemas, clients) lives as long as
    the process: set it aside, so that the collector's full passes, which otherwise walk
    all of it again and again, only look at what requests and resumes allocate. Those
    passes are the longest pauses a click's ack can meet."""
    gc.collect()
    gc.freeze()


async def _serve(settings: ServiceSettings, host_name: str, port: int, workers: int) -> None:
    stop = stop_on_signals()
    service = await build_service(settings)
    await service.start(http=(host_name, port), workers=workers)
    _settle_garbage_collector()
    log.info("countersign serving on %s (workers: %d)", service.url, workers)
    try:
        await stop.wait()
    finally:
        await service.stop()


async def _worker(settings: ServiceSettings) -> int:
    """0 once stopped by a signal; 1 when its work stopped while it ran (a background task
    ended), so that whatever supervises it starts it again."""
    stop = stop_on_signals()
    service = await build_service(settings)
    await service.start(workers=1)
    _settle_garbage_collector()
    log.info("countersign worker started")
    try:
        lost = await service.until_stopped_or_work_lost(stop)
    finally:
        await service.stop()
    if lost:
        log.critical(
            "countersign worker exits with status 1 so that it is started again: %s ended "
            "while it ran", ", ".join(service.host.ended_early),
        )  # fmt: skip
        return 1
    return 0


async def _check() -> int:
    """One line per check; 1 when any failed."""
    findings = await run_checks()
    for finding in findings:
        print(finding.line())
    failed = [f for f in findings if not f.ok]
    if failed:
        print(f"countersign check: {len(failed)} of {len(findings)} checks failed")
        return 1
    print(f"countersign check: all {len(findings)} checks passed")
    return 0


async def _rotate(settings: ServiceSettings) -> int:
    """0 when every checkpoint and sealed field is under the active key now, 1 when some
    are damaged."""
    keyring = load_keyring(settings, create=False)
    redis, server = await open_redis(
        settings, one_shot=True
    )  # (not beside another's embedded Redis)
    try:
        report = await rotate_checkpoints(redis, keyring)
    except STORE_ERRORS as exc:
        print(
            f"countersign: Redis did not answer ({type(exc).__name__}: {exc}); what was "
            "rotated stays rotated: run `countersign keys rotate` again once it answers.",
            file=sys.stderr,
        )
        return 1
    finally:
        await close_redis(redis, server)
    for run_id, reason in report.damaged.items():
        print(f"damaged: run {run_id}: {reason}", file=sys.stderr)
    print(
        f"examined {report.examined} runs, re-encrypted {report.rotated} checkpoints "
        f"and {report.progress} saved turns under key {keyring.active_kid!r}, "
        f"{len(report.damaged)} damaged, "
        f"{report.skipped} already current or empty; re-sealed {report.fields} fields"
    )
    if report.aof:
        print(report.aof)
    if not report.damaged:
        return 0
    print(
        f"countersign: {len(report.damaged)} damaged runs were left as they are "
        f"(runs: {', '.join(report.damaged)}); every other checkpoint and sealed field was "
        "rotated. Keep the old keys in COUNTERSIGN_ENCRYPTION_KEYS until these runs are "
        "restored from a backup, cancelled or failed (a worker fails a run whose checkpoint "
        "or sealed fields it cannot read when it needs them); then run `countersign keys "
        "rotate` again.",
        file=sys.stderr,
    )
    return 1


def _sandbox(module: str) -> Any:
    """The local Slack sandbox's demo, loaded only for `countersign demo`: the product never
    imports the sandbox (an import contract says so), so `serve` and `worker` never load it."""
    try:
        return importlib.import_module(f"slack_sandbox.{module}")
    except ImportError as exc:
        raise ConfigurationError(
            f"the local Slack sandbox is not installed ({exc}); run `make demo` from a checkout"
        ) from exc


if __name__ == "__main__":
    sys.exit(main())
