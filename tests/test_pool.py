"""ConnectionPool over real sockets: reuse, round-robin, concurrent opens, reconnects,
backoff, address changes and a clean close."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import socket
import time
from collections.abc import Callable

import pytest

from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import KafkaConnectionError
from aiokafka07.pool import ConnectionPool
from aiokafka07.protocol import LATEST, encode_offsets_response, entry_size
from aiokafka07.testing import KafkaCluster

from .garbage_server import GarbageServer, Reply
from .wire import address_of, client_tasks, eventually

Factory = Callable[..., KafkaCluster]


async def test_connections_are_reused(cluster: KafkaCluster) -> None:
    address = address_of(cluster)
    async with ConnectionPool() as pool:
        first = await pool.connection(address)
        assert await first.produce("reuse", 0, [b"x"], confirm=True) == entry_size(1)
        for _ in range(5):
            assert await pool.connection(address) is first
        assert pool.connections(address) == [first]
        assert first.requests_sent == 3  # the produce and the probes before and behind it
    assert first.closed


async def test_up_to_n_connections_per_broker_round_robin(cluster: KafkaCluster) -> None:
    address = address_of(cluster)
    async with ConnectionPool(connections_per_broker=3) as pool:
        handed = [await pool.connection(address) for _ in range(12)]
        distinct = list(dict.fromkeys(handed))
        assert len(distinct) == 3
        assert handed[:3] == distinct  # the first three calls open one each
        cycle = handed[3:6]
        assert set(cycle) == set(distinct)
        assert handed[6:9] == cycle
        assert handed[9:12] == cycle
        assert sorted(map(id, pool.connections(address))) == sorted(map(id, distinct))
        for conn in distinct:
            assert await conn.offsets("rr", 0, LATEST) == (0,)
        # A closed one is replaced by a new one, the others stay.
        await distinct[1].close()
        replacement = [await pool.connection(address) for _ in range(3)]
        assert distinct[1] not in replacement
        fresh = set(replacement) - set(distinct)
        assert len(fresh) == 1
        assert len(pool.connections(address)) == 3
    assert all(c.closed for c in [*distinct, *fresh])


@pytest.mark.parametrize("per_broker", [1, 3])
async def test_concurrent_callers_open_only_as_many_as_allowed(per_broker: int) -> None:
    async with GarbageServer() as server:
        address = BrokerAddress(4, server.host, server.port)
        async with ConnectionPool(connections_per_broker=per_broker) as pool:
            handed = await asyncio.wait_for(
                asyncio.gather(*(pool.connection(address) for _ in range(40))), 5
            )
            assert len(set(handed)) == per_broker
            assert len(pool.connections(address)) == per_broker
            # Every connection is handed out; none opened and dropped on the way.
            await eventually(lambda: server.connections == per_broker, 2)
            await asyncio.sleep(0.05)
            assert server.connections == per_broker


async def test_reconnect_after_the_broker_restarts(cluster: KafkaCluster) -> None:
    address = address_of(cluster)
    async with ConnectionPool() as pool:
        old = await pool.connection(address)
        assert await old.produce("rs", 1, [b"kept"], confirm=True) == entry_size(4)
        await cluster.stop_broker(0)
        await eventually(lambda: old.closed, 5)
        assert pool.connections(address) == []
        with pytest.raises(KafkaConnectionError):
            await pool.connection(address)  # the port is closed now
        await cluster.start_broker(0)
        assert cluster.broker(0).port == address.port
        new = await asyncio.wait_for(pool.connection(address), 5)
        assert new is not old
        assert not new.closed
        assert await new.offsets("rs", 1, LATEST) == (entry_size(4),)
        assert pool.connections(address) == [new]

        await cluster.crash_broker(0)
        await eventually(lambda: new.closed, 5)
        await cluster.start_broker(0)
        third = await asyncio.wait_for(pool.connection(address), 5)
        assert third not in (old, new)
        assert await third.offsets("rs", 1, LATEST) == (entry_size(4),)


NEXT_TRY = re.compile(r"\((\d+) failures; next try in ([\d.]+) s\)")


@pytest.mark.slow  # waits through a backoff schedule (3 s)
async def test_backoff_grows_on_failures_and_resets_after_success(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The schedule is read from the pool's warnings (failure count, delay chosen, when);
    the clock only checks that each try waits out the delay chosen before it, and that a
    first try does not wait (bounds a busy machine cannot break)."""
    caplog.set_level(logging.WARNING, logger="aiokafka07.pool")
    address = address_of(cluster)
    base, cap = 0.4, 0.8

    def tries() -> list[tuple[int, float, float]]:
        """(failures, next delay, wall time) of each failed try so far."""
        found = []
        for record in caplog.records:
            if match := NEXT_TRY.search(record.getMessage()):
                found.append((int(match[1]), float(match[2]), record.created))
        return found

    def waited_out(earlier: tuple[int, float, float], later_at: float) -> None:
        """A try at ``later_at`` came no sooner than ``earlier`` said, and not much later
        (the delay is logged to 0.01 s)."""
        _, delay, at = earlier
        assert delay - 0.006 <= later_at - at <= delay + 2, (delay, later_at - at)

    async with ConnectionPool(reconnect_backoff_ms=(base * 1000, cap * 1000)) as pool:
        await cluster.stop_broker(0)

        async def failing_attempt() -> float:
            started = time.monotonic()
            with pytest.raises(KafkaConnectionError) as info:
                await asyncio.wait_for(pool.connection(address), 5)
            assert not info.value.maybe_delivered
            return time.monotonic() - started

        first = await failing_attempt()
        assert first < 0.75 * base  # the first try at once (a refused connect: ~1 ms)
        for _ in range(3):
            await failing_attempt()
        failed = tries()
        # base, 2 base, then the cap (4 base uncapped), each +-20 %.
        assert [n for n, _, _ in failed] == [1, 2, 3, 4]
        for (_, delay, _), nominal in zip(failed, [base, 2 * base, cap, cap], strict=True):
            assert 0.8 * nominal - 0.005 <= delay <= 1.2 * nominal + 0.005, failed
        for earlier, later in itertools.pairwise(failed):
            waited_out(earlier, later[2])

        await cluster.start_broker(0)
        conn = await asyncio.wait_for(pool.connection(address), 5)
        waited_out(failed[-1], time.time())  # still waits the backoff once
        assert await conn.offsets("bo", 0, LATEST) == (0,)

        await cluster.stop_broker(0)
        await eventually(lambda: conn.closed, 5)
        first = await failing_attempt()
        assert first < 0.75 * base  # reset: the first failure costs nothing ...
        await failing_attempt()
        again = tries()[len(failed) :]
        assert [n for n, _, _ in again] == [1, 2]  # ... and counts from 1 again
        assert 0.8 * base - 0.005 <= again[0][1] <= 1.2 * base + 0.005
        waited_out(again[0], again[1][2])


async def test_address_change_replaces_the_old_connections(kafka_cluster: Factory) -> None:
    async with (
        kafka_cluster(1, zookeeper=None) as first,
        kafka_cluster(1, zookeeper=None) as second,
    ):
        old_address, new_address = address_of(first), address_of(second)
        assert old_address.broker_id == new_address.broker_id == 0
        assert old_address.port != new_address.port
        async with ConnectionPool(connections_per_broker=2) as pool:
            olds = [await pool.connection(old_address) for _ in range(2)]
            assert await olds[0].produce("moved", 0, [b"there"], confirm=True) == entry_size(5)
            # An answer outstanding on an old connection still arrives.
            pending = asyncio.ensure_future(olds[1].offsets("moved", 0, LATEST))
            await asyncio.sleep(0)
            new = await asyncio.wait_for(pool.connection(new_address), 5)
            assert await pending == (entry_size(5),)
            assert all(c.closed for c in olds)
            assert new.address == new_address
            assert await new.offsets("moved", 0, LATEST) == (0,)  # the other broker's log
            assert pool.connections(new_address) == [new]
            # Back to the old address: the new connection goes in turn.
            again = await pool.connection(old_address)
            assert again.address == old_address
            assert new.closed
            assert await again.offsets("moved", 0, LATEST) == (entry_size(5),)


@pytest.mark.slow  # holds an answer back 1.5 s
async def test_a_call_racing_an_address_change_gets_the_address_it_asked_for() -> None:
    """A caller with the old address while the pool is still closing the old connections
    must not make the pool hand that old connection out for the new address."""
    slow_answer = [Reply(encode_offsets_response([5]), delay=1.5)]
    async with GarbageServer(slow_answer) as old_server, GarbageServer() as new_server:
        old_address = BrokerAddress(0, old_server.host, old_server.port)
        new_address = BrokerAddress(0, new_server.host, new_server.port)
        async with ConnectionPool() as pool:
            old = await pool.connection(old_address)
            pending = asyncio.ensure_future(old.offsets("t", 0, LATEST))
            await eventually(lambda: old_server.requests, 5)  # the answer comes in 1.5 s
            moving = asyncio.ensure_future(pool.connection(new_address))
            # The pool is closing `old` (waiting for its answer).
            await eventually(lambda: old not in pool.connections(old_address), 5)
            assert not old.closed
            stale = await asyncio.wait_for(pool.connection(old_address), 5)
            assert stale.address == old_address
            conn = await asyncio.wait_for(moving, 5)
            assert await pending == (5,)
            assert conn.address == new_address
            assert (await pool.connection(new_address)).address == new_address


async def test_forget_closes_a_brokers_connections(cluster: KafkaCluster) -> None:
    address = address_of(cluster)
    async with ConnectionPool(connections_per_broker=2) as pool:
        conns = [await pool.connection(address) for _ in range(2)]
        await pool.forget(0)
        assert all(c.closed for c in conns)
        assert pool.connections(address) == []
        new = await pool.connection(address)
        assert new not in conns
        assert await new.offsets("f", 0, LATEST) == (0,)


async def test_close_finishes_outstanding_requests_and_leaves_no_task(
    cluster: KafkaCluster,
) -> None:
    address = address_of(cluster)
    before = asyncio.all_tasks()
    pool = ConnectionPool(connections_per_broker=2)
    conns = [await pool.connection(address) for _ in range(2)]
    await conns[0].produce("cl", 0, [b"a", b"b"], confirm=True)
    tasks = [asyncio.ensure_future(conns[k % 2].offsets("cl", 0, LATEST)) for k in range(100)]
    await asyncio.sleep(0)
    await asyncio.wait_for(pool.close(), 5)
    assert all(t.done() for t in tasks)
    assert [t.result() for t in tasks] == [(2 * entry_size(1),)] * 100
    assert all(c.closed for c in conns)
    assert client_tasks(before) == set()
    with pytest.raises(KafkaConnectionError, match="closed"):
        await pool.connection(address)
    await eventually(lambda: asyncio.all_tasks() == before, 5)


async def test_close_fails_what_does_not_finish_in_time() -> None:
    async with GarbageServer() as server:  # never answers
        address = BrokerAddress(None, server.host, server.port)
        before = asyncio.all_tasks()
        pool = ConnectionPool()
        conn = await pool.connection(address)
        tasks = [asyncio.ensure_future(conn.offsets("t", 0, LATEST)) for _ in range(10)]
        await eventually(lambda: len(server.requests) == 10, 5)
        started = time.monotonic()
        await pool.close(timeout_ms=200)
        assert 0.15 <= time.monotonic() - started < 10  # its 200 ms, not the requests' 30 s
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            assert isinstance(result, KafkaConnectionError)
            assert result.maybe_delivered
        assert conn.closed
        assert client_tasks(before) == set()
        await eventually(lambda: asyncio.all_tasks() == before, 5)  # the server's handler


async def test_close_racing_an_open_leaves_no_open_connection() -> None:
    async with GarbageServer() as server:
        address = BrokerAddress(None, server.host, server.port)
        pool = ConnectionPool()
        opening = asyncio.ensure_future(pool.connection(address))
        await asyncio.sleep(0)  # the open is under way
        await pool.close()
        try:
            conn: BrokerConnection | None = await asyncio.wait_for(opening, 5)
        except KafkaConnectionError:
            conn = None
        try:
            # Either the call failed, or what it returned belongs to the closed pool and
            # is closed: nobody would ever close it otherwise.
            assert conn is None or conn.closed, "a closed pool handed out an open connection"
        finally:
            if conn is not None:
                await conn.close()


async def test_refused_connection_with_a_bound_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = BrokerAddress(1, "127.0.0.1", sock.getsockname()[1])
        async with ConnectionPool(reconnect_backoff_ms=(10, 10)) as pool:
            for _ in range(3):
                with pytest.raises(KafkaConnectionError):
                    await asyncio.wait_for(pool.connection(address), 5)
            assert pool.connections(address) == []


def test_at_least_one_connection_per_broker() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionPool(connections_per_broker=0)
