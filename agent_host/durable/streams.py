"""A consumer-group reader shared by the resume workers and the outbox.

Entries are acknowledged only after their handler succeeded; an entry whose consumer died
(or whose handler raised) is reclaimed with XAUTOCLAIM once it has been idle long enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_host.durable.connections import FULL_ERRORS, as_text, is_full, say_full
from agent_host.durable.foreground import Foreground
from agent_host.durable.poison import (
    KEPT_SECONDS,
    POISON_AFTER,
    TRANSIENT,
    GiveUp,
    NeverFinished,
    abandon,
    abandoned_key,
    attempt_alone,
    attempts_key,
    errors_key,
    forget_attempts,
    suspects,
    take_back_attempt,
)
from agent_host.durable.scripts import COUNT_AFRESH, COUNT_ERROR, KEEP_CLAIMED
from agent_host.durable.slots import handed_to, holding
from agent_host.durable.suspects import SuspectGate
from agent_host.errors import RetryLater

__all__ = [
    "BATCH_WAIT",
    "READ_AHEAD",
    "CancelledByNobody",
    "RetryLater",
    "ShardedConsumer",
    "StreamConsumer",
    "WithAck",
    "send_now",
    "together",
    "trim_acknowledged",
]

log = logging.getLogger(__name__)


# How long a poll of the outbox or the callbacks waits for its batch before it reads on:
# an entry still going then (a post waiting for its channel's turn, as a burst into one
# channel goes out at one post a second; a slow receiver of callbacks) finishes behind
# it, and the entries read after it are not held up.
BATCH_WAIT = 0.5

# How many batches a concurrent consumer may have going behind its poll at most: a backlog
# into one slow channel is not read into memory (and heartbeated) all at once.
READ_AHEAD = 10

# What a handler may hand back: writes to send together with the entry's acknowledgement,
# in one round trip (queued on a pipeline, ahead of the XACK), instead of one each.
WithAck = Callable[[Pipeline], Awaitable[None]]
Handler = Callable[[str, dict[str, str]], Coroutine[Any, Any, WithAck | None]]


async def send_now(redis: Redis, with_ack: WithAck | None) -> None:
    """The writes a handler handed back, sent on their own (for a caller that handles an
    entry without acknowledging it)."""
    if with_ack is not None:
        async with redis.pipeline(transaction=False) as pipe:
            await with_ack(pipe)
            await pipe.execute()


def together(*writes: WithAck | None) -> WithAck | None:
    """Several handlers' writes as one (None when there are none)."""
    present = [w for w in writes if w is not None]
    if len(present) <= 1:
        return present[0] if present else None

    async def queue(pipe: Pipeline) -> None:
        for write in present:
            await write(pipe)

    return queue


class StreamConsumer:
    def __init__(
        self,
        redis: Redis,
        stream: str,
        group: str,
        consumer: str,
        handler: Handler,
        *,
        idle_ms: int = 30_000,
        block_ms: int = 1_000,
        count: int = 10,
        concurrent: bool = False,
        batch_wait: float = BATCH_WAIT,
        foreground: Foreground | None = None,
        in_flight: asyncio.Semaphore | None = None,
        give_up: GiveUp | None = None,
        gate: SuspectGate | None = None,
    ) -> None:
        self.redis, self.stream, self.group, self.consumer = redis, stream, group, consumer
        self.handler = handler
        # What to do with an entry that failed POISON_AFTER times with an error of
        # countersign's own (see `poison`); None: it is retried for as long as it fails.
        self.give_up = give_up
        # Entries reclaimed here and not handled yet: only a retried entry may have
        # anything counted in Redis (see `poison`), dropped with its acknowledgement.
        self._retried: set[str] = set()
        # Where suspects (entries whose last deliveries reached no verdict, see `poison`)
        # are handled alone: the process's, shared by all its consumers (the Host's).
        self.gate = gate if gate is not None else SuspectGate()
        self._suspects: set[str] = set()  # reclaimed suspects not handled yet
        self._giving_up: set[str] = set()  # suspects being given up (see `_survived`)
        # Entries this consumer let go unfinished on purpose (it is stopping): their
        # delivery counts start afresh as it stops, not being deaths.
        self._let_go: set[str] = set()
        self._count_afresh_script = redis.register_script(COUNT_AFRESH)
        self._count_error_script = redis.register_script(COUNT_ERROR)
        self.idle_ms, self.block_ms, self.count = idle_ms, block_ms, count
        self._group_ready = False
        self.concurrent = concurrent  # handle a batch at once (the outbox: one slow channel
        # must not hold up the others)
        # How long a concurrent poll waits for its batch. Entries still going then (a post
        # waiting for its channel's turn) finish behind it, and the entries that come after
        # them are read and handled meanwhile.
        self.batch_wait = batch_wait
        self._behind: set[asyncio.Task[bool]] = set()
        self._reclaimed_at: float | None = None  # loop time of the last full XAUTOCLAIM pass
        # Where the pass over the pending entries goes on: XAUTOCLAIM looks at no more than
        # ten times `count` of them per call, and those may all be held by live consumers.
        self._reclaim_from = "0-0"
        self.foreground = foreground  # whose requests go first (serve's clicks)
        # Shared by the consumers of one kind (every shard's): how many of their entries
        # may be handled at once, so that a backlog never takes every Redis connection.
        self.in_flight = in_flight
        # Handled entries whose acknowledgement (with the writes their handler handed back)
        # is still to be sent: the run loop sends them with its next read.
        self._handled: list[tuple[str, WithAck | None]] = []
        self._flushing = False  # a batch's acknowledgements are on their way (one at a time)
        # Entries being handled (or waiting for their turn), with the loop time since when.
        self._held: dict[str, float] = {}
        self._beat_every = idle_ms / 3000
        self._beat: asyncio.TimerHandle | None = None
        self._claiming: asyncio.Task[None] | None = None
        self._keep_claimed_script = redis.register_script(KEEP_CLAIMED)
        self._stopping: asyncio.Event | None = None  # run()'s stop: no new entry is begun

    @property
    def idle(self) -> bool:
        """Whether it handles no entry now (nothing of its would be cut short by a stop)."""
        return not self._held and not self._behind

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def poll(self, block_ms: int | None = None, *, flush: bool = True) -> int:
        """Handle reclaimed entries, then new ones; returns how many were handled.

        Waits up to `block_ms` (default: the consumer's) for new entries; 0 does not wait.
        The acknowledgements of what this poll handled are sent before it returns, or, with
        `flush=False` (the `run` loop), that of the last entry it handled goes in the same
        round trip as the next read: an entry is never left unacknowledged while others are
        handled (and it could be reclaimed by another consumer and handled again).
        """
        if not self._group_ready:
            await self.ensure_group()
        block = self.block_ms if block_ms is None else block_ms
        if len(self._behind) >= READ_AHEAD * self.count:
            # Enough read ahead of a slow channel: nothing more until some of it is done.
            await self._flush_meanwhile()
            await asyncio.wait(
                self._behind, timeout=block / 1000, return_when=asyncio.FIRST_COMPLETED
            )
            return 0
        entries = await self._reclaim() if self._reclaim_due() else []
        if not entries:
            entries = await self._read(block)
        if self._stopping is not None and self._stopping.is_set():
            self._let_go.update(as_text(entry_id) for entry_id, _ in entries)
            return 0  # stopping: what was just read stays pending, for another consumer
        batch: list[tuple[str, dict[str, str]]] = []
        for entry_id, fields in entries:
            if as_text(entry_id) in self._held:  # still being handled, behind the poll:
                continue  # reclaimed by this very consumer (which kept it claimed, like a beat)
            if fields is None:  # trimmed while pending
                self._handled.append((as_text(entry_id), None))
                continue
            # Held from now on: an entry waiting for its turn behind others of the read is
            # kept claimed like one being handled, so no other consumer takes it over.
            self._hold(as_text(entry_id))
            batch.append((as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()}))
        remaining, moved_on = len(batch), False

        async def handle(entry_id: str, fields: dict[str, str]) -> bool:
            nonlocal remaining
            handled = await self._handle(entry_id, fields)
            remaining -= 1
            if remaining or moved_on:  # the batch, or the poll, goes on: acknowledged now,
                await self._flush_meanwhile()  # so that it never sits idle long enough to
            return handled  # be reclaimed

        if self.concurrent:  # the outbox: one slow channel must not hold up the others
            done, slow = await self._handle_together(handle, batch)
            if slow:  # they finish behind the poll, which reads what comes after them
                moved_on = True
                self._leave_behind(slow)
            # Every entry that finished is seen through before an error is raised. One stopped
            # (its task cancelled) was let go, pending, or had its work kept: not the poll's end.
            finished = [task for task in done if not task.cancelled()]
            errors = [error for task in finished if (error := task.exception()) is not None]
            if errors:
                raise errors[0]
            handled = sum(task.result() for task in finished)
        else:
            handled, begun = 0, 0
            try:
                for entry in batch:
                    if self._stop_requested():
                        break  # stopping: the rest of the read is let go, for another consumer
                    begun += 1
                    handled += await handle(*entry)
            finally:  # stopped by an error: what was not begun is let go, to be reclaimed
                for unbegun, _ in batch[begun:]:
                    self._release(unbegun)
                    self._let_go.add(unbegun)
        if flush:
            await self.flush()
        return handled

    async def flush(self) -> None:
        """Acknowledge what was handled and not acknowledged yet (with its writes)."""
        if self._handled:
            async with self.redis.pipeline(transaction=False) as pipe:
                taken = await self._queue_acknowledgements(pipe)
                self._check_writes(await self._execute(pipe, taken))

    async def _flush_meanwhile(self) -> None:
        """`flush`, but one round trip at a time: what is handled while one is in flight
        goes with the next, so a batch of a hundred costs a few, not a hundred at once."""
        if self._flushing:
            return  # the flush in flight sends this one too, once it is back
        self._flushing = True
        try:
            while self._handled:
                await self.flush()
        finally:
            self._flushing = False

    async def _read(self, block: int) -> list[tuple[bytes, dict[bytes, bytes] | None]]:
        """New entries (after the acknowledgements still due)."""
        reply: Any = await self._after_acknowledgements(
            lambda client: client.xreadgroup(
                self.group,
                self.consumer,
                {self.stream: ">"},
                count=self.count,
                block=block or None,  # BLOCK 0 would wait forever
            )
        )
        return reply[0][1] if reply else []

    async def _after_acknowledgements(self, command: Callable[[Any], Any]) -> Any:
        """The reply to `command` (given the client, or a pipeline), sent after the
        acknowledgements still due in one round trip: whatever the poll does next, what it
        handled last is never left pending (where another consumer could reclaim it and
        handle it again)."""
        if not self._handled:
            return await command(self.redis)
        async with self.redis.pipeline(transaction=False) as pipe:
            taken = await self._queue_acknowledgements(pipe)
            command(pipe)
            replies = await self._execute(pipe, taken)
        self._check_writes(replies[:-1])
        if isinstance(replies[-1], Exception):
            raise replies[-1]
        return replies[-1]

    def _check_writes(self, replies: list[Any]) -> None:
        """The writes sent with acknowledgements are counters and clean-ups, each safe to
        lose (a saved turn left behind is never taken for a later pause's): logged."""
        for reply in replies:
            if isinstance(reply, RedisConnectionError | RedisTimeoutError | OSError):
                raise reply  # Redis is away: the loop says so and retries
            if is_full(reply):  # (an acknowledgement is taken by a full Redis; a write is not)
                say_full(reply)
            elif isinstance(reply, Exception):
                log.error("%s: a write sent with an acknowledgement failed: %s", self.stream, reply)

    async def _execute(self, pipe: Pipeline, taken: list[tuple[str, WithAck | None]]) -> Any:
        """`pipe` sent. Cancelled on the way (the consumer stopping), it may or may not have
        reached Redis: the acknowledgements it carried go back on the list, for the last
        flush to send again (an XACK twice is harmless; their writes are safe to lose)."""
        try:
            return await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            self._handled[:0] = [(entry_id, None) for entry_id, _ in taken]
            raise

    async def _queue_acknowledgements(self, pipe: Pipeline) -> list[tuple[str, WithAck | None]]:
        """Each handled entry's writes, then its XACK. Taken off the list as they are queued:
        if the round trip fails, the entries stay pending and are reclaimed and handled
        again, like an entry whose consumer died."""
        handled, self._handled = self._handled, []
        for entry_id, with_ack in handled:
            if with_ack is not None:
                await with_ack(pipe)
            pipe.xack(self.stream, self.group, entry_id)
        return handled

    async def _handle_together(
        self,
        handle: Callable[[str, dict[str, str]], Coroutine[Any, Any, bool]],
        batch: list[tuple[str, dict[str, str]]],
    ) -> tuple[set[asyncio.Task[bool]], set[asyncio.Task[bool]]]:
        """The batch handled at once: (the entries done, those still going after
        `batch_wait`)."""
        if not batch:
            return set(), set()
        tasks = [asyncio.create_task(handle(*entry)) for entry in batch]
        try:
            return await asyncio.wait(tasks, timeout=self.batch_wait)
        except BaseException:  # the poll itself was stopped: so is its batch, and run()
            for task in tasks:  # waits for it to end
                task.cancel()
            self._leave_behind(tasks)
            raise

    def _leave_behind(self, tasks: Iterable[asyncio.Task[bool]]) -> None:
        """Entries going on behind the poll: tracked until done (run() stops them)."""
        for task in tasks:
            self._behind.add(task)
            task.add_done_callback(self._finished_behind)

    def _finished_behind(self, task: asyncio.Task[bool]) -> None:
        self._behind.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:  # its acknowledgement failed: the entry stays pending and is
            # reclaimed, like one whose consumer died
            log.error("%s: an entry handled behind the poll: %s", self.stream, error)

    async def _handle(self, entry_id: str, fields: dict[str, str]) -> bool:
        """Handle a held entry (see `poll`) and let it go."""
        suspect = entry_id in self._suspects
        # Cancel requests already made of this task: only one made from now on is a stop.
        before = _cancel_requests()
        try:
            if self.foreground is not None:
                await self.foreground.wait_turn()
            # The gate before the slot: a suspect waiting for its turn holds no slot, and
            # never waits for one held by an entry queued behind it.
            turn = self.gate.suspect() if suspect else self.gate.entry()
            async with turn, holding(self.in_flight):
                if suspect:
                    with_ack = await self._handle_suspect(entry_id, fields)
                else:
                    with_ack = await self._handle_or_give_up(entry_id, fields)
        except Exception as exc:
            if self._stop_requested() and _cancel_requests() > before:
                # The stop, made an error of by the handler: a stop all the same
                self._let_go.add(entry_id)
                raise asyncio.CancelledError() from exc
            # Left pending: reclaimed after idle_ms and tried again.
            if isinstance(exc, RetryLater):
                log.info("%s entry %s deferred: %s", self.stream, entry_id, exc)
            elif is_full(exc):  # the operator's error is said once a minute, not per entry
                say_full(exc)
                log.info("%s entry %s deferred: Redis is full", self.stream, entry_id)
            else:
                log.exception("%s entry %s failed; it will be retried", self.stream, entry_id)
            await self._survived(entry_id)
            return False
        except asyncio.CancelledError:
            if _cancel_requests() > before:
                self._let_go.add(entry_id)
                raise  # stopped: left pending
            # Nobody cancelled it (out of our own waits; the handler's is an error, below):
            # a failure like any other, not the end of the consumer.
            log.exception("%s entry %s failed; it will be retried", self.stream, entry_id)
            await self._survived(entry_id)
            return False
        finally:
            self._release(entry_id)
            # Failed, it is retried only once reclaimed, here or elsewhere (the reclaim
            # says so again); done, what was counted of it goes with its acknowledgement.
            retried = entry_id in self._retried
            self._retried.discard(entry_id)
        self._suspects.discard(entry_id)
        if retried:
            with_ack = together(with_ack, forget_attempts(self.stream, entry_id))
        self._handled.append((entry_id, with_ack))
        if _cancel_requests() > before:  # stopped as it finished: its acknowledgement is due
            raise asyncio.CancelledError()  # (sent by run()'s last flush), and the stop goes on
        return True

    async def _handle_or_give_up(self, entry_id: str, fields: dict[str, str]) -> WithAck | None:
        """The handler's writes; or, for an entry that failed POISON_AFTER times with an
        error of countersign's own, none once `give_up` has dealt with it."""
        try:
            with_ack = await _in_a_task_of_its_own(self.handler(entry_id, fields))
        except TRANSIENT:
            raise
        except Exception as exc:
            if self.give_up is None or self._stop_requested():  # (no verdict while stopping)
                raise
            errors = await self._errors_counted(entry_id, exc)
            if errors < POISON_AFTER:
                raise
            log.error(
                "%s entry %s failed %d times with an error of countersign's own; given up: %r",
                self.stream, entry_id, errors, exc,
            )  # fmt: skip
            await self.give_up(entry_id, fields, exc)
            with_ack = None
        return with_ack

    async def _errors_counted(self, entry_id: str, exc: Exception) -> int:
        """Count `entry_id`'s error of countersign's own, in Redis: an entry whose errors
        alternate with deaths, each in a new process, is given up all the same. 0: another
        consumer has it now. With Redis away it is not counted; `exc` stands, and the entry
        is tried again."""
        try:
            counted = await self._count_error_script(
                keys=[self.stream, errors_key(self.stream, entry_id)],
                args=[self.group, self.consumer, entry_id, KEPT_SECONDS],
            )
        except (RedisError, RedisClusterException, OSError) as redis_away:
            raise exc from redis_away
        return int(counted)

    async def _handle_suspect(self, entry_id: str, fields: dict[str, str]) -> WithAck | None:
        """A suspect, alone in the process: its attempt counted before it begins, and given
        up, not handled, once POISON_AFTER attempts never finished (see `poison`)."""
        attempt = await attempt_alone(self.redis, self.stream, entry_id)
        if attempt <= POISON_AFTER:
            with_ack = await self._handle_or_give_up(entry_id, fields)
        elif attempt <= 2 * POISON_AFTER:
            log.error(
                "%s entry %s stopped its process each of the %d times it was handled alone: "
                "given up without handling it again", self.stream, entry_id, attempt - 1,
            )  # fmt: skip
            assert self.give_up is not None  # suspects are looked for only then
            self._giving_up.add(entry_id)  # should it fail, the entry stays a suspect
            await self.give_up(entry_id, fields, NeverFinished(attempt - 1))
            self._giving_up.discard(entry_id)
            with_ack = None
        else:  # giving it up stopped the process too: abandoned, its copy kept first
            self._giving_up.add(entry_id)  # should the copy fail, it stays a suspect
            await abandon(self.redis, self.stream, entry_id, fields, attempt - 1)
            self._giving_up.discard(entry_id)
            log.critical(
                "%s entry %s stopped its process %d times, being given up too: abandoned, "
                "its copy kept in %s", self.stream, entry_id, attempt - 1,
                abandoned_key(self.stream),
            )  # fmt: skip
            with_ack = None
        return with_ack

    def _stop_requested(self) -> bool:
        """Whether `run` was told to stop (a deploy): from then on no failure is an entry's."""
        return self._stopping is not None and self._stopping.is_set()

    async def _survived(self, entry_id: str) -> None:
        """Its handling failed, and the error was caught: no death to count, unless it
        was the giving up of an entry already found to kill its process."""
        if entry_id in self._giving_up:  # it failed, not the process: not one of its deaths
            self._giving_up.discard(entry_id)
            await take_back_attempt(self.redis, self.stream, entry_id)
            return
        self._suspects.discard(entry_id)
        await self._count_afresh([entry_id])

    async def _count_afresh(self, entry_ids: list[str]) -> None:
        """Their handling ended here without the process dying: their delivery counts start
        afresh (see `poison`). Best effort: with Redis away, they count one more."""
        if self.give_up is None:
            return  # suspects are not looked for
        with contextlib.suppress(RedisError, OSError):
            await self._count_afresh_script(
                keys=[self.stream, attempts_key(self.stream)],
                args=[self.group, self.consumer, *entry_ids],
            )

    # -- the heartbeat: a slow but healthy consumer is not mistaken for a dead one --------
    # Every third of `idle_ms` while it holds entries, the consumer resets the idle time of
    # those it has held that long, all in one script (KEEP_CLAIMED: those still pending
    # under its name, not one another consumer reclaimed meanwhile): a backlog of a
    # thousand entries costs one command per beat, not a thousand at once. Most entries
    # are handled well before the first beat, and cost a timer, not a command.
    def _hold(self, entry_id: str) -> None:
        loop = asyncio.get_running_loop()
        self._held[entry_id] = loop.time()
        if self._beat is None:
            self._beat = loop.call_later(self._beat_every, self._heartbeat)

    def _release(self, entry_id: str) -> None:
        self._held.pop(entry_id, None)
        if not self._held and self._beat is not None:
            self._beat.cancel()
            self._beat = None

    def _heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        since = loop.time() - self._beat_every
        overdue = [entry_id for entry_id, held in self._held.items() if held <= since]
        if overdue and (self._claiming is None or self._claiming.done()):
            self._claiming = loop.create_task(self._keep_claimed(overdue))
        self._beat = loop.call_later(self._beat_every, self._heartbeat)

    async def _keep_claimed(self, entry_ids: list[str]) -> None:
        try:
            kept = await self._keep_claimed_script(
                keys=[self.stream], args=[self.group, self.consumer, *entry_ids]
            )
        except (RedisError, OSError) as exc:  # the next beat tries again; nothing else to do
            log.warning("%s: heartbeat of %d entries failed (%s)", self.stream, len(entry_ids), exc)
        else:
            if lost := set(entry_ids) - {as_text(k) for k in kept}:
                # Another consumer took them while this one was silent (a stalled loop):
                # they are theirs now; this one's handling goes on, the ledger keeping each
                # call to one run.
                log.warning(
                    "%s: %d entries held here were reclaimed by another consumer (this one "
                    "was silent past %d ms): %s",
                    self.stream, len(lost), self.idle_ms, ", ".join(sorted(lost)),
                )  # fmt: skip
        finally:
            self._claiming = None

    def _stop_heartbeat(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        if self._claiming is not None:
            self._claiming.cancel()  # (if it never started, its own clean-up never runs)
            self._claiming = None

    def _reclaim_due(self) -> bool:
        """Whether to look for entries to reclaim now: a pass over the pending entries at
        most every quarter of `idle_ms` (a pass longer than one call goes on at each poll).
        An entry is reclaimable only after `idle_ms` anyway, so it is still reclaimed within
        1.25 x `idle_ms` of a pass, and a busy consumer no longer pays a round trip per read
        for it."""
        now = asyncio.get_running_loop().time()
        return self._reclaimed_at is None or now - self._reclaimed_at >= self.idle_ms / 4000

    async def _reclaim(self) -> list[tuple[bytes, dict[bytes, bytes] | None]]:
        reply: Any = await self._after_acknowledgements(
            lambda client: client.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                self.idle_ms,
                start_id=self._reclaim_from,
                count=self.count,
            )
        )
        self._reclaim_from = as_text(reply[0])  # "0-0": the pass went through them all
        entries = list(reply[1])
        if self.give_up is not None:
            reclaimed = [as_text(e) for e, fields in entries if fields is not None]
            fresh = [e for e in reclaimed if e not in self._held]
            self._retried.update(fresh)
            self._suspects |= await suspects(
                self.redis, self.stream, self.group, self.consumer, fresh
            )
        # Done until the next due time, unless more may wait (a full batch, or pending
        # entries not looked at yet): then again on the next poll.
        more = len(entries) >= self.count or self._reclaim_from != "0-0"
        self._reclaimed_at = None if more else asyncio.get_running_loop().time()
        return entries

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop`; the loop outlives Redis outages and any one bad moment. Once
        `stop` is set no new entry is begun; one being handled goes on until cancelled."""
        self._stopping = stop
        try:
            await self._run(stop)
            if self._behind:  # stopped: what is under way behind the poll ends first (the
                await asyncio.wait(set(self._behind))  # host's grace bounds the wait)
        finally:
            for task in list(self._behind):  # left pending, to be reclaimed and handled again
                task.cancel()
            await asyncio.gather(*self._behind, return_exceptions=True)
            self._stop_heartbeat()
            with contextlib.suppress(RedisError, OSError):
                await asyncio.shield(self.flush())  # stopping: nothing handled stays unacked
            # Stopped on purpose: no death to count for what it let go, but a suspect stays one.
            if unfinished := sorted(self._let_go - self._suspects):
                await asyncio.shield(self._count_afresh(unfinished))
            self._let_go.clear()

    async def _run(self, stop: asyncio.Event) -> None:
        cancel_requests = _cancel_requests()
        while not stop.is_set():
            if _cancel_requests() > cancel_requests:
                # Cancelled, and the CancelledError swallowed on the way (Python 3.11's
                # wait_for does, which redis-py uses with a socket timeout): a stop all the
                # same, not a loop that no longer ends.
                raise asyncio.CancelledError()
            try:
                await self.poll(flush=False)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                log.warning("%s: Redis unavailable (%s); retrying", self.stream, exc)
                await _sleep_or_stop(stop, 1.0)
            except FULL_ERRORS as exc:  # said once a minute; a traceback a second helps nobody
                say_full(exc)
                await _sleep_or_stop(stop, 1.0)
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    self._group_ready = False  # the stream was lost (e.g. Redis without AOF)
                    continue
                log.exception("%s: Redis refused a command; retrying", self.stream)
                await _sleep_or_stop(stop, 1.0)
            except Exception:
                log.exception("%s: unexpected error; retrying", self.stream)
                await _sleep_or_stop(stop, 1.0)


class ShardedConsumer:
    """One consumer per shard's stream, run side by side: a shard's stream is read where
    its runs live (its own Redis Cluster slot)."""

    def __init__(self, consumers: list[StreamConsumer]) -> None:
        self.consumers = consumers

    async def ensure_groups(self) -> None:
        for consumer in self.consumers:
            await consumer.ensure_group()

    async def poll(self, block_ms: int = 0) -> int:
        """One pass over every shard; returns the entries handled. Reads never block on a
        shard (Redis resolves short BLOCK timeouts only at its cron tick, ~100 ms); when
        nothing was found, it sleeps `block_ms` instead."""
        handled = 0
        for consumer in self.consumers:
            handled += await consumer.poll(block_ms=0)
        if not handled and block_ms:
            await asyncio.sleep(block_ms / 1000)
        return handled

    @property
    def idle(self) -> bool:
        return all(consumer.idle for consumer in self.consumers)

    async def run(self, stop: asyncio.Event) -> None:
        """Every shard's consumer until `stop`. Cancelled, it returns only once each of them
        has ended (its last acknowledgements sent): the host closes Redis right after."""
        async with asyncio.TaskGroup() as shards:
            for consumer in self.consumers:
                shards.create_task(consumer.run(stop))


async def trim_acknowledged(redis: Any, stream: str, group: str) -> int:
    """Drop the entries every consumer of `group` has read and acknowledged; returns how
    many went. Unread and pending entries stay, so trimming never loses work.

    The group's last delivered id is read first and its pending list second: an entry at or
    below that id that is no longer pending by then was acknowledged, whatever happened in
    between. The pending count of XINFO is not trusted to agree with XPENDING: consumers
    ack in between (a restarted worker reclaiming what a killed one left pending), and then
    XPENDING has no oldest entry at all. XINFO's entries-read and lag may be nil after a
    restart, so neither is read."""
    try:
        groups: Any = await redis.xinfo_groups(stream)
    except ResponseError:
        return 0  # no such stream yet
    info = next((g for g in groups if as_text(g.get("name", b"")) == group), None)
    if info is None or info.get("last-delivered-id") is None:
        return 0
    ms, _, seq = as_text(info["last-delivered-id"]).partition("-")
    keep_from = f"{ms}-{int(seq or 0) + 1}"  # everything after the last delivered entry
    summary: Any = await redis.xpending(stream, group)
    oldest = summary.get("min") if isinstance(summary, dict) else None
    if oldest is not None:  # and the oldest entry still waiting for its acknowledgement
        keep_from = min(keep_from, as_text(oldest), key=_entry_order)
    return int(await redis.xtrim(stream, minid=keep_from, approximate=False))


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class CancelledByNobody(Exception):
    """A handler raised CancelledError while nobody was stopping it (a child task or future
    it awaited was cancelled, or it raised one itself): an error of countersign's own like
    any other, given up in the end."""


def _cancel_requests() -> int:
    """The cancel requests pending on the current task (`Task.cancelling`)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


async def _in_a_task_of_its_own(handling: Coroutine[Any, Any, WithAck | None]) -> WithAck | None:
    """A handler run in a task of its own: what it does to its task (cancels it, or leaves a
    cancel request behind, as Python 3.11's TaskGroup can) is never taken for a stop of the
    consumer, while a stop of the consumer reaches it through the await. The slot the
    consumer holds for it (see `slots`) is the handler's to set aside meanwhile."""
    before = _cancel_requests()
    task = asyncio.create_task(handling)
    with handed_to(task):
        try:
            return await task
        except asyncio.CancelledError as cancelled:
            if _cancel_requests() > before:  # the consumer's task was cancelled: a stop
                if task.done() and not task.cancelled() and task.exception() is None:
                    # It came as the handler finished: its work is kept, and `_handle`
                    # raises the stop on once it is recorded.
                    return task.result()
                raise
            raise CancelledByNobody("the handler raised CancelledError nobody asked for") from (
                cancelled
            )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
