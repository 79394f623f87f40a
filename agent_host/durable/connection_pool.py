"""A Redis connection pool that waits for a free connection instead of failing at once.

redis-py's asyncio pool raises "Too many connections" the moment every connection is in
use. A burst of simultaneous requests (a thousand agents calling the API at the same
moment) would fail some of them, and with them whatever else of the process needed Redis
just then: a click, the outbox, a resume. Here a caller that finds every connection in use
waits in line, in order of arrival, for one to be released, for at most CONNECTION_WAIT
seconds, and only then fails, saying so.

Taking a free connection and giving it back are also cheaper than in redis-py's pool, which
every Redis command goes through (about ten times an approval cycle): redis-py 8 takes its
lock, checks the call's arguments for deprecated ones and records metrics nobody reads,
each an await or more. Here, with none of the features that need them configured, a free
connection is taken and given back in a few list operations, checked as redis-py checks it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import MaxConnectionsError

from agent_host.durable.command_packing import hiredis_packing

__all__ = ["CONNECTION_WAIT", "WaitingConnectionPool", "WaitingSentinelConnectionPool"]

# Within Slack's 3 s for a click's ack, with time left to answer once a connection is free.
CONNECTION_WAIT = 2.0


def _metrics_enabled() -> bool:
    """Whether redis-py records connection metrics (its observability configured)."""
    try:
        from redis.asyncio.observability.recorder import _get_or_create_collector
    except ImportError:  # (a redis-py without them)
        return False
    return _get_or_create_collector() is not None


class WaitingConnectionPool(ConnectionPool):
    """redis-py's pool, waiting in line when every connection is in use."""

    def __init__(self, *args: Any, connection_wait: float = CONNECTION_WAIT, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.connection_class = hiredis_packing(self.connection_class)
        self.connection_wait = connection_wait
        self._line: collections.deque[asyncio.Future[None]] = collections.deque()
        self._waiting = 0  # in line now (the line may also hold turns given up)
        self._woken = 0  # woken by a release, and not back yet: the freed connection is theirs
        # Taking and releasing a connection skip what only streaming credentials (a
        # re-authentication on release) and redis-py's OpenTelemetry metrics need; with
        # either configured, the pool is redis-py's own.
        self._plain = (
            self.connection_kwargs.get("credential_provider") is None and not _metrics_enabled()
        )

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        if not self._waiting and not self._woken:  # nobody is before this caller
            if self._plain and self._available_connections and not self._lock.locked():
                return await self._take_free()
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call,no-any-return]
            except MaxConnectionsError:
                pass
        deadline = asyncio.get_running_loop().time() + self.connection_wait
        again = False
        while True:
            await self._turn(deadline, front=again)
            self._woken -= 1
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call,no-any-return]
            except MaxConnectionsError:  # taken meanwhile by a caller outside the line (one
                again = True  # that got past the check while redis-py's lock was held)
            except BaseException:  # cancelled, or Redis away: its turn goes on to the next
                self._hand_on()
                raise

    async def _take_free(self) -> AbstractConnection:
        """A free connection, taken as redis-py's pool takes one and checked by its own
        `ensure_connection`, without its deprecation check of the arguments and its
        metrics. Taken only while nobody holds the pool's lock, as redis-py's handler of a
        server's maintenance notice does while it moves connections: nothing here waits
        between looking and taking, so none is taken from under it."""
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def _turn(self, deadline: float, *, front: bool = False) -> None:
        """Wait in line until a release hands this caller its turn (MaxConnectionsError at
        `deadline`; a turn handed just as it gave up goes on to the next in line). `front`:
        back where it was, a turn that came to nothing."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if front:
            self._line.appendleft(turn)
        else:
            self._line.append(turn)
        self._waiting += 1
        try:
            async with asyncio.timeout_at(deadline):
                await turn
        except BaseException as stopped:
            if turn.done() and not turn.cancelled():  # its turn came all the same
                self._woken -= 1
                self._hand_on()
            else:
                turn.cancel()  # skipped by the release that reaches it
            if isinstance(stopped, TimeoutError):
                raise MaxConnectionsError(
                    f"no Redis connection was free within {self.connection_wait:g} s (all "
                    f"{self.max_connections} in use); try again shortly"
                ) from None
            raise
        finally:
            self._waiting -= 1

    async def release(self, connection: AbstractConnection) -> None:
        reconnect = connection.should_reconnect()  # type: ignore[no-untyped-call]
        if self._plain and not self._lock.locked() and not reconnect:
            self._in_use_connections.remove(connection)
            self._available_connections.append(connection)
            self._hand_on()
            return
        try:
            await super().release(connection)
        finally:  # (even cancelled while redis-py reconnects it: the slot is free already)
            self._hand_on()

    def _hand_on(self) -> None:
        """Connections may be free: wake as many of the first in line as there are free
        connections not already promised to a woken caller. Counting the free ones, not the
        calls, a wake missed by one call is made by the next."""
        if not self._line:
            return
        free = self.max_connections - len(self._in_use_connections)
        while self._line and self._woken < free:
            turn = self._line.popleft()
            if not turn.done():  # (one that gave up or was cancelled is skipped)
                self._woken += 1
                turn.set_result(None)


class WaitingSentinelConnectionPool(WaitingConnectionPool, SentinelConnectionPool):
    """The pool of a Sentinel-managed master, waiting in line the same way."""
