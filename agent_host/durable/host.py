"""The agent host assembled: Redis, key ring, store, runner, workers, sweeper, outbox.

Built once at start-up from Settings and passed to whatever serves it (the HTTP API, the
Slack bot, the CLI). Every background task it starts is owned here and stopped by `stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import socket
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from agent_host.approvals import ApprovalService, ArgumentEditor, ReviewerDirectory, Router
from agent_host.approvals.notifier import LoggingNotifier, Notifier
from agent_host.durable.bulks import BulkBook
from agent_host.durable.callbacks import AiohttpSender, CallbackDelivery, CallbackSender
from agent_host.durable.connections import close_redis
from agent_host.durable.crashpoints import CrashPoints
from agent_host.durable.crypto import ENV_VAR, KeyRing, generate_key
from agent_host.durable.data_dir import check_private_file, private_dir
from agent_host.durable.external_store import ExternalRequests
from agent_host.durable.foreground import Foreground
from agent_host.durable.outbox import Outbox
from agent_host.durable.poison import TRANSIENT
from agent_host.durable.reach import keys_gone, waiting_runs_keys
from agent_host.durable.redis_ledger import RedisLedger
from agent_host.durable.redis_server import RedisServer
from agent_host.durable.store import RunStore
from agent_host.durable.streams import ShardedConsumer
from agent_host.durable.suspects import SuspectGate
from agent_host.durable.sweeper import TRIM_EVERY_SECONDS, Sweeper
from agent_host.durable.worker import ResumeWorker
from agent_host.errors import ConfigurationError
from agent_host.runtime.agents import Agent, AgentRegistry
from agent_host.runtime.runner import Runner
from agent_host.settings import Settings

__all__ = [
    "KEY_FILE",
    "MAX_WORKERS",
    "Host",
    "check_agents",
    "check_workers",
    "load_keyring",
    "load_registry",
]

log = logging.getLogger(__name__)

KEYS_LOOK_WITHIN = 5.0  # seconds the start may spend looking at the waiting runs' keys

KEY_FILE = "encryption.keys"  # in the data dir, when COUNTERSIGN_ENCRYPTION_KEYS is unset


def load_registry(settings: Settings) -> AgentRegistry:
    """COUNTERSIGN_AGENTS, `module:attribute`: an AgentRegistry, or a function returning one
    (called with the settings if it takes an argument). The module is looked for in the
    current directory too, as a developer running `countersign serve` there expects."""
    spec = settings.agents
    module_name, _, attribute = spec.partition(":")
    if not module_name or not module_name.replace(".", "").replace("_", "").isalnum():
        raise ConfigurationError(
            f"COUNTERSIGN_AGENTS={spec!r} is not module:attribute (e.g. myagents:registry)"
        )
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"COUNTERSIGN_AGENTS={spec!r}: module {module_name!r} cannot be imported ({exc}); "
            "run from the directory that holds it or put it on PYTHONPATH"
        ) from exc
    try:
        target = getattr(module, attribute or "registry")
    except AttributeError as exc:
        raise ConfigurationError(
            f"COUNTERSIGN_AGENTS={spec!r}: {module_name} has no {attribute or 'registry'!r}"
        ) from exc
    if isinstance(target, AgentRegistry) or not callable(target):
        registry = target
    else:
        try:
            takes_settings = len(inspect.signature(target).parameters) > 0
            registry = target(settings) if takes_settings else target()
        except (TypeError, ValueError) as exc:  # not a factory of a registry (json:dumps)
            raise ConfigurationError(
                f"COUNTERSIGN_AGENTS={spec!r} names {module_name}.{attribute or 'registry'}, "
                f"which is neither an AgentRegistry nor a function returning one ({exc})"
            ) from None
    if not isinstance(registry, AgentRegistry):
        raise ConfigurationError(f"COUNTERSIGN_AGENTS={spec!r} is not an AgentRegistry")
    check_agents(registry, spec)
    return registry


def check_agents(registry: AgentRegistry, spec: str) -> None:
    """Build every agent once, so that one whose model is not configured stops start-up
    with a message naming the variables, not its first run with an AttributeError."""
    for name in registry.names():
        try:
            agent = registry.build(name)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"agent {name!r} (COUNTERSIGN_AGENTS={spec!r}): {exc}"
            ) from exc
        except Exception as exc:
            raise ConfigurationError(
                f"agent {name!r} (COUNTERSIGN_AGENTS={spec!r}) could not be built: "
                f"{type(exc).__name__}: {exc}; fix its factory"
            ) from exc
        if isinstance(agent, Agent) and not callable(getattr(agent.model, "respond", None)):
            raise ConfigurationError(
                f"agent {name!r} (COUNTERSIGN_AGENTS={spec!r}) has no model (model="
                f"{agent.model!r}): give it one, e.g. "
                "agent_host.llm.model_from_settings(settings) with COUNTERSIGN_MODEL and "
                "OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) set, or a ScriptedModel"
            )


def load_keyring(settings: Settings, *, create: bool = True) -> KeyRing:
    """From COUNTERSIGN_ENCRYPTION_KEYS; unset, the key file in the data dir, made on first
    use unless `create` is false (`keys rotate`: a new key would only hide the missing one).
    """
    if settings.encryption_keys:
        return KeyRing.parse(settings.encryption_keys)
    path = settings.data_dir / KEY_FILE
    if not path.exists():
        if not create:
            raise ConfigurationError(
                f"no encryption key is configured: {ENV_VAR} is unset and there is no key "
                f"file {path}; set {ENV_VAR} to the keys the checkpoints were written with "
                "(new key first), or point COUNTERSIGN_DATA_DIR at the data dir that holds "
                f"{KEY_FILE}"
            )
        private_dir(settings.data_dir)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(generate_key() + "\n")
        log.warning("COUNTERSIGN_ENCRYPTION_KEYS unset: generated a key into %s", path)
    private_dir(settings.data_dir)
    check_private_file(path, "encryption key file")
    text = path.read_bytes().decode("ascii", errors="replace").strip()
    try:
        return KeyRing.parse(text)
    except ConfigurationError:
        # KeyRing's own message names COUNTERSIGN_ENCRYPTION_KEYS, which the operator never
        # set, and says to generate a key: one that opens none of the checkpoints written
        # under the keys this file held. The file is left as it is, for whoever restores it.
        state = "is empty" if not text else "is damaged (not comma-separated kid:base64 keys)"
        raise ConfigurationError(
            f"the encryption key file {path} {state}: restore it from a backup, or set "
            f"{ENV_VAR} to the keys it held; do not generate a new key, or the checkpoints "
            "written under the old ones can no longer be read"
        ) from None


# In-process resume workers one process may run. Each reads every shard's resume stream,
# holding a Redis connection per shard while it waits and another while it resumes, and
# the outbox and the callbacks take up to 256 each: 8 workers keep all of it well inside
# the client's 1,024 connections. One process is one core; more workers beyond a few add
# no speed there: resume more runs at once with more `countersign worker` processes.
MAX_WORKERS = 8


def check_workers(workers: int) -> None:
    """ConfigurationError unless `workers` is a number of workers one process may run."""
    if not 0 <= workers <= MAX_WORKERS:
        raise ConfigurationError(
            f"--workers {workers}: give 0 to {MAX_WORKERS} resume workers per process (0 "
            "leaves resuming to `countersign worker`); for more, start more "
            "`countersign worker` processes"
        )


# How long a stop waits for work under way (a tool call, a post) before cutting it short:
# within the 30 s a deployment usually gives a process between SIGTERM and SIGKILL.
STOP_GRACE_SECONDS = 20.0


@dataclass
class Host:
    settings: Settings
    redis: Redis
    registry: AgentRegistry
    keyring: KeyRing
    router: Router
    notifier: Notifier = field(default_factory=LoggingNotifier)
    embedded: RedisServer | None = None
    directory: ReviewerDirectory | None = None  # who is in a route's reviewer groups (chat)
    consumer_name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    retry_idle_ms: int = 5_000  # how long an undelivered outbox entry waits to be retried
    resume_idle_ms: int = 30_000  # how long a resume entry of a silent worker waits to be reclaimed
    sweep_interval: float = 1.0
    trim_every: float = TRIM_EVERY_SECONDS  # seconds between trims of acknowledged entries
    callback_sender: CallbackSender = field(default_factory=AiohttpSender)
    callback_attempts: int = 8  # failed POSTs of one callback before it is dead-lettered
    callback_backoff: float = 2.0  # seconds before the first retry; doubled each time
    stop_grace: float = STOP_GRACE_SECONDS
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _consuming: dict[asyncio.Task[None], ShardedConsumer] = field(default_factory=dict)
    # Background tasks that ended while the host ran: /healthz fails while there are any,
    # and `countersign worker` (no HTTP to say so) exits.
    ended_early: list[str] = field(default_factory=list, init=False)
    work_lost: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        self.crash = CrashPoints(self.settings.crash_at)
        self.store = RunStore(
            self.redis,
            self.keyring,
            self.router,
            bulk_threshold=self.settings.bulk_threshold,
        )
        self.bulks = BulkBook(self.store)
        self.runner = Runner(self.registry, RedisLedger(self.redis, self.keyring))
        # Edits are checked with the agents the runner resumes with, routed as pauses are.
        editor = ArgumentEditor(self.runner.agent, self.router)
        self.approvals = ApprovalService(self.store, self.directory, editor)
        self.external = ExternalRequests(self.store)
        # The Slack endpoint marks its requests; the outbox and the workers yield to them.
        self.foreground = Foreground()
        # Entries suspected of stopping the process are handled alone in it (`suspects`).
        self.suspect_gate = SuspectGate()

    async def say_keys_gone(self, within: float = KEYS_LOOK_WITHIN) -> None:
        """Log, at start, waiting runs whose checkpoint is under a key this ring lacks (they
        would wait unresumed once decided), as `countersign check` says; a look that takes
        longer than `within` (a very long pending list) or fails is left to `check`."""
        try:
            async with asyncio.timeout(within):
                waiting = await waiting_runs_keys(self.redis)
        except (TimeoutError, *TRANSIENT):
            log.info("the waiting runs' keys were not looked at (see `countersign check`)")
            return
        if (gone := keys_gone(waiting, self.keyring.kids)) is not None:
            log.warning(gone)

    def start_background(
        self, workers: int = 1, *, sweeper: bool = True, outbox: bool = True
    ) -> None:
        """Start N resume workers, the sweeper and the outbox (with the decision callbacks,
        which also deliver at least once) as owned tasks."""
        check_workers(workers)
        for n in range(workers):
            worker = ResumeWorker(
                self.store,
                self.runner,
                f"{self.consumer_name}-w{n}",
                idle_ms=self.resume_idle_ms,
                crash=self.crash,
                foreground=self.foreground,
                gate=self.suspect_gate,
            )
            self._spawn(worker.consumer.run(self._stop), f"resume-worker-{n}", worker.consumer)
        if sweeper:
            self._spawn(
                Sweeper(
                    self.store,
                    self.approvals,
                    interval=self.sweep_interval,
                    crash=self.crash,
                    trim_every=self.trim_every,
                ).run(self._stop),
                "sweeper",
            )
        if outbox:
            box = Outbox(
                self.store,
                self.notifier,
                f"{self.consumer_name}-outbox",
                idle_ms=self.retry_idle_ms,
                crash=self.crash,
                foreground=self.foreground,
                gate=self.suspect_gate,
            )
            self._spawn(box.consumer.run(self._stop), "outbox", box.consumer)
            callbacks = CallbackDelivery(
                self.store,
                self.settings,
                self.callback_sender,
                f"{self.consumer_name}-callbacks",
                attempts=self.callback_attempts,
                backoff=self.callback_backoff,
                idle_ms=self.retry_idle_ms,
                gate=self.suspect_gate,
            )
            self._spawn(callbacks.consumer.run(self._stop), "callbacks", callbacks.consumer)

    def _spawn(
        self,
        coro: Coroutine[Any, Any, None],
        name: str,
        consumer: ShardedConsumer | None = None,
    ) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._ended)
        self._tasks.append(task)
        if consumer is not None:
            self._consuming[task] = consumer

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A background task ended: expected once the host stops; before, it is work this
        process no longer does, said loudly (restart the process) and by /healthz."""
        if self._stop.is_set():
            return
        if task.cancelled():
            how = "was cancelled"
        elif (error := task.exception()) is not None:
            how = f"failed: {error!r}"
        else:
            how = "returned"
        self.ended_early.append(task.get_name())
        self.work_lost.set()
        log.critical(
            "background task %s %s while the host runs: its work is no longer done in this "
            "process; restart it", task.get_name(), how,
        )  # fmt: skip

    async def stop(self) -> None:
        """`stop_work`, then `close`."""
        try:
            await self.stop_work()
        finally:
            await self.close()

    async def stop_work(self, within: float | None = None) -> None:
        """Begin no new work; let what is under way (a tool call running, a post on its way)
        end, for up to `within` seconds (default: `stop_grace`); then stop everything.
        Redis stays open (see `close`), and so must whatever the work under way posts
        through."""
        self._stop.set()  # from now on no consumer begins an entry
        busy = [task for task, consumer in self._consuming.items() if not consumer.idle]
        if busy:  # each ends once its entries are handled and acknowledged
            grace = self.stop_grace if within is None else within
            _, still = await asyncio.wait(busy, timeout=grace)
            if still:
                log.warning(
                    "%d consumer(s) still busy when the stop's grace ran out; cancelled "
                    "(their entries are taken up again by another process or the next "
                    "start; a tool call cut short is reported as unknown_outcome, not run "
                    "again unless its tool is idempotent)",
                    len(still),
                )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def close(self) -> None:
        """Close every connection, Redis last (and stop the embedded server), once the work
        is stopped; whatever fails before, Redis is closed and the server stopped."""
        async with contextlib.AsyncExitStack() as steps:  # (run last first)
            steps.push_async_callback(close_redis, self.redis, self.embedded)
            if isinstance(self.callback_sender, AiohttpSender):
                steps.push_async_callback(self.callback_sender.close)
            steps.push_async_callback(self.external.watch.close)
