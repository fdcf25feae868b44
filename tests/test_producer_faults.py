"""Every message the producer accepted ends, delivered or failed with a typed error, and
close() returns in time, whatever the broker answers (through real sockets: a fake broker
on loopback plays malformed confirmations, garbage or silence) and whatever the caller
does (bad partition pairs, an interrupted flush, an exception in the ``async with``
block)."""

from __future__ import annotations

import asyncio
import collections
import random
import socket
import struct
import time
from typing import Any

import pytest

from aiokafka07.errors import (
    DeliveryUnknownError,
    InvalidPartitionError,
    KafkaConnectionError,
    KafkaError,
    ProduceNotConfirmedError,
    ProducerClosedError,
    QueueFullError,
    RequestTimeoutError,
)
from aiokafka07.producer import Producer, ProduceResult
from aiokafka07.protocol import Message, entry_size
from aiokafka07.testing.hostile import SilentBroker

from .garbage_server import GarbageServer, Reply, frame
from .test_connection import offsets_frame, outcome
from .test_producer import all_values, read_logs
from .wire import eventually

FAST = {
    "request_timeout_ms": 500,
    "retries": 1,
    "retry_backoff_ms": 10,
    "linger_ms": 0,
    "delivery_timeout_ms": 3000,
}


def static(server: GarbageServer) -> str:
    return f"0:{server.host}:{server.port}"


async def closed_in_time(producer: Producer, timeout: float, bound: float) -> Exception | None:
    """Close; assert it returned within ``bound`` seconds; return what it raised."""
    started = time.monotonic()
    result = await outcome(producer.close(timeout_ms=timeout * 1000), bound + 5)
    assert time.monotonic() - started < bound
    return result


#: An OFFSETS answer showing the log grown by one entry of one byte, b"x": proof.
GROWN = entry_size(1)
#: A FETCH answer with no error and no data: the partition exists.
FETCH_EMPTY = frame(b"\0\0")
#: What a connection opened after one that closed before confirming a produce reads
#: first, before it writes again: the partition exists, its log end (nothing appended).
SETTLE = [Reply(FETCH_EMPTY), Reply(offsets_frame(0))]

# What a "broker" may answer to the OFFSETS probe that confirms a produce (the log end
# before it was 0), what the message then ends with, and whether it was sent again. Six
# of these made send_and_wait() hang before the producer caught every outcome.
CONFIRM_ANSWERS: dict[str, tuple[Reply, type[Exception] | None, bool]] = {
    "size 0": (Reply(struct.pack(">i", 0)), ProduceNotConfirmedError, True),
    "size 1": (Reply(frame(b"\0")), ProduceNotConfirmedError, True),
    "negative size": (Reply(struct.pack(">i", -5) + b"\0" * 8), ProduceNotConfirmedError, True),
    "huge size": (
        Reply(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 64),
        ProduceNotConfirmedError,
        True,
    ),
    "more offsets than asked": (Reply(offsets_frame(1, 2)), ProduceNotConfirmedError, True),
    "truncated, then close": (
        Reply(offsets_frame(GROWN)[:-3], close=True),
        ProduceNotConfirmedError,
        True,
    ),
    "body without a count": (Reply(frame(b"\0\0\0")), ProduceNotConfirmedError, True),
    "negative count": (Reply(frame(b"\0\0\xff\xff\xff\xff")), ProduceNotConfirmedError, True),
    "count without offsets": (Reply(frame(b"\0\0\0\0\0\x01")), ProduceNotConfirmedError, True),
    "random bytes": (Reply(random.Random(7).randbytes(23)), ProduceNotConfirmedError, True),
    "close without a byte": (Reply(close=True), ProduceNotConfirmedError, True),
    "silence": (Reply(), RequestTimeoutError, True),
    # Processed, and the log did not grow: what a broker does with a message over its
    # max.message.size. Not sent again: it would be dropped again.
    "no growth": (Reply(offsets_frame(0)), ProduceNotConfirmedError, False),
    # The log grew by the message: proof, whatever follows it.
    "an answer, then an unasked one": (
        Reply(offsets_frame(GROWN) + offsets_frame(GROWN + 1)),
        None,
        False,
    ),
    "an error code": (Reply(frame(b"\xff\xff\0\0\0\x01" + struct.pack(">q", GROWN))), None, False),
}


@pytest.mark.parametrize("case", list(CONFIRM_ANSWERS))
async def test_every_kind_of_confirm_answer_ends_the_message(case: str) -> None:
    reply, expected, retried = CONFIRM_ANSWERS[case]
    # Each connection: the log end before the first produce (0), nothing for the produce,
    # the answer under test; then the same for produces sent again on that connection.
    # A connection after one that closed first settles it: the log end shows nothing,
    # and the "broker" lived on, so whether it appended the produce stays unknown.
    first = [Reply(offsets_frame(0)), *[Reply(), reply] * 3]
    async with GarbageServer(first, [*SETTLE, *first]) as server:
        producer = Producer(brokers=static(server), **FAST)  # type: ignore[arg-type]
        await producer.start()
        result = await outcome(producer.send_and_wait("t", b"x", partition=(0, 0)))
        failed = await closed_in_time(producer, timeout=2, bound=4)
    metrics = producer.metrics
    assert (metrics.queued_messages, metrics.queued_bytes) == (0, 0)
    if expected is None:
        assert isinstance(result, ProduceResult)
        assert failed is None
        return
    assert isinstance(result, expected), repr(result)
    assert result.maybe_delivered  # written, never confirmed
    assert (metrics.messages_failed, metrics.messages_unknown) == (0, 1)
    assert metrics.retries == (1 if retried else 0)  # retries=1, then failed
    assert isinstance(failed, ProducerClosedError)
    assert (failed.undelivered, failed.unknown) == (1, 1)
    # The report names the place and carries the cause's own text.
    assert f"t/0-0: 1 x {type(result).__name__}: {result}" in str(failed)


async def test_failed_messages_give_their_buffer_space_back() -> None:
    """Three messages the broker never confirms must not block later sends."""
    async with GarbageServer([Reply(), Reply(struct.pack(">i", 0))], SETTLE) as server:
        producer = Producer(
            brokers=static(server), max_buffered_messages=3, on_unconfirmed="fail", **FAST
        )
        await producer.start()
        futures = [producer.send_nowait("t", b"%d" % i, partition=(0, 0)) for i in range(3)]
        with pytest.raises(QueueFullError):
            producer.send_nowait("t", b"one too many")
        for future in futures:
            assert isinstance(await outcome(future), DeliveryUnknownError)
        assert (producer.metrics.messages_failed, producer.metrics.messages_unknown) == (0, 3)
        assert producer.metrics.queued_messages == 0
        later = await outcome(producer.send("t", b"later"), 2)
        assert isinstance(later, asyncio.Future)
        assert isinstance(await closed_in_time(producer, timeout=2, bound=4), ProducerClosedError)
        assert isinstance(await outcome(later), KafkaError)


BAD_PARTITIONS: list[Any] = [
    (0, -5),
    (0, 2**31),
    (-1, 0),
    (2**31, 0),
    ("0", 1),
    (0, 1.5),
    (True, 0),
    (0,),
    (0, 1, 2),
    "01",
    7,
    None.__class__,
]


@pytest.mark.parametrize("partition", BAD_PARTITIONS, ids=repr)
async def test_bad_partition_pairs_are_refused_at_send(kafka_cluster: Any, partition: Any) -> None:
    # Flushed per request: these check what send() refuses or what a bug fails, and
    # each case confirms its messages at once (0.7.2's shipped flush: 1-2 s each).
    async with kafka_cluster(1, zookeeper=None, flush="every-message") as cluster:
        async with Producer(brokers=cluster.broker_list, max_buffered_messages=3) as p:
            for _ in range(5):  # more than the buffer holds: nothing may stay queued
                with pytest.raises(InvalidPartitionError, match="partition"):
                    await p.send("bad", b"x", partition=partition)
                with pytest.raises(InvalidPartitionError):
                    p.send_nowait("bad", b"x", partition=partition)
                with pytest.raises(InvalidPartitionError):
                    await p.send_and_wait("bad", b"x", partition=partition)
                with pytest.raises(InvalidPartitionError):
                    await p.send_message("bad", Message(0, b"x"), partition=partition)
                batch = p.create_batch()
                batch.append(b"x")
                with pytest.raises(InvalidPartitionError):
                    await p.send_batch(batch, "bad", partition=partition)
            assert (p.metrics.queued_messages, p.metrics.queued_bytes) == (0, 0)
            result = await asyncio.wait_for(p.send_and_wait("bad", b"ok", partition=(0, 0)), 5)
            assert result.confirmed
        assert p.metrics.messages_failed == 0
        assert all_values(await read_logs(cluster, "bad")) == [b"ok"]


async def test_interrupted_flush_then_close_ends_everything_in_time() -> None:
    before = asyncio.all_tasks()
    async with GarbageServer() as server:  # reads everything, answers nothing
        producer = Producer(brokers=static(server), request_timeout_ms=30_000, linger_ms=1000)
        await producer.start()
        futures = [await producer.send("t", b"m%d" % i, partition=(0, 0)) for i in range(2500)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(producer.flush(), 0.3)
        assert not any(f.done() for f in futures)  # nobody confirms
        failed = await closed_in_time(producer, timeout=0.5, bound=3)
        assert isinstance(failed, ProducerClosedError)
        assert failed.undelivered == failed.unknown == 2500  # written: maybe appended
        assert "DeliveryUnknownError" in str(failed)
        for future in futures:
            exc = future.exception()
            assert isinstance(exc, DeliveryUnknownError)
            assert exc.maybe_delivered
        assert producer.metrics.queued_messages == 0
        with pytest.raises(ProducerClosedError):
            await producer.send("t", b"late")
    assert asyncio.all_tasks() - before == set()  # no sender, retry or connection task left


async def test_flush_waits_without_a_callback_per_message() -> None:
    """flush() waits about once per batch, not with a done callback on every message
    (asyncio.wait over a full buffer of 100,000 futures cost ~0.2 s of CPU, and left a
    callback, a handle and a context per message to the collector); it still ends only
    when every message accepted before it has ended."""
    async with GarbageServer() as server:  # reads everything, answers nothing
        producer = Producer(brokers=static(server), request_timeout_ms=30_000, linger_ms=1000)
        await producer.start()
        futures = [await producer.send("t", b"m%d" % i, partition=(0, 0)) for i in range(2500)]
        flushing = asyncio.ensure_future(producer.flush())
        await asyncio.sleep(0.2)
        assert not flushing.done()
        waited_on = [f for f in futures if f._callbacks]
        assert 1 <= len(waited_on) <= 3  # one per batch of 1000 at most
        failed = await closed_in_time(producer, timeout=0.5, bound=3)
        assert isinstance(failed, ProducerClosedError)
        await asyncio.wait_for(flushing, 5)  # every message ended (failed): flush() ends
        assert all(f.done() for f in futures)


async def test_close_during_retries_fails_them_with_their_cause() -> None:
    script = [Reply(offsets_frame(0)), Reply(), Reply(close=True)]
    async with GarbageServer(script, [*SETTLE, *script]) as server:
        producer = Producer(brokers=static(server), retries=5, retry_backoff_ms=2000, linger_ms=0)
        await producer.start()
        future = await producer.send("t", b"x", partition=(0, 0))
        await eventually(lambda: producer.metrics.retries > 0, 5)  # a retry waits
        failed = await closed_in_time(producer, timeout=0.2, bound=2)
        assert isinstance(failed, ProducerClosedError)
        exc = future.exception()
        assert isinstance(exc, ProduceNotConfirmedError)
        assert str(exc) in str(failed)


@pytest.mark.parametrize("ending", ["flush", "close"])
async def test_batches_queued_for_a_broker_gone_end_within_their_retries(ending: str) -> None:
    """A static producer's only broker is gone (its port refuses connections) with tens
    of batches queued for it, one request each: every message fails within its one
    retry, whether ``flush()`` or a ``close()`` without a timeout waits for them. The
    sender used to try one request's worth per backoff of its own (up to 5 s), so the
    batches' attempts took their turns: minutes, for a close too."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = sock.getsockname()[1]
        producer = Producer(
            brokers=f"0:127.0.0.1:{port}",
            batch_size=10,
            max_request_bytes=1,  # one batch per request
            retries=1,
            retry_backoff_ms=100,
            linger_ms=0,
        )
        await producer.start()
        futures = [await producer.send("t", b"m%03d" % i, partition=(0, 0)) for i in range(400)]
        started = time.monotonic()
        if ending == "flush":
            assert await outcome(producer.flush(), 60) is None
        else:
            assert isinstance(await outcome(producer.close(), 60), ProducerClosedError)
        took = time.monotonic() - started
        await outcome(producer.close(), 10)
    # Idle: about 0.5 s (flush) and 0.2 s (close); the bound is for a loaded machine.
    assert took < 10, took
    for future in futures:
        assert isinstance(future.exception(), KafkaConnectionError)
    assert producer.metrics.messages_failed == 400
    assert producer.metrics.queued_messages == 0


async def test_the_block_exception_is_never_hidden_by_close(kafka_cluster: Any) -> None:
    futures: list[asyncio.Future[Any]] = []

    async def application(broker_list: str, stop: Any) -> None:
        async with Producer(brokers=broker_list, retries=0, connect_timeout_ms=500) as producer:
            await stop()
            futures.append(await producer.send("gone", b"x"))
            raise LookupError("the application's own error")

    # The broker stops before anything is sent: how it flushes does not matter here.
    async with kafka_cluster(1, zookeeper=None, flush="every-message") as cluster:
        with pytest.raises(LookupError) as info:
            await application(cluster.broker_list, lambda: cluster.stop_broker(0))
        assert isinstance(futures[0].exception(), KafkaError)
        notes = getattr(info.value, "__notes__", None)
        if notes is not None:  # Python 3.11+: the close failure rides along as a note
            assert any("not delivered" in note for note in notes)
        # Without an exception of its own, the block raises the close failure.
        await cluster.start_broker(0)

    async def quiet_application() -> None:
        async with Producer(
            brokers=f"0:127.0.0.1:{_free_port()}", retries=0, connect_timeout_ms=500
        ) as producer:
            await producer.send("gone", b"x")

    with pytest.raises(ProducerClosedError, match="cannot connect"):
        await quiet_application()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_an_unexpected_error_while_sending_fails_the_batch_with_its_cause(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the sending path (injected: the encoder raises once) fails the batch it
    concerns with that error, logged once with its traceback; the producer goes on."""
    # Flushed per request: these check what send() refuses or what a bug fails, and
    # each case confirms its messages at once (0.7.2's shipped flush: 1-2 s each).
    async with kafka_cluster(1, zookeeper=None, flush="every-message") as cluster:
        producer = Producer(brokers=cluster.broker_list, linger_ms=0)
        await producer.start()
        encoder = producer._sender.encoder
        real = encoder.frame
        calls = 0

        def buggy(batches: Any) -> bytes:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("encoder bug")
            return real(batches)

        monkeypatch.setattr(encoder, "frame", buggy)
        first = await outcome(producer.send_and_wait("t", b"first"))
        assert isinstance(first, RuntimeError)
        second = await outcome(producer.send_and_wait("t", b"second"))
        assert isinstance(second, ProduceResult)
        failed = await closed_in_time(producer, timeout=2, bound=4)
        assert isinstance(failed, ProducerClosedError)
        assert "RuntimeError: encoder bug" in str(failed)
        logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is first]
        assert len(logged) == 1
        assert producer.metrics.messages_failed == 1
        assert all_values(await read_logs(cluster, "t")) == [b"second"]


async def test_a_crashed_sender_fails_its_work_and_a_new_one_takes_over(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender task itself crashing (injected into its loop) is escalated: the
    messages waiting for that broker fail with the crash's error instead of waiting
    forever, and the next message starts a new sender."""
    # Flushed per request: these check what send() refuses or what a bug fails, and
    # each case confirms its messages at once (0.7.2's shipped flush: 1-2 s each).
    async with kafka_cluster(1, zookeeper=None, flush="every-message") as cluster:
        producer = Producer(brokers=cluster.broker_list, linger_ms=50)
        await producer.start()
        accumulator = producer._accumulator
        real = accumulator.next_request
        crashed = False

        async def crashing(queue: Any, max_bytes: int) -> Any:
            nonlocal crashed
            if not crashed:
                crashed = True
                await asyncio.sleep(0.01)
                raise KeyError("sender bug")
            return await real(queue, max_bytes)

        monkeypatch.setattr(accumulator, "next_request", crashing)
        lost = [await producer.send("t", b"lost %d" % i, partition=(0, 0)) for i in range(3)]
        for future in lost:
            assert isinstance(await outcome(future), KeyError)
        assert any("producer/sender-0 crashed" in r.getMessage() for r in caplog.records)
        result = await outcome(producer.send_and_wait("t", b"after", partition=(0, 0)))
        assert isinstance(result, ProduceResult)
        failed = await closed_in_time(producer, timeout=2, bound=4)
        assert isinstance(failed, ProducerClosedError)
        assert failed.undelivered == 3
        assert all_values(await read_logs(cluster, "t")) == [b"after"]


@pytest.mark.slow  # waits out a 2 s close
async def test_close_counts_every_undelivered_message_by_cause_within_its_timeout() -> None:
    """40,000 sends to a broker that never reads, then close(timeout_ms=2000): close
    returns in time, and its error counts the messages of each cause (written but not
    confirmed, never written), which add up to what was accepted. A confirmation cut
    short by this client's close is not blamed on the broker."""
    async with SilentBroker() as broker:
        producer = Producer(brokers=broker.broker_list, request_timeout_ms=30_000)
        await producer.start()
        futures = [await producer.send("t", b"m%05d" % i, partition=(0, 0)) for i in range(40_000)]
        started = time.monotonic()
        failed = await outcome(producer.close(timeout_ms=2000), 30)
        took = time.monotonic() - started
    assert took < 2.0 + 0.2, took  # its timeout, and a little for a loaded machine
    assert isinstance(failed, ProducerClosedError)
    by_future = collections.Counter(type(f.exception()).__name__ for f in futures)
    assert failed.undelivered == 40_000 == sum(by_future.values())
    assert failed.causes == {("t", 0, 0): dict(by_future)}
    # Written and never confirmed: unknown, counted apart; never written: not appended.
    assert set(by_future) == {"DeliveryUnknownError", "ProducerClosedError"}
    for name, count in by_future.items():
        assert f"t/0-0: {count} x {name}: " in str(failed)
    assert failed.unknown == by_future["DeliveryUnknownError"]
    unconfirmed = next(
        f.exception() for f in futures if isinstance(f.exception(), DeliveryUnknownError)
    )
    assert "refused" not in str(unconfirmed)
    assert "closed" in str(unconfirmed)
    m = producer.metrics
    assert m.messages_sent == 0
    assert (m.messages_failed, m.messages_unknown) == (
        by_future["ProducerClosedError"],
        by_future["DeliveryUnknownError"],
    )
