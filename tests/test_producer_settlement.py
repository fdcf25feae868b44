"""Confirmation without a stalled pipeline, outcomes that are true after a connection
breaks, and the delivery timeout: the producer against brokers that flush as 0.7.2's
shipped ``server.properties`` (a flush every 10,000 messages or about every second).

* the verdicts a log end gives on produces a closed connection left open are sound with
  any writers and exact with one (a property over random histories);
* confirmations trail the writes: far more requests go out than ``max_in_flight``
  before the first confirmation comes;
* a broker that crashes and comes back on its recovered log: every message ends
  delivered, each in the log exactly once, in both ``on_unconfirmed`` modes;
* a broken connection to a broker that lives on: nothing that may be in the log is
  reported absent (``"fail"``: unknown), nothing is lost (``"retry"``);
* the delivery timeout: messages for an unreachable broker end on time with the cause.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.errors import (
    DeliveryTimeoutError,
    DeliveryUnknownError,
    InvalidConfigError,
    KafkaConnectionError,
    ProducerClosedError,
    UnsettledClaim,
)
from aiokafka07.producer import Producer
from aiokafka07.producer.settlement import Verdict, verdict
from aiokafka07.testing import KafkaCluster
from aiokafka07.testing.hostile import SilentBroker

from .garbage_server import LoopbackServer, until_one_ends
from .test_producer import all_values, read_logs
from .wire import eventually

# -- the verdicts ------------------------------------------------------------------------


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=30),
    data=st.data(),
    base=st.integers(min_value=0, max_value=10**9),
    others=st.integers(min_value=0, max_value=5000),
)
def test_verdicts_are_sound_with_any_writers_and_exact_with_one(
    sizes: list[int], data: st.DataObject, base: int, others: int
) -> None:
    """One connection wrote produces of ``sizes`` bytes in order from ``base``; a broker
    processes them in order, so the log holds a prefix of them (``appended``), plus what
    other writers appended (``others``). Read with a complete view: a produce is never
    called absent while it is in the log, and with no other writer every produce is
    decided, rightly."""
    appended = data.draw(st.integers(min_value=0, max_value=len(sizes)))
    end = base + sum(sizes[:appended]) + others
    written = 0
    for index, size in enumerate(sizes):
        claim = UnsettledClaim("t", 0, range(0, 1), base, written, written + size)
        written += size
        found = verdict(claim, end, complete=True)
        if found is Verdict.ABSENT:
            assert index >= appended  # sound: never absent while in the log
        if others == 0:
            assert found is (Verdict.APPENDED if index < appended else Verdict.ABSENT)
        # Without a complete view nothing is ever called absent.
        assert verdict(claim, end, complete=False) is not Verdict.ABSENT
        # A processed produce (appended, unless dropped) on a broker that lived on waits
        # to show, until its confirmation would have given up: never absent.
        processed = claim._replace(processed=True, deadline=100.0)
        found = verdict(processed, end, complete=False, now=50.0)
        later = verdict(processed, end, complete=False, now=100.0)
        assert Verdict.ABSENT not in (found, later)
        if others == 0:
            assert found is (Verdict.APPENDED if index < appended else Verdict.PENDING)
            assert later is (Verdict.APPENDED if index < appended else Verdict.NOT_SHOWN)
    unread = UnsettledClaim("t", 0, range(0, 1), None, 0, sizes[0])
    assert verdict(unread, end, complete=True) is Verdict.UNKNOWN


# -- helpers -----------------------------------------------------------------------------


async def log_counts(cluster: KafkaCluster, topic: str) -> collections.Counter[bytes]:
    """How often each payload is in the logs of ``topic`` on every broker."""
    return collections.Counter(all_values(await read_logs(cluster, topic)))


class CuttableProxy(LoopbackServer):
    """A TCP proxy on loopback in front of a broker; :meth:`cut` aborts every
    connection through it (both sides), the broker living on: a broken network path."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.target = (host, port)
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []

    def cut(self) -> None:
        for client, upstream in self._pairs:
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._pairs.append((writer, up_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(1 << 16):
                sink.write(data)
                await sink.drain()

        pipes = [
            asyncio.create_task(pipe(reader, up_writer)),
            asyncio.create_task(pipe(up_reader, writer)),
        ]
        await until_one_ends(pipes, up_writer)


def values(count: int, tag: str) -> list[bytes]:
    return [b"%s-%07d" % (tag.encode(), i) + b"." * 60 for i in range(count)]


# -- confirmation trails the writes ------------------------------------------------------


async def test_confirmations_trail_without_holding_the_writes(kafka_cluster: Any) -> None:
    """Against 0.7.2's shipped flush (every 10,000 messages), a producer writes at least
    10 requests of 1,000 messages (one batch each, here) before its first confirmation
    can come: a request holds one of its ``max_in_flight`` (5) places until the broker
    processed it, not until its flush (which held 5 requests, so that every 5,000
    messages waited for the flush timer)."""
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(brokers=cluster.broker_list, max_request_bytes=1) as producer:
            first: list[int] = []

            def noted(_: asyncio.Future[Any]) -> None:
                if not first:
                    first.append(producer.metrics.requests_sent)

            futures = []
            for value in values(12_000, "trail"):
                future = await producer.send("trail", value)
                future.add_done_callback(noted)
                futures.append(future)
            await asyncio.gather(*futures)
        assert producer.max_in_flight == 5
        assert first
        assert first[0] >= 10, first
        assert producer.metrics.messages_sent == 12_000


# -- a broker that crashes and comes back ------------------------------------------------


@pytest.mark.parametrize("policy", ["retry", "fail"])
async def test_a_broker_back_on_its_recovered_log_settles_every_message_exactly(
    kafka_cluster: Any, policy: str
) -> None:
    """The broker crashes (sockets dropped, nothing flushed, as a killed process) with
    thousands of messages written and unconfirmed, and comes back on its port and log a
    moment later. Its connection attempts refused meanwhile prove the old process gone,
    so the log end read once it answers again settles each request: appended (delivered)
    or absent (sent again, safe in both modes). Every message is delivered, and is in
    the log exactly once."""
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        producer = Producer(brokers=cluster.broker_list, on_unconfirmed=policy)
        await producer.start()
        sent = values(40_000, policy)
        futures = [await producer.send("crash", value) for value in sent[:25_000]]
        # Confirmed by a count-based flush (every 10,000 messages); then more, which wait
        # for the next flush when the broker crashes.
        await eventually(lambda: producer.metrics.messages_sent >= 10_000, 10)
        futures += [await producer.send("crash", value) for value in sent[25_000:30_000]]
        unconfirmed = sum(not f.done() for f in futures)
        await cluster.crash_broker(0)
        # Connection attempts are refused while it is away.
        await eventually(
            lambda: sum(b.connect_failures for b in producer.pool_metrics.brokers.values()), 10
        )
        await cluster.start_broker(0)
        futures += [await producer.send("crash", value) for value in sent[30_000:]]
        assert unconfirmed >= 5_000
        done, pending = await asyncio.wait(futures, timeout=60)
        assert not pending
        failures = [f.exception() for f in done if f.exception() is not None]
        assert failures == []
        await producer.close()
        metrics = producer.metrics
        assert metrics.settled > 0  # some requests were settled from the log end
        assert (metrics.messages_failed, metrics.messages_unknown) == (0, 0)
        seen = await log_counts(cluster, "crash")
        assert [v for v in sent if seen[v] != 1] == []  # each exactly once
        assert sum(seen.values()) == len(sent)


# -- a broken connection to a broker that lives on ---------------------------------------


@pytest.mark.parametrize("policy", ["retry", "fail"])
async def test_a_cut_connection_to_a_live_broker_never_calls_absent_what_may_be_there(
    kafka_cluster: Any, policy: str
) -> None:
    """The network path is cut (both sides aborted) while the broker lives on, with
    messages written and unconfirmed. Those the broker was proven to have processed are
    waited for, nothing new being written, until its next flush shows them: delivered.
    For the others, it may hold appended bytes whose answers it never sent, so the log
    end cannot prove them absent: with ``"fail"`` they fail as unknown (and every message
    that fails is unknown, never "not appended"), with ``"retry"`` they are sent again,
    and every message is delivered (duplicates only of messages unconfirmed at the
    cut)."""
    # 0.7.2's shipped flush count, and its code default timer (3 s): what follows the
    # last count-based flush stays unflushed a few seconds, long enough to be cut.
    async with kafka_cluster(
        1,
        zookeeper=None,
        flush="shipped",
        log_default_flush_interval_ms=3000,
        log_default_flush_scheduler_interval_ms=3000,
    ) as cluster:
        broker = cluster.broker(0)
        async with CuttableProxy(broker.host, broker.port) as proxy:
            producer = Producer(
                brokers=f"0:{proxy.host}:{proxy.port}",
                on_unconfirmed=policy,
                max_request_bytes=1,  # a batch of 1,000 per request: flushes at 10k, 20k
            )
            await producer.start()
            sent = values(30_000, "cut" + policy)
            # Confirmed by the second count-based flush (every 10,000 messages), before
            # more is written: a flush running late would cover what came meanwhile.
            futures = [await producer.send("cut", value) for value in sent[:20_000]]
            await eventually(lambda: producer.metrics.messages_sent >= 20_000, 10)
            # Then 5,000 written and proven processed (their places freed: a reading
            # of the log end behind them was answered), which wait for the timer when
            # the path is cut; then more.
            futures += [await producer.send("cut", value) for value in sent[20_000:25_000]]
            sender = producer._sender
            await eventually(
                lambda: producer.metrics.requests_sent >= 25 and not sender._in_flight[0], 10
            )
            futures += [await producer.send("cut", value) for value in sent[25_000:]]
            confirmed_at_cut = {j for j, f in enumerate(futures) if f.done()}
            proxy.cut()
            assert 20_000 <= len(confirmed_at_cut) < len(sent)
            _, pending = await asyncio.wait(futures, timeout=60)
            assert not pending
            (closing,) = await asyncio.gather(producer.close(), return_exceptions=True)
            if closing is not None:
                assert isinstance(closing, ProducerClosedError)
                assert closing.undelivered == closing.unknown  # only unknown outcomes fail
            # Requests the broker had processed, unflushed at the cut, were waited for
            # (nothing new written meanwhile) until its flush showed them: delivered.
            assert producer.metrics.settled > 0
        seen = await log_counts(cluster, "cut")
        outcomes = [f.exception() for f in futures]
        for index, error in enumerate(outcomes):
            if error is None:
                assert seen[sent[index]] >= 1, index  # delivered: in the log
            else:
                assert isinstance(error, DeliveryUnknownError), repr(error)
        if policy == "fail":
            assert max(seen.values()) == 1  # at most once
            assert producer.metrics.messages_failed == 0
            assert producer.metrics.messages_unknown == sum(e is not None for e in outcomes)
        else:
            assert all(error is None for error in outcomes)  # at least once: all delivered
            twice = {v for v, n in seen.items() if n > 1}
            assert not twice & {sent[j] for j in confirmed_at_cut}  # confirmed: never again


# -- the delivery timeout ----------------------------------------------------------------


def refusing_port() -> tuple[socket.socket, int]:
    """A port bound and not listening: connections to it are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


async def test_messages_for_an_unreachable_broker_end_at_their_delivery_timeout() -> None:
    """Without a cap on the attempts, messages for a broker that refuses connections are
    retried until their delivery timeout, then fail with DeliveryTimeoutError (not in
    the log), the last attempt's error as the cause, on time."""
    sock, port = refusing_port()
    with sock:
        producer = Producer(
            brokers=f"0:127.0.0.1:{port}", request_timeout_ms=300, delivery_timeout_ms=1500
        )
        await producer.start()
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        futures = [await producer.send("t", b"m%d" % i, partition=(0, 0)) for i in range(50)]
        await asyncio.wait(futures, timeout=10)
        took = loop.time() - sent_at
        failed = await asyncio.wait_for(
            asyncio.gather(producer.close(), return_exceptions=True), 10
        )
    assert 1.5 <= took < 1.5 + 1.5, took  # the sweep runs every 75 ms; slack for load
    for future in futures:
        error = future.exception()
        assert isinstance(error, DeliveryTimeoutError), repr(error)
        assert isinstance(error.last_error, KafkaConnectionError)
        assert error.__cause__ is error.last_error
        assert "refused" in str(error.last_error).lower() or "connect" in str(error.last_error)
    assert producer.metrics.retries > 50  # tried again and again inside the timeout
    assert (producer.metrics.messages_failed, producer.metrics.messages_unknown) == (50, 0)
    assert isinstance(failed[0], ProducerClosedError)
    assert failed[0].unknown == 0


async def test_messages_written_and_never_confirmed_end_unknown_at_their_timeout() -> None:
    """A broker that takes the bytes and never answers: the messages were written, so at
    their delivery timeout they fail as unknown (they may be in its log), on time."""
    async with SilentBroker() as broker:
        producer = Producer(
            brokers=broker.broker_list, request_timeout_ms=5000, delivery_timeout_ms=6000
        )
        await producer.start()
        started = time.monotonic()
        future = await producer.send("t", b"x", partition=(0, 0))
        await asyncio.wait([future], timeout=20)
        took = time.monotonic() - started
        await asyncio.gather(producer.close(timeout_ms=1000), return_exceptions=True)
    error = future.exception()
    assert isinstance(error, DeliveryUnknownError), repr(error)
    assert error.maybe_delivered
    assert 5.0 <= took < 6.0 + 2.0, took
    assert producer.metrics.messages_unknown == 1


def test_the_delivery_timeout_is_checked_against_linger_and_request_timeout() -> None:
    with pytest.raises(InvalidConfigError, match="delivery_timeout_ms"):
        Producer(brokers="0:127.0.0.1:1", delivery_timeout_ms=1000, request_timeout_ms=2000)
    with pytest.raises(InvalidConfigError, match="delivery_timeout_ms"):
        Producer(brokers="0:127.0.0.1:1", delivery_timeout_ms=0)
    assert Producer(brokers="0:127.0.0.1:1").delivery_timeout_ms == 120_000
    # Not given: never shorter than a request may take.
    long = Producer(brokers="0:127.0.0.1:1", request_timeout_ms=200_000, linger_ms=10)
    assert long.delivery_timeout_ms == 200_010
    assert Producer(brokers="0:127.0.0.1:1").retries is None
