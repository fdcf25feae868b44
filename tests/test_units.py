"""One time unit across the public API: every duration a user passes is milliseconds, in a
parameter named ``*_ms`` (aiokafka's convention).

The seconds-based names these replace keep working for one release: the value is
converted, and one DeprecationWarning names the new keyword and points at the caller's
line. For each renamed class (and the test helpers), one test passes the old names and
checks the warnings and that the value arrived in milliseconds (through real sockets where
a timeout is observable), and its twin passes the new names and checks the same outcome
without a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import (
    BrokerAddress,
    BrokerConnection,
    ConnectionPool,
    Consumer,
    KafkaHandler,
    Producer,
    SimpleConsumer,
)
from aiokafka07.cluster import Cluster, ClusterTimeoutError, StaticCluster
from aiokafka07.connection import RENAMED_TIMEOUTS
from aiokafka07.errors import InvalidConfigError, KafkaConnectionError, KafkaError
from aiokafka07.protocol import LATEST
from aiokafka07.testing import KafkaCluster, ZooKeeperServer, expire_session
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.validation import check_ms, check_optional_ms, renamed_options_to_ms, renamed_to_ms

from .garbage_server import GarbageServer
from .test_cli_common import unused_port
from .wire import address_of, eventually

ADDRESS = BrokerAddress(0, "127.0.0.1", 1)
STATIC = "0:127.0.0.1:1"
ZK = "127.0.0.1:1"
OLD, NEW = "old seconds name", "new ms name"


@contextlib.contextmanager
def deprecations(*renamed: str) -> Iterator[None]:
    """Expect exactly one renaming DeprecationWarning per name in ``renamed`` (the new
    ``*_ms`` names it must tell to use; none: no such warning at all), each pointing at
    this file, the caller's line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    ours = [w for w in caught if "=<milliseconds>" in str(w.message)]
    assert all(issubclass(w.category, DeprecationWarning) for w in ours)
    named = [re.search(r"use (\w+)=<milliseconds>", str(w.message)) for w in ours]
    assert sorted(m.group(1) for m in named if m) == sorted(renamed), [str(w.message) for w in ours]
    for w in ours:
        assert w.filename == __file__, f"the warning points at {w.filename}:{w.lineno}"


def warned(*renamed: str, old: bool) -> contextlib.AbstractContextManager[None]:
    return deprecations(*renamed) if old else deprecations()


# -- the shared helper ----------------------------------------------------------------


def test_renamed_to_ms_converts_seconds_and_names_the_new_keyword() -> None:
    with deprecations():
        assert renamed_to_ms("Thing", "timeout", None, 250) == 250
        assert check_ms("Thing", "timeout_ms", 250) == 250.0
        assert check_optional_ms("Thing", "timeout_ms", None) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert renamed_to_ms("Thing", "timeout", 0.25, 9999) == 250.0  # the old name wins
        assert renamed_to_ms("Thing", "backoff", (0.05, 5), None) == (50.0, 5000.0)
        assert check_ms("Thing", "timeout_ms", 5000, 2) == 2000.0
    assert all(w.category is DeprecationWarning for w in caught)
    assert [str(w.message) for w in caught] == [
        "Thing(timeout=<seconds>) is deprecated and goes in the next release: "
        "use timeout_ms=<milliseconds>",
        "Thing(backoff=<seconds>) is deprecated and goes in the next release: "
        "use backoff_ms=<milliseconds>",
        "Thing(timeout=<seconds>) is deprecated and goes in the next release: "
        "use timeout_ms=<milliseconds>",
    ]
    with (
        pytest.warns(DeprecationWarning, match="use timeout_ms="),
        pytest.raises(InvalidConfigError, match="timeout"),
    ):
        renamed_to_ms("Thing", "timeout", "5", None)
    with pytest.raises(InvalidConfigError, match="timeout_ms must be a finite number of at"):
        check_ms("Thing", "timeout_ms", -1)
    with pytest.raises(InvalidConfigError, match="timeout_ms must be a finite number greater"):
        check_ms("Thing", "timeout_ms", 0, above=True)
    with pytest.raises(InvalidConfigError, match="timeout_ms must be a number"):
        check_optional_ms("Thing", "timeout_ms", True)


def test_renamed_options_are_converted_once() -> None:
    with pytest.warns(DeprecationWarning, match="use request_timeout_ms="):
        options = renamed_options_to_ms(
            "Thing", {"request_timeout": 2, "send_buffer": 1}, RENAMED_TIMEOUTS
        )
    assert options == {"request_timeout_ms": 2000.0, "send_buffer": 1}
    with deprecations():
        untouched = {"request_timeout_ms": 5, "connect_timeout": None}
        assert renamed_options_to_ms("Thing", untouched, RENAMED_TIMEOUTS) == untouched


# -- Producer -----------------------------------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
def test_producer_connection_timeouts(old: bool) -> None:
    given = (
        {"request_timeout": 2.5, "connect_timeout": 0.25}
        if old
        else {"request_timeout_ms": 2500, "connect_timeout_ms": 250}
    )
    with warned("request_timeout_ms", "connect_timeout_ms", old=old):
        producer = Producer(brokers=STATIC, **given)
    options = producer._pool.connection_options
    assert (options["request_timeout_ms"], options["connect_timeout_ms"]) == (2500, 250)


CLOSE: dict[str, Callable[[Producer], Awaitable[None]]] = {
    "close(0.3)": lambda producer: producer.close(0.3),
    "close(timeout=0.3)": lambda producer: producer.close(timeout=0.3),
    "stop(timeout=0.3)": lambda producer: producer.stop(timeout=0.3),
    "close(timeout_ms=300)": lambda producer: producer.close(timeout_ms=300),
    "stop(timeout_ms=300)": lambda producer: producer.stop(timeout_ms=300),
}


@pytest.mark.parametrize("how", list(CLOSE))
async def test_producer_close_timeout(how: str) -> None:
    """A broker that never confirms: close gives up after 0.3 s, not 0.3 ms or 300 s
    (within it: the last fifth goes to failing what is left and closing)."""
    async with GarbageServer() as server:  # reads requests, never answers
        producer = Producer(brokers=f"0:{server.host}:{server.port}", retries=0, linger_ms=0)
        await producer.start()
        future = await producer.send("t", b"x")
        await eventually(lambda: server.requests, 10)  # written, waiting for its confirmation
        started = time.monotonic()
        closing = CLOSE[how](producer)
        with warned("timeout_ms", old="_ms" not in how), pytest.raises(KafkaError):
            await closing
        assert 0.2 <= time.monotonic() - started < 5
        assert isinstance(future.exception(), KafkaError)


# -- BrokerConnection and ConnectionPool ----------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
def test_broker_connection_timeouts(old: bool) -> None:
    given = (
        {"connect_timeout": 0.25, "request_timeout": 2}
        if old
        else {"connect_timeout_ms": 250, "request_timeout_ms": 2000}
    )
    with warned("connect_timeout_ms", "request_timeout_ms", old=old):
        conn = BrokerConnection(ADDRESS, **given)
    assert (conn.connect_timeout_ms, conn.request_timeout_ms) == (250, 2000)


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_broker_connection_times_out_and_closes_in_time(old: bool) -> None:
    """Through a socket: an unanswered request times out after 0.3 s; close() waits 0.2 s
    for outstanding answers."""
    async with GarbageServer() as server:
        address = BrokerAddress(None, server.host, server.port)
        with warned("request_timeout_ms", old=old):
            if old:
                conn = await BrokerConnection.open(address, request_timeout=0.3)
            else:
                conn = await BrokerConnection.open(address, request_timeout_ms=300)
        started = time.monotonic()
        with pytest.raises(KafkaError, match="within 300 ms"):
            await conn.offsets("t", 0, LATEST)
        assert 0.25 <= time.monotonic() - started < 5

        conn = await BrokerConnection.open(address, request_timeout_ms=30_000)
        requests = len(server.requests)
        pending = asyncio.ensure_future(conn.offsets("t", 0, LATEST))
        await eventually(lambda: len(server.requests) > requests, 10)  # outstanding
        started = time.monotonic()
        with warned("timeout_ms", old=old):
            await (conn.close(0.2) if old else conn.close(timeout_ms=200))
        assert 0.15 <= time.monotonic() - started < 5
        with pytest.raises(KafkaConnectionError):
            await pending


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_connection_pool_backoff_and_timeouts(old: bool) -> None:
    given: dict[str, Any] = (
        {"reconnect_backoff": (0.01, 0.02), "request_timeout": 1, "connect_timeout": 0.5}
        if old
        else {
            "reconnect_backoff_ms": (10, 20),
            "request_timeout_ms": 1000,
            "connect_timeout_ms": 500,
        }
    )
    with warned("reconnect_backoff_ms", "request_timeout_ms", "connect_timeout_ms", old=old):
        pool = ConnectionPool(**given)
    assert pool.reconnect_backoff_ms == (10.0, 20.0)
    assert pool.connection_options == {"request_timeout_ms": 1000, "connect_timeout_ms": 500}
    with warned("timeout_ms", old=old):
        await (pool.close(0.1) if old else pool.close(timeout_ms=100))


async def test_pool_connections_get_the_converted_timeouts(cluster: KafkaCluster) -> None:
    with deprecations("request_timeout_ms"):
        pool = ConnectionPool(request_timeout=0.75)
    async with pool:
        with deprecations():  # converted once, at construction
            conn = await pool.connection(address_of(cluster))
        assert conn.request_timeout_ms == 750


# -- SimpleConsumer -------------------------------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_simple_consumer_timeouts_and_poll_interval(old: bool, cluster: KafkaCluster) -> None:
    _, host, port = cluster.bootstrap[0]
    given = (
        {"request_timeout": 2, "connect_timeout": 0.5}
        if old
        else {"request_timeout_ms": 2000, "connect_timeout_ms": 500}
    )
    with warned("request_timeout_ms", "connect_timeout_ms", old=old):
        consumer = SimpleConsumer(host, port, **given)
    options = consumer._pool.connection_options
    assert (options["request_timeout_ms"], options["connect_timeout_ms"]) == (2000, 500)
    async with consumer:
        conn = await consumer.connection()
        await conn.produce("poll", 0, [b"first"])

        async def produce_later() -> None:
            await asyncio.sleep(0.3)
            await conn.produce("poll", 0, [b"later"])

        feeder = asyncio.ensure_future(produce_later())
        got: list[bytes] = []
        with warned("poll_interval_ms", old=old):
            # Polling every 50 ms (not 50 s, nor ending when caught up) finds the later one.
            messages = (
                consumer.messages("poll", 0, 0, poll_interval=0.05)
                if old
                else consumer.messages("poll", 0, 0, poll_interval_ms=50)
            )
            async with contextlib.aclosing(messages):
                async for record in messages:
                    got.append(record.value)
                    if len(got) == 2:
                        break
        await feeder
    assert got == [b"first", b"later"]


# -- Cluster ----------------------------------------------------------------------------


WAIT_FOR: dict[str, Callable[[Cluster, int], Awaitable[None]]] = {
    "positional": lambda cluster, broker: cluster.wait_for(lambda c: broker in c.brokers, 0.2),
    "timeout=": lambda cluster, broker: cluster.wait_for(
        lambda c: broker in c.brokers, timeout=0.2
    ),
    "timeout_ms=": lambda cluster, broker: cluster.wait_for(
        lambda c: broker in c.brokers, timeout_ms=200
    ),
}


@pytest.mark.parametrize("how", list(WAIT_FOR))
async def test_cluster_wait_for(how: str) -> None:
    old = how != "timeout_ms="
    async with StaticCluster(STATIC) as cluster:
        with warned("timeout_ms", old=old):
            await WAIT_FOR[how](cluster, 0)
        started = time.monotonic()
        waiting = WAIT_FOR[how](cluster, 1)
        with warned("timeout_ms", old=old), pytest.raises(ClusterTimeoutError, match="200 ms"):
            await waiting
        assert 0.15 <= time.monotonic() - started < 5
        with pytest.raises(InvalidConfigError, match="timeout_ms"):
            await cluster.wait_for(lambda c: True)


# -- KafkaHandler -------------------------------------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
def test_kafka_handler_timeouts(old: bool) -> None:
    """Kafka unreachable: a flush gives up after 0.3 s (a plain thread may wait)."""
    given: dict[str, Any] = (
        {"flush_timeout": 0.5, "close_timeout": 1, "producer_options": {"request_timeout": 2}}
        if old
        else {
            "flush_timeout_ms": 500,
            "close_timeout_ms": 1000,
            "producer_options": {"request_timeout_ms": 2000},
        }
    )
    with warned("flush_timeout_ms", "close_timeout_ms", "request_timeout_ms", old=old):
        handler = KafkaHandler("t", brokers=f"0:127.0.0.1:{unused_port()}", **given)
    logger = logging.getLogger(f"{__name__}.handler")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        assert (handler.flush_timeout_ms, handler.close_timeout_ms) == (500, 1000)
        assert handler.producer_options == {"request_timeout_ms": 2000}
        logger.error("undeliverable")
        started = time.monotonic()
        with warned("timeout_ms", old=old):
            delivered = (
                handler.wait_delivered(0.3) if old else handler.wait_delivered(timeout_ms=300)
            )
        assert delivered is False
        assert 0.25 <= time.monotonic() - started < 5
    finally:
        logger.removeHandler(handler)
        handler.close()


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_kafka_handler_aflush_timeout(old: bool) -> None:
    handler = KafkaHandler("t", brokers=f"0:127.0.0.1:{unused_port()}", close_timeout_ms=500)
    try:
        handler.handle(logging.makeLogRecord({"msg": "undeliverable"}))
        started = time.monotonic()
        with warned("timeout_ms", old=old):
            flushed = await (handler.aflush(0.3) if old else handler.aflush(timeout_ms=300))
        assert flushed is False
        assert 0.25 <= time.monotonic() - started < 5
    finally:
        await handler.aclose()


# -- the group Consumer -------------------------------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
def test_group_consumer_request_timeout(old: bool) -> None:
    with warned("request_timeout_ms", old=old):
        if old:
            consumer = Consumer("t", group="g", zookeeper=ZK, request_timeout=2.5)
        else:
            consumer = Consumer("t", group="g", zookeeper=ZK, request_timeout_ms=2500)
    assert consumer._pool.connection_options["request_timeout_ms"] == 2500
    assert consumer._zk.operation_timeout_ms == 2500
    assert consumer._request_timeout == 2.5  # the rebalance listener's bound, in seconds


# -- aiokafka07.testing ------------------------------------------------------------------


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
def test_zookeeper_server_timeouts(old: bool) -> None:
    with warned("startup_timeout_ms", old=old):
        server = (
            ZooKeeperServer(startup_timeout=5) if old else ZooKeeperServer(startup_timeout_ms=5000)
        )
    try:
        assert server.startup_timeout_ms == 5000
        with warned("timeout_ms", old=old):
            if old:
                server.stop(2)
            else:
                server.stop(timeout_ms=2000)
    finally:
        server.close()


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_expire_session_timeout(old: bool, zookeeper_server: ZooKeeperServer) -> None:
    connect = zookeeper_server.connect_string
    expiring = (
        expire_session(connect, 0x5EED, b"\0" * 16, timeout=10)
        if old
        else expire_session(connect, 0x5EED, b"\0" * 16, timeout_ms=10_000)
    )
    with warned("timeout_ms", old=old), pytest.raises(ValueError, match="session"):
        await expiring


@pytest.mark.parametrize("old", [True, False], ids=[OLD, NEW])
async def test_broker_process_timeouts(old: bool, tmp_path: Path) -> None:
    with warned("timeout_ms", old=old):
        if old:
            process, _ = await start_broker_process(tmp_path, timeout=60)
        else:
            process, _ = await start_broker_process(tmp_path, timeout_ms=60_000)
    with warned("timeout_ms", old=old):
        if old:
            code = await stop_broker_process(process, 10)
        else:
            code = await stop_broker_process(process, timeout_ms=10_000)
    assert code == 0
