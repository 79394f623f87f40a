"""The Redis connection pool against a real Redis: a burst beyond its connections waits in
line instead of failing, in order of arrival; a caller who waited too long is told why;
one who gave up never takes a freed connection with it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

from agent_host.durable.connection_pool import WaitingConnectionPool


@pytest.fixture
async def open_client(redis_url: str) -> AsyncIterator[Callable[..., Redis]]:
    clients: list[Redis] = []

    def make(connections: int, wait: float = 5.0, **options: Any) -> Redis:
        pool = WaitingConnectionPool.from_url(
            redis_url, max_connections=connections, connection_wait=wait, **options
        )
        clients.append(Redis.from_pool(pool))
        return clients[-1]

    yield make
    for client in clients:
        await client.aclose()


def _waiting_pool(client: Redis) -> WaitingConnectionPool:
    pool = client.connection_pool
    assert isinstance(pool, WaitingConnectionPool)
    return pool


async def _two_in_line(client: Redis) -> tuple[asyncio.Task[Any], ...]:
    """The one connection held for 0.2 s, and two callers in line behind it: a PING, then
    a SET of `second`."""
    held = asyncio.create_task(client.blpop(["nothing"], timeout=0.2))
    await asyncio.sleep(0.05)
    first = asyncio.create_task(client.ping())
    await asyncio.sleep(0.02)
    second = asyncio.create_task(client.set("second", "1"))
    await asyncio.sleep(0.02)
    return held, first, second


async def test_a_burst_far_beyond_the_connections_is_served_not_refused(
    open_client: Callable[..., Redis],
) -> None:
    client = open_client(4)
    replies = await asyncio.gather(*(client.incr("burst") for _ in range(500)))
    assert sorted(replies) == list(range(1, 501))
    assert int(await client.get("burst") or 0) == 500
    assert len(client.connection_pool._in_use_connections) == 0  # every one came back


async def test_callers_waiting_for_a_connection_are_served_in_order_of_arrival(
    open_client: Callable[..., Redis],
) -> None:
    client = open_client(1)
    held = asyncio.create_task(client.blpop(["nothing"], timeout=0.3))  # the one connection
    await asyncio.sleep(0.05)
    served: list[int] = []

    async def call(n: int) -> None:
        await client.rpush("order", n)
        served.append(n)

    callers = []
    for n in range(5):
        callers.append(asyncio.create_task(call(n)))
        await asyncio.sleep(0.01)
    await asyncio.gather(held, *callers)
    assert served == [0, 1, 2, 3, 4]
    assert [int(v) for v in await client.lrange("order", 0, -1)] == [0, 1, 2, 3, 4]


async def test_a_caller_that_waited_too_long_is_told_why_and_the_line_moves_on(
    open_client: Callable[..., Redis],
) -> None:
    client = open_client(1, wait=0.2)
    held = asyncio.create_task(client.blpop(["nothing"], timeout=1))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(MaxConnectionsError, match=r"no Redis connection was free within 0.2 s"):
        await client.ping()
    assert time.monotonic() - started < 0.9  # told at its deadline, not when one came free
    await held
    assert await client.ping() is True  # the pool is whole again: nobody waits in vain


async def test_a_caller_cancelled_in_line_leaves_the_freed_connection_to_the_next(
    open_client: Callable[..., Redis],
) -> None:
    client = open_client(1)
    held, gone, after = await _two_in_line(client)
    gone.cancel()
    await asyncio.wait_for(asyncio.gather(held, after), 2)
    assert await client.get("second") == b"1"
    assert gone.cancelled()


async def test_cancellations_and_timeouts_in_a_crowd_leave_the_pool_whole(
    open_client: Callable[..., Redis],
) -> None:
    """Hundreds of callers on three connections, some cancelled in line, some giving up,
    some holding a connection a while: afterwards nobody is counted in line or woken,
    every connection is back, and the next caller is served at once."""
    client = open_client(3, wait=0.15)
    pool = _waiting_pool(client)
    rng = random.Random(7)

    async def caller(n: int) -> str:
        try:
            if n % 7 == 0:
                await client.blpop(["nothing"], timeout=0.05)  # holds its connection a while
            else:
                await client.incr("served")
        except MaxConnectionsError:
            return "gave up"
        return "served"

    tasks = []
    for n in range(400):
        tasks.append(asyncio.create_task(caller(n)))
        if rng.random() < 0.2:
            await asyncio.sleep(0)
        if rng.random() < 0.1:
            rng.choice(tasks).cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert {o if isinstance(o, str) else type(o).__name__ for o in outcomes} <= {
        "served",
        "gave up",
        "CancelledError",
    }
    assert "served" in outcomes
    assert (pool._waiting, pool._woken) == (0, 0)
    assert not pool._in_use_connections
    started = time.monotonic()
    assert await client.ping() is True
    assert time.monotonic() - started < 0.1


async def test_a_turn_handed_to_a_caller_cancelled_that_moment_goes_to_the_next(
    open_client: Callable[..., Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = open_client(1)
    pool = _waiting_pool(client)
    held, first, second = await _two_in_line(client)
    hand_on = pool._hand_on

    def hand_on_then_cancel_first() -> None:  # the release hands `first` its turn, and
        hand_on()  # `first` is cancelled before it could take the connection
        first.cancel()
        monkeypatch.setattr(pool, "_hand_on", hand_on)

    monkeypatch.setattr(pool, "_hand_on", hand_on_then_cancel_first)
    await asyncio.wait_for(asyncio.gather(held, second), 2)  # not after the 5 s wait
    assert first.cancelled()
    assert await client.get("second") == b"1"
    assert (pool._waiting, pool._woken) == (0, 0)


async def test_a_release_cancelled_while_redis_py_reconnects_still_wakes_the_line(
    open_client: Callable[..., Redis],
) -> None:
    """redis-py's release awaits a reconnect of a connection flagged for it; a task cancelled
    there has freed its slot all the same, and the caller in line gets it."""
    client = open_client(1, wait=1.0)
    pool = _waiting_pool(client)
    connection = await pool.get_connection()
    disconnect = connection.disconnect

    async def slow_disconnect(*args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.3)
        await disconnect(*args, **kwargs)

    connection.should_reconnect = lambda: True  # type: ignore[method-assign]
    connection.disconnect = slow_disconnect  # type: ignore[method-assign]
    waiting = asyncio.create_task(client.ping())
    await asyncio.sleep(0.05)
    releasing = asyncio.create_task(pool.release(connection))
    await asyncio.sleep(0.05)
    releasing.cancel()
    assert await asyncio.wait_for(waiting, 0.8) is True  # not refused at the 1 s wait
    assert (pool._waiting, pool._woken) == (0, 0)
    await disconnect()  # the pool lost it with the cancelled release: closed here


class _GatedLock(asyncio.Lock):
    """redis-py's pool lock, held up at will (as a reconnect in `release` holds it)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None

    async def acquire(self) -> Literal[True]:
        if self.gate is not None:
            await self.gate.wait()
        return await super().acquire()


async def test_a_woken_caller_cancelled_on_the_pool_lock_hands_its_turn_on(
    open_client: Callable[..., Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = open_client(1, wait=1.0)
    pool = _waiting_pool(client)
    lock = _GatedLock()
    monkeypatch.setattr(pool, "_lock", lock)
    held, first, second = await _two_in_line(client)
    hand_on = pool._hand_on

    def hand_on_and_hold_the_lock() -> None:  # `first` is woken, and then waits on the lock
        hand_on()
        lock.gate = asyncio.Event()
        monkeypatch.setattr(pool, "_hand_on", hand_on)

    monkeypatch.setattr(pool, "_hand_on", hand_on_and_hold_the_lock)
    await held
    await asyncio.sleep(0.05)  # `first` is inside redis-py's get_connection, at the lock
    first.cancel()
    assert lock.gate is not None
    lock.gate.set()
    lock.gate = None
    await asyncio.wait_for(second, 0.8)  # its turn came from `first`, not at the 1 s wait
    assert first.cancelled()
    assert (pool._waiting, pool._woken) == (0, 0)


# redis-py checks a free connection for unread data only while its maintenance notifications
# are off, as they are on RESP2 (on RESP3, data may be a push nobody asked for): these pools
# speak RESP2, so that the check the short way must keep is the one that runs.
async def test_a_connection_the_server_closed_is_reconnected_before_it_is_handed_out(
    open_client: Callable[..., Redis], redis_url: str
) -> None:
    """A free connection is taken without redis-py's pool machinery, but not unchecked: one
    whose server side went away is connected again before it is given to a caller."""
    client = open_client(1, protocol=2)
    pool = _waiting_pool(client)
    assert pool._plain
    connection = await pool.get_connection()
    await connection.send_command("CLIENT", "SETNAME", "pooled")
    assert await connection.read_response() in (b"OK", "OK")
    await pool.release(connection)
    async with Redis.from_url(redis_url) as other:
        assert await other.client_kill_filter(_type="normal", skipme=True) >= 1
    await asyncio.sleep(0.1)  # the close has reached the pooled connection's socket
    again = await pool.get_connection()
    assert again is connection
    await again.send_command("PING")  # on the closed socket this would fail to read
    assert await again.read_response() in (b"PONG", "PONG")
    await pool.release(again)


async def test_a_connection_given_back_with_a_reply_unread_is_not_handed_out_as_is(
    open_client: Callable[..., Redis],
) -> None:
    """A connection released before its reply was read would give the next caller that
    reply for its own: it is reconnected, and the next caller reads its own answer."""
    client = open_client(1, protocol=2)
    pool = _waiting_pool(client)
    connection = await pool.get_connection()
    await connection.send_command("ECHO", "stale")
    await pool.release(connection)
    await asyncio.sleep(0.05)  # the stale reply has arrived, unread
    again = await pool.get_connection()
    await again.send_command("ECHO", "fresh")
    assert await again.read_response() in (b"fresh", "fresh")
    await pool.release(again)
    assert await client.echo("next") == b"next"


async def test_a_free_connection_that_cannot_be_checked_is_connected_again_not_given_up(
    open_client: Callable[..., Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Looking at a free connection can fail (its socket broken): as in redis-py's pool,
    it is connected afresh and the command goes on, rather than failing before it began
    (outside redis-py's retries)."""
    client = open_client(1, protocol=2)
    pool = _waiting_pool(client)
    assert await client.set("k", "v")
    (connection,) = pool._available_connections
    can_read = connection.can_read

    async def broken_once() -> bool:
        monkeypatch.setattr(connection, "can_read", can_read)
        raise RedisConnectionError("Error while reading from 127.0.0.1: (104, 'reset')")

    monkeypatch.setattr(connection, "can_read", broken_once)
    assert await client.get("k") == b"v"
    assert pool._available_connections == [connection]


async def test_no_connection_is_taken_or_given_back_the_short_way_while_the_pool_s_lock_is_held(
    open_client: Callable[..., Redis],
) -> None:
    """redis-py's handler of a server's maintenance notice (a MOVING) holds the pool's lock
    while it disconnects and moves the free connections: a caller taking one the short way
    then would get one being closed under it, and one given back would escape it. Both
    wait for the lock, as in redis-py."""
    client = open_client(2)
    pool = _waiting_pool(client)
    assert await client.set("k", "v")
    async with pool._lock:
        reading = asyncio.create_task(client.get("k"))
        await asyncio.sleep(0.05)
        assert not pool._in_use_connections  # not taken while the lock is held
        assert len(pool._available_connections) == 1
    assert await asyncio.wait_for(reading, 1) == b"v"
    connection = await pool.get_connection()
    async with pool._lock:  # nor given back under it
        releasing = asyncio.create_task(pool.release(connection))
        await asyncio.sleep(0.05)
        assert connection in pool._in_use_connections
    await asyncio.wait_for(releasing, 1)
    assert pool._available_connections == [connection]
