"""A producer at its defaults through broker outages: real ZooKeeper, brokers in processes
of their own flushing as 0.7.2's shipped ``server.properties`` (a flush every 10,000
messages or about every second), keyed messages.

* a broker SIGKILLed mid-send and restarted on its port and recovered log (away for as
  long as its dead session's registration takes to expire): nothing fails, nothing is
  lost, nothing confirmed before the kill is sent twice; with ``on_unconfirmed="fail"``
  every message reported not appended is absent from the logs, and none is there twice;
* a broker away for 30 s: nothing fails (the default delivery timeout is 120 s);
* a broker away for good, past the delivery timeout: exactly the messages pinned to it
  fail, on time, each with the error that says why (not appended, or unknown).
"""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import SimpleConsumer
from aiokafka07.connection import BrokerAddress
from aiokafka07.errors import (
    DeliveryTimeoutError,
    DeliveryUnknownError,
    KafkaConnectionError,
    ProducerClosedError,
)
from aiokafka07.producer import Producer
from aiokafka07.protocol import EARLIEST, LATEST
from aiokafka07.testing.flush import flush_properties
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.znodes import read_brokers
from aiokafka07.zookeeper import ZooKeeper

from .wire import eventually

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")

TOPIC = "outage"
PARTITIONS = 2


class Brokers:
    """Two broker processes (ids 0 and 1) registered in ``zookeeper``, flushing as 0.7.2
    ships, each restartable on its port and log directory."""

    def __init__(self, zookeeper: str, root: Path) -> None:
        self.zookeeper = zookeeper
        self.root = root
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self.addresses: dict[int, BrokerAddress] = {}

    async def start(self, broker_id: int) -> None:
        previous = self.addresses.get(broker_id)
        self.processes[broker_id], self.addresses[broker_id] = await start_broker_process(
            self.root / f"broker-{broker_id}",
            broker_id=broker_id,
            partitions=PARTITIONS,
            zookeeper=self.zookeeper,
            port=previous.port if previous else 0,
            settings=flush_properties("shipped"),
        )

    async def kill(self, broker_id: int) -> None:
        """SIGKILL: no clean stop, sockets reset by the kernel, nothing flushed."""
        process = self.processes[broker_id]
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async def restart(self, broker_id: int, zk: ZooKeeper) -> None:
        """Back on its port and recovered log, once its dead session's registration is
        gone (a 0.7.2 broker refuses to start while it is there)."""

        async def unregistered() -> bool:
            return broker_id not in await read_brokers(zk)

        await eventually(unregistered, timeout=30)
        await self.start(broker_id)

    async def stop(self) -> None:
        for process in self.processes.values():
            await stop_broker_process(process, timeout_ms=10_000)

    async def counts(self) -> collections.Counter[bytes]:
        """How often each payload is in the logs of TOPIC, on both brokers."""
        seen: collections.Counter[bytes] = collections.Counter()
        for address in self.addresses.values():
            async with SimpleConsumer(address.host, address.port) as consumer:
                for partition in range(PARTITIONS):
                    (end,) = await consumer.offsets_before(TOPIC, partition, LATEST)
                    (start,) = await consumer.offsets_before(TOPIC, partition, EARLIEST)
                    async for record in consumer.messages(TOPIC, partition, start, end_offset=end):
                        seen[record.value] += 1
        return seen


@asynccontextmanager
async def two_brokers(zookeeper: str, root: Path) -> AsyncIterator[Brokers]:
    brokers = Brokers(zookeeper, root)
    try:
        for broker_id in (0, 1):
            await brokers.start(broker_id)
        yield brokers
    finally:
        await brokers.stop()


def payload(i: int) -> bytes:
    return b"m%07d" % i + b"." * 92  # 100 bytes


async def outcomes(
    futures: list[asyncio.Future[Any]], timeout: float
) -> list[BaseException | None]:
    """Each future's exception (None: delivered), once all ended; a hang fails."""
    _, pending = await asyncio.wait(futures, timeout=timeout)
    assert not pending, f"{len(pending)} messages never ended"
    return [f.exception() for f in futures]


@pytest.mark.parametrize("policy", ["retry", "fail"])
async def test_a_broker_killed_and_restarted_mid_send_at_defaults(
    zookeeper: str, tmp_path: Path, policy: str
) -> None:
    count, kill_at = 200_000, 100_000
    async with (
        two_brokers(zookeeper, tmp_path) as brokers,
        ZooKeeper(zookeeper) as zk,
        Producer(zookeeper=zookeeper, on_unconfirmed=policy) as producer,
    ):
        await asyncio.wait_for(producer.send_and_wait(TOPIC, b"warm", key=0), 30)
        futures: list[asyncio.Future[Any]] = []
        restart: asyncio.Task[None] | None = None
        confirmed_before: set[int] = set()
        for i in range(count):
            futures.append(await producer.send(TOPIC, payload(i), key=i % 1000))
            if i == kill_at:
                confirmed_before = {j for j, f in enumerate(futures) if f.done()}
                await brokers.kill(1)
                restart = asyncio.create_task(brokers.restart(1, zk))
        assert restart is not None
        await restart
        ended = await outcomes(futures, 150)
        closing = await asyncio.gather(producer.close(), return_exceptions=True)
        seen = await brokers.counts()
    metrics = producer.metrics
    twice = {i for i in range(count) if seen[payload(i)] > 1}
    if policy == "retry":
        assert [e for e in ended if e is not None] == []  # 0 failed
        assert closing == [None]
        assert [i for i in range(count) if seen[payload(i)] == 0] == []  # 0 lost
        assert not twice & confirmed_before  # duplicates only of unconfirmed messages
    else:
        assert twice == set()  # at most once
        for i, error in enumerate(ended):
            if error is None:
                assert seen[payload(i)] == 1, i  # delivered: in the log, once
            elif not isinstance(error, KafkaConnectionError) or not error.maybe_delivered:
                assert seen[payload(i)] == 0, (i, error)  # "not appended" is true
            else:
                assert isinstance(error, DeliveryUnknownError), repr(error)
        if closing != [None]:
            assert isinstance(closing[0], ProducerClosedError)
            assert closing[0].undelivered == sum(e is not None for e in ended)
    assert metrics.messages_failed == 0  # nothing proven absent failed: it was sent again
    # The kill left requests written and unconfirmed; the log ends settled them.
    assert metrics.settled > 0


@pytest.mark.slow  # 30 s of outage
async def test_a_broker_away_for_30_s_fails_nothing_at_defaults(
    zookeeper: str, tmp_path: Path
) -> None:
    async with (
        two_brokers(zookeeper, tmp_path) as brokers,
        ZooKeeper(zookeeper) as zk,
        Producer(zookeeper=zookeeper) as producer,
    ):
        await asyncio.wait_for(producer.send_and_wait(TOPIC, b"warm", key=0), 30)
        futures = [await producer.send(TOPIC, payload(i), key=i % 1000) for i in range(20_000)]
        await brokers.kill(1)
        killed = time.monotonic()
        i = 20_000
        # Keep sending through the outage, about 2,000 messages a second.
        while time.monotonic() - killed < 30:
            for _ in range(200):
                futures.append(await producer.send(TOPIC, payload(i), key=i % 1000))
                i += 1
            await asyncio.sleep(0.1)
        await brokers.restart(1, zk)
        ended = await outcomes(futures, 120)
        await producer.close()
        seen = await brokers.counts()
    assert [e for e in ended if e is not None] == []
    assert [j for j in range(i) if seen[payload(j)] == 0] == []
    assert producer.metrics.retries > 0  # its messages waited, and went again


async def test_messages_for_a_broker_gone_past_the_delivery_timeout_fail_on_time(
    zookeeper: str, tmp_path: Path
) -> None:
    """Messages pinned to each broker; broker 1 is killed for good. Every message for
    broker 0 is delivered; every message for broker 1 not confirmed by then fails within
    its delivery timeout of its send() (give or take the sweep and a loaded machine),
    with DeliveryTimeoutError (not appended, the cause attached) or, if it was written
    and never settled, DeliveryUnknownError."""
    # A request may wait for a flush (about 2 s at most here): the request timeout, which
    # also bounds a confirmation, leaves room for it.
    timeout_ms = 6000
    async with (
        two_brokers(zookeeper, tmp_path) as brokers,
        Producer(
            zookeeper=zookeeper, request_timeout_ms=4000, delivery_timeout_ms=timeout_ms
        ) as producer,
    ):
        await asyncio.wait_for(
            producer.send_and_wait(TOPIC, b"warm", partition=(1, 0)), 30
        )  # broker 1 has the topic
        loop = asyncio.get_running_loop()
        sent_at: list[float] = []
        ended_at: dict[int, float] = {}
        futures: list[asyncio.Future[Any]] = []
        targets: list[int] = []

        def record(index: int) -> Any:
            return lambda _: ended_at.setdefault(index, loop.time())

        async def send(i: int, broker_id: int) -> None:
            future = await producer.send(TOPIC, payload(i), partition=(broker_id, i % 2))
            sent_at.append(loop.time())
            future.add_done_callback(record(len(futures)))
            futures.append(future)
            targets.append(broker_id)

        for i in range(4000):
            await send(i, i % 2)
        await brokers.kill(1)
        for i in range(4000, 8000):
            await send(i, i % 2)
            if i % 500 == 0:
                await asyncio.sleep(0.05)
        ended = await outcomes(futures, 60)
        closing = await asyncio.gather(producer.close(), return_exceptions=True)
    timeout = timeout_ms / 1000
    late = []
    for index, error in enumerate(ended):
        if targets[index] == 0:
            assert error is None, repr(error)
            continue
        if error is None:
            continue  # confirmed before the kill
        assert isinstance(error, (DeliveryTimeoutError, DeliveryUnknownError)), repr(error)
        if isinstance(error, DeliveryTimeoutError):
            assert error.last_error is not None  # why its last attempt failed
        else:
            assert error.__cause__ is not None
        # Never after its own deadline (give or take the sweep and a loaded machine), nor
        # more than the batch's span (at most a second, the producer guide says) before.
        took = ended_at[index] - sent_at[index]
        if not timeout - 1.5 <= took <= timeout + 1.5:
            late.append((index, took))
    assert late == []
    failed = [i for i, e in enumerate(ended) if e is not None]
    assert failed
    # A batch ends at its first message's deadline, with every message of it: a later one
    # sooner than its own (a batch for an unreachable broker takes messages until it is
    # full or the sweep closes it, over 0.5 s on a loaded machine). So the messages that
    # ended together (within 50 ms) are held to the deadline of the first sent of them:
    # none ended before it (nothing fails early), nor long after it.
    ends = sorted(failed, key=lambda i: ended_at[i])
    groups = [[ends[0]]]
    for index in ends[1:]:
        if ended_at[index] - ended_at[groups[-1][-1]] > 0.05:
            groups.append([])
        groups[-1].append(index)
    early = []
    for group in groups:
        first = min(sent_at[i] for i in group)
        took = min(ended_at[i] for i in group) - first
        if not timeout - 0.5 <= took <= timeout + 1.5:
            early.append((group[0], len(group), took))
    assert early == []
    assert all(targets[i] == 1 for i in failed)
    assert isinstance(closing[0], ProducerClosedError)
    assert closing[0].undelivered == len(failed)
