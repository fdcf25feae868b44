"""SimpleConsumer against the embedded broker: fetch, multifetch, offsets, typed errors,
iteration (end offsets, polling, compressed wrappers, fetch-size growth) and the one
transparent retry after a broken connection."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import (
    InvalidConfigError,
    InvalidMessageSizeError,
    InvalidPartitionError,
    InvalidTopicError,
    KafkaConnectionError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RequestTimeoutError,
    UnknownError,
)
from aiokafka07.pool import ConnectionPool
from aiokafka07.protocol import (
    EARLIEST,
    LATEST,
    FetchRequest,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_response,
    encode_offsets_response,
    entry_size,
)
from aiokafka07.records import ConsumerRecord
from aiokafka07.simple import FetchResult, SimpleConsumer
from aiokafka07.testing import KafkaCluster

from .garbage_server import GarbageServer, Reply
from .wire import eventually

Factory = Callable[..., KafkaCluster]

LONG_TOPIC = "a-topic-name-over-16"  # valid for the client, too long for this broker


@pytest.fixture
async def cluster(kafka_cluster: Factory) -> AsyncIterator[KafkaCluster]:
    async with kafka_cluster(
        1,
        zookeeper=None,
        num_partitions=2,
        max_topic_name_length=16,
        topic_log_file_size={"seg": 100},
    ) as running:
        yield running


def consumer_for(cluster: KafkaCluster, **options: Any) -> SimpleConsumer:
    broker = cluster.broker(0)
    return SimpleConsumer(broker.host, broker.port, broker_id=0, **options)


async def producer_for(cluster: KafkaCluster) -> BrokerConnection:
    broker = cluster.broker(0)
    return await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port))


def ends(start: int, payloads: list[bytes]) -> list[int]:
    """The next offset of every message of an uncompressed set at ``start``."""
    result = []
    for payload in payloads:
        start += entry_size(len(payload))
        result.append(start)
    return result


def records(topic: str, partition: int, start: int, payloads: list[bytes]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(topic, 0, partition, offset, value)
        for offset, value in zip(ends(start, payloads), payloads, strict=True)
    ]


async def collect(iterator: AsyncIterator[ConsumerRecord], timeout: float = 10) -> list[Any]:
    async def run() -> list[Any]:
        return [record async for record in iterator]

    return await asyncio.wait_for(run(), timeout)


async def drain(iterator: AsyncIterator[ConsumerRecord], into: list[ConsumerRecord]) -> None:
    """Append every record to ``into`` (so they are kept when the iterator raises)."""

    async def run() -> None:
        async for record in iterator:
            into.append(record)

    await asyncio.wait_for(run(), 10)


# -- single requests -------------------------------------------------------------------------


async def test_fetch_returns_records_and_the_next_offset(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    payloads = [b"a", b"bb" * 20, b"ccc"]
    end = await producer.produce("fx", 1, payloads, confirm=True)
    assert end is not None
    offsets = ends(0, payloads)
    async with consumer_for(cluster) as consumer:
        result = await consumer.fetch("fx", 1, 0)
        assert result == FetchResult("fx", 1, 0, records("fx", 1, 0, payloads), end, None)
        assert result.messages[1].compression == 0

        middle = await consumer.fetch("fx", 1, offsets[0])
        assert middle.messages == records("fx", 1, offsets[0], payloads[1:])
        assert middle.next_offset == end

        # A fetch that ends inside a message hands out what is complete.
        short = await consumer.fetch("fx", 1, 0, offsets[1] + 5)
        assert short.messages == records("fx", 1, 0, payloads[:2])
        assert short.next_offset == offsets[1]

        at_end = await consumer.fetch("fx", 1, end)
        assert (at_end.messages, at_end.next_offset, at_end.error) == ([], end, None)

        with pytest.raises(InvalidMessageSizeError) as too_small:
            await consumer.fetch("fx", 1, offsets[0], 10)
        assert too_small.value.size == 6 + 40
        assert f"fx/0-1 at offset {offsets[0]}" in str(too_small.value)  # broker-partition

        assert (await consumer.fetch("nothing", 0, 0)).messages == []
        assert (await consumer.fetch("fx", 1, 0, 0)).next_offset == 0
    await producer.close()


async def test_fetch_raises_typed_broker_errors(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    end = await producer.produce("ex", 0, [b"x"], confirm=True)
    assert end is not None
    async with consumer_for(cluster) as consumer:
        for offset in (end + 1, 1 << 40):
            with pytest.raises(OffsetOutOfRangeError) as out:
                await consumer.fetch("ex", 0, offset)
            assert out.value.offset == offset
            assert str(offset) in str(out.value)
        with pytest.raises(InvalidPartitionError):
            await consumer.fetch("ex", 2, 0)
        # Nonsense (a negative offset or partition) is refused before it is sent.
        sent = (await consumer.connection()).requests_sent
        with pytest.raises(InvalidConfigError):
            await consumer.fetch("ex", 0, -1)
        with pytest.raises(InvalidPartitionError):
            await consumer.fetch("ex", -1, 0)
        assert (await consumer.connection()).requests_sent == sent
        with pytest.raises(UnknownError):
            await consumer.fetch(LONG_TOPIC, 0, 0)
        # Broker errors leave the connection usable.
        conn = await consumer.connection()
        assert not conn.closed
        assert (await consumer.fetch("ex", 0, 0)).messages == records("ex", 0, 0, [b"x"])
        assert await consumer.connection() is conn
    await producer.close()


async def test_invalid_topics_are_refused_before_sending(cluster: KafkaCluster) -> None:
    async with consumer_for(cluster) as consumer:
        conn = await consumer.connection()
        assert await consumer.offsets_before("ok", 0, LATEST) == [0]
        sent = conn.requests_sent
        for topic in ("", ".", "..", "a/b", "x" * 256, "tab\there"):
            with pytest.raises(InvalidTopicError):
                await consumer.fetch(topic, 0, 0)
            with pytest.raises(InvalidTopicError):
                await consumer.offsets_before(topic, 0, LATEST)
            with pytest.raises(InvalidTopicError):
                await consumer.multifetch([("ok", 0, 0, 100), (topic, 0, 0, 100)])
            with pytest.raises(InvalidTopicError):
                await consumer.messages(topic, 0, 0).__anext__()
        assert conn.requests_sent == sent
        assert not conn.closed
        assert await consumer.connection() is conn
        assert issubclass(InvalidTopicError, ValueError)


async def test_multifetch_carries_errors_per_partition(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    zero, one = [b"p0-a", b"p0-b"], [b"p1"]
    end0 = await producer.produce("mf", 0, zero, confirm=True)
    end1 = await producer.produce("mf", 1, one, confirm=True)
    assert end0 is not None
    assert end1 is not None
    async with consumer_for(cluster) as consumer:
        results = await consumer.multifetch(
            [
                ("mf", 0, 0, 1000),
                FetchRequest("mf", 1, 0, 1000),
                ("mf", 0, end0 + 10, 1000),
                ("mf", 5, 0, 1000),
                ("unknown", 0, 0, 1000),
                (LONG_TOPIC, 0, 0, 1000),
                ("mf", 0, ends(0, zero)[0], 1000),
            ]
        )
        assert len(results) == 7
        assert results[0] == FetchResult("mf", 0, 0, records("mf", 0, 0, zero), end0, None)
        assert results[1] == FetchResult("mf", 1, 0, records("mf", 1, 0, one), end1, None)
        assert isinstance(results[2].error, OffsetOutOfRangeError)
        assert results[2].error.offset == end0 + 10
        assert (results[2].messages, results[2].next_offset) == ([], end0 + 10)
        assert isinstance(results[3].error, InvalidPartitionError)
        assert results[4] == FetchResult("unknown", 0, 0, [], 0, None)
        assert isinstance(results[5].error, UnknownError)
        assert results[6].messages == records("mf", 0, ends(0, zero)[0], zero[1:])
        with pytest.raises(InvalidPartitionError):
            results[3].raise_for_error()
        assert results[0].raise_for_error() is results[0]
        with pytest.raises(InvalidConfigError):
            await consumer.multifetch([])  # nothing asked: nothing sent
    await producer.close()


async def test_offsets_before(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    for _ in range(5):
        await producer.produce("seg", 0, [b"p" * 40])  # 50 bytes; segments roll at 100
    assert await producer.produce("ob", 1, [b"abc"], confirm=True) == entry_size(3)
    async with consumer_for(cluster) as consumer:
        assert await consumer.offsets_before("seg", 0, LATEST) == [250]
        assert await consumer.offsets_before("seg", 0, EARLIEST) == [0]
        assert await consumer.offsets_before("seg", 0, LATEST, 10) == [250, 150, 0]
        assert await consumer.offsets_before("seg", 0, LATEST, 2) == [250, 150]
        assert await consumer.offsets_before("seg", 0, EARLIEST, 10) == [0]
        future = int(time.time() * 1000) + 3_600_000
        assert await consumer.offsets_before("seg", 0, future, 10) == [250, 150, 0]
        assert await consumer.offsets_before("seg", 0, 0, 10) == []
        assert await consumer.offsets_before("ob", 1, LATEST, 3) == [entry_size(3), 0]
        assert await consumer.offsets_before("ob", 0, LATEST) == [0]  # no log here
        assert await consumer.offsets_before("ob", 0, future) == []
        assert await consumer.offsets_before("ob", 1, LATEST, 0) == []
    await producer.close()


# -- iteration ----------------------------------------------------------------------------


async def test_messages_from_the_start_stop_when_caught_up(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    payloads = [b"m%03d" % i for i in range(40)]
    end = await producer.produce("it", 0, payloads, confirm=True)
    assert end is not None
    expected = records("it", 0, 0, payloads)
    async with consumer_for(cluster, fetch_size=50) as consumer:  # 3 messages a fetch
        assert await collect(consumer.messages("it", 0, 0)) == expected
        assert await collect(consumer.messages("it", 0, expected[9].offset)) == expected[10:]
        assert await collect(consumer.messages("it", 0, end)) == []
        batches = [b async for b in consumer.batches("it", 0, 0)]
        assert [len(b.messages) for b in batches] == [3] * 13 + [1]
        assert [b.next_offset for b in batches] == [b.messages[-1].offset for b in batches]
        with pytest.raises(OffsetOutOfRangeError):
            await collect(consumer.messages("it", 0, end + 1))
    await producer.close()


async def test_messages_stop_exactly_at_the_end_offset(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    payloads = [b"e%02d" % i for i in range(20)]
    await producer.produce("eo", 0, payloads, confirm=True)
    expected = records("eo", 0, 0, payloads)
    async with consumer_for(cluster) as consumer:  # one fetch holds everything
        for k in (0, 1, 7, 19):
            got = await collect(consumer.messages("eo", 0, 0, end_offset=expected[k].offset))
            assert got == expected[: k + 1]
        middle = expected[4].offset
        got = await collect(consumer.messages("eo", 0, middle, end_offset=expected[11].offset))
        assert got == expected[5:12]
        # An end inside a message: that message does not end before it.
        got = await collect(consumer.messages("eo", 0, 0, end_offset=expected[5].offset + 3))
        assert got == expected[:6]
        assert await collect(consumer.messages("eo", 0, 0, end_offset=3)) == []
        # Beyond the log end without polling: stops when caught up.
        got = await collect(consumer.messages("eo", 0, 0, end_offset=1 << 40))
        assert got == expected

    big = [b"%d" % i * 100 for i in range(6)]
    await producer.produce("eo", 1, big, confirm=True)
    expected = records("eo", 1, 0, big)
    async with consumer_for(cluster, fetch_size=32) as consumer:  # smaller than a message
        for end in (expected[2].offset, expected[2].offset + 50, expected[5].offset - 1):
            got = await collect(consumer.messages("eo", 1, 0, end_offset=end))
            assert got == expected[: 3 if end < expected[3].offset else 5]
    await producer.close()


async def test_polling_picks_up_messages_produced_later(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    await producer.produce("poll", 0, [b"first"], confirm=True)
    payloads = [b"first"] + [b"later-%d-%d" % (i, j) for i in range(5) for j in range(3)]
    expected = records("poll", 0, 0, payloads)

    async def produce_later() -> None:
        for i in range(5):
            await asyncio.sleep(0.05)
            await producer.produce("poll", 0, [b"later-%d-%d" % (i, j) for j in range(3)])

    async with consumer_for(cluster, fetch_size=64) as consumer:
        await consumer.connection()
        before = asyncio.all_tasks()
        feeder = asyncio.ensure_future(produce_later())
        got: list[ConsumerRecord] = []

        async def consume() -> None:
            async for record in consumer.messages("poll", 0, 0, poll_interval_ms=20):
                got.append(record)
                if len(got) == len(payloads):
                    break

        await asyncio.wait_for(consume(), 10)
        assert got == expected
        await feeder
        # The prefetch of the abandoned iterator does not keep running.
        await eventually(lambda: asyncio.all_tasks() - before == set(), 2)

        # With an end offset the poll ends exactly there once the data has arrived.
        feeder = asyncio.ensure_future(produce_later())
        target = expected[-1].offset + 2 * entry_size(len(b"later-0-0"))
        more = await collect(
            consumer.messages(
                "poll", 0, expected[-1].offset, end_offset=target, poll_interval_ms=20
            )
        )
        assert [r.value for r in more] == [b"later-0-0", b"later-0-1"]
        assert more[-1].offset == target
        await feeder
    await producer.close()


@pytest.mark.parametrize("method", ["messages", "batches"])
async def test_closing_the_iterator_stops_the_prefetch(cluster: KafkaCluster, method: str) -> None:
    producer = await producer_for(cluster)
    await producer.produce("ac", 0, [b"v%d" % i for i in range(50)], confirm=True)
    async with consumer_for(cluster, fetch_size=40) as consumer:
        await consumer.connection()
        before = asyncio.all_tasks()
        iterator = getattr(consumer, method)("ac", 0, 0)
        async with contextlib.aclosing(iterator):
            async for _ in iterator:
                break  # a prefetch is in flight now
        # aclose() has returned: nothing the iterator started may still be running.
        assert asyncio.all_tasks() - before == set()
    await producer.close()


async def produce_wrapped(cluster: KafkaCluster) -> list[ConsumerRecord]:
    """plain, gzip(a, b, c), snappy(d, e), plain z on cw/0; the records to expect."""
    producer = await producer_for(cluster)
    first = await producer.produce("cw", 0, [b"plain"], confirm=True)
    gz_end = await producer.produce("cw", 0, [b"a", b"b", b"c"], compression="gzip", confirm=True)
    sn_end = await producer.produce("cw", 0, [b"d", b"e"], compression="snappy", confirm=True)
    end = await producer.produce("cw", 0, [b"z"], confirm=True)
    await producer.close()
    assert first is not None
    assert gz_end is not None
    assert sn_end is not None
    assert end is not None
    return [
        ConsumerRecord("cw", 0, 0, first, b"plain"),
        ConsumerRecord("cw", 0, 0, first, b"a"),  # inside a wrapper: its start ...
        ConsumerRecord("cw", 0, 0, first, b"b"),
        ConsumerRecord("cw", 0, 0, gz_end, b"c"),  # ... the last one: its end
        ConsumerRecord("cw", 0, 0, gz_end, b"d"),
        ConsumerRecord("cw", 0, 0, sn_end, b"e"),
        ConsumerRecord("cw", 0, 0, end, b"z"),
    ]


async def test_compressed_wrappers_are_expanded_with_0_7_2_offsets(
    cluster: KafkaCluster,
) -> None:
    expected = await produce_wrapped(cluster)
    gz_end = expected[3].offset
    async with consumer_for(cluster) as consumer:
        assert await collect(consumer.messages("cw", 0, 0)) == expected
        assert await collect(consumer.messages("cw", 0, gz_end)) == expected[4:]
        # A fetch size smaller than a wrapper grows for it, too.
        assert await collect(consumer.messages("cw", 0, 0, fetch_size=20)) == expected
        # Restarting from a committed inner offset re-delivers the rest of that wrapper.
        assert await collect(consumer.messages("cw", 0, expected[1].offset)) == expected[1:]
        # A single fetch decodes the same records.
        assert (await consumer.fetch("cw", 0, 0)).messages == expected


async def test_end_offset_hands_out_only_wrappers_that_end_before_it(
    cluster: KafkaCluster,
) -> None:
    """``end_offset`` hands out "only messages that end at or before it". The messages of
    a wrapper all end with the wrapper, although all but the last report its start; so
    consuming [0, end) and then [end, ...) must not deliver a message twice."""
    expected = await produce_wrapped(cluster)
    gz_end = expected[3].offset
    async with consumer_for(cluster) as consumer:
        upto = await collect(consumer.messages("cw", 0, 0, end_offset=gz_end))
        rest = await collect(consumer.messages("cw", 0, gz_end))
        assert [r.value for r in upto + rest] == [r.value for r in expected]  # no duplicate
        assert upto == expected[:4]
        # An end inside the gzip wrapper: none of its messages ends before it.
        inside = await collect(consumer.messages("cw", 0, 0, end_offset=expected[1].offset + 5))
        assert inside == expected[:1]


async def test_fetch_size_grows_up_to_the_limit(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    limit = 4096
    payloads = [b"s1", b"B" * 3000, b"s2", b"C" * (limit - 10), b"s3"]
    await producer.produce("grow", 0, payloads, confirm=True)
    expected = records("grow", 0, 0, payloads)
    too_big_at = expected[-1].offset
    await producer.produce("grow", 0, [b"D" * (limit - 9), b"never"], confirm=True)
    async with consumer_for(cluster, fetch_size=64, max_fetch_size=limit) as consumer:
        got: list[ConsumerRecord] = []
        with pytest.raises(MessageTooLargeError) as info:
            await drain(consumer.messages("grow", 0, 0), got)
        assert got == expected  # everything before the oversized message first
        assert info.value.size == limit - 9 + 6
        assert info.value.offset == too_big_at
        assert f"offset {too_big_at}" in str(info.value)
        assert str(limit) in str(info.value)
        # Same limit for a single fetch: the error says how big the fetch must be.
        with pytest.raises(InvalidMessageSizeError) as single:
            await consumer.fetch("grow", 0, too_big_at)
        assert single.value.size == limit - 9 + 6
    await producer.close()


def test_fetch_size_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="fetch_size"):
        SimpleConsumer(fetch_size=0)
    with pytest.raises(ValueError, match="fetch_size"):
        SimpleConsumer(fetch_size=100, max_fetch_size=99)


# -- reconnects -----------------------------------------------------------------------------


async def test_requests_work_again_after_a_broker_restart(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    payloads = [b"r1", b"r2"]
    end = await producer.produce("rc", 0, payloads, confirm=True)
    await producer.close()
    async with consumer_for(cluster) as consumer:
        result = await consumer.fetch("rc", 0, 0)
        old = await consumer.connection()
        await cluster.restart_broker(0)
        assert await asyncio.wait_for(consumer.fetch("rc", 0, 0), 5) == result
        assert old.closed
        assert await consumer.connection() is not old
        await cluster.restart_broker(0)
        assert await asyncio.wait_for(consumer.offsets_before("rc", 0, LATEST), 5) == [end]
        await cluster.restart_broker(0)
        multi = await asyncio.wait_for(consumer.multifetch([("rc", 0, 0, 100)]), 5)
        assert multi == [result]


async def test_iteration_survives_a_broker_restart(cluster: KafkaCluster) -> None:
    producer = await producer_for(cluster)
    await producer.produce("ri", 0, [b"before-%d" % i for i in range(6)], confirm=True)
    async with consumer_for(cluster, fetch_size=40) as consumer:
        got: list[bytes] = []

        async def consume() -> None:
            async for record in consumer.messages("ri", 0, 0, poll_interval_ms=20):
                got.append(record.value)
                if len(got) == 2:  # a prefetch is in flight on the old connection
                    await cluster.restart_broker(0)
                    again = await producer_for(cluster)
                    await again.produce("ri", 0, [b"after"], confirm=True)
                    await again.close()
                if len(got) == 7:
                    break

        await asyncio.wait_for(consume(), 10)
        assert got == [b"before-%d" % i for i in range(6)] + [b"after"]


def fetch_answer(payloads: list[bytes]) -> bytes:
    return encode_fetch_response(0, encode_message_set(payloads))


async def test_a_broken_connection_is_retried_once_on_a_fresh_one() -> None:
    hang_up = [Reply(close=True)]
    answer = [Reply(fetch_answer([b"x"]))]
    async with GarbageServer(hang_up, answer) as server:
        consumer = SimpleConsumer(server.host, server.port, request_timeout_ms=2000)
        async with consumer:
            result = await asyncio.wait_for(consumer.fetch("t", 0, 0), 5)
            assert [r.value for r in result.messages] == [b"x"]
            assert result.messages[0].broker_id is None
            assert server.connections == 2
            assert len(server.requests) == 2

    async with (
        GarbageServer(hang_up, [Reply(encode_offsets_response([77]))]) as server,
        SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer,
    ):
        assert await asyncio.wait_for(consumer.offsets_before("t", 0, LATEST), 5) == [77]
        assert server.connections == 2

    multi = [Reply(encode_multifetch_response([(0, encode_message_set([b"m"]))]))]
    async with (
        GarbageServer(hang_up, multi) as server,
        SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer,
    ):
        results = await asyncio.wait_for(consumer.multifetch([("t", 0, 0, 100)]), 5)
        assert [r.value for r in results[0].messages] == [b"m"]
        assert server.connections == 2


async def test_only_one_retry() -> None:
    async with (
        GarbageServer([Reply(close=True)]) as server,  # every connection hangs up
        SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer,
    ):
        with pytest.raises(KafkaConnectionError) as info:
            await asyncio.wait_for(consumer.fetch("t", 0, 0), 5)
        assert info.value.maybe_delivered
        assert server.connections == 2
        assert len(server.requests) == 2


async def test_a_timeout_is_not_retried() -> None:
    async with (
        GarbageServer() as server,  # never answers
        SimpleConsumer(server.host, server.port, request_timeout_ms=300) as consumer,
    ):
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await asyncio.wait_for(consumer.fetch("t", 0, 0), 10)
        assert time.monotonic() - started >= 0.25  # its one timeout of 0.3 s
        assert server.connections == 1  # a retry reconnects: the timeout closed the first


async def test_iteration_retries_a_broken_connection_once() -> None:
    hang_up = [Reply(close=True)]
    answers = [Reply(fetch_answer([b"one", b"two"])), Reply(encode_fetch_response(0))]
    async with (
        GarbageServer(hang_up, answers) as server,
        SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer,
    ):
        got = await collect(consumer.messages("t", 0, 0), 5)
        assert [(r.value, r.offset) for r in got] == [
            (b"one", entry_size(3)),
            (b"two", 2 * entry_size(3)),
        ]
        assert server.connections == 2


async def test_a_shared_pool_stays_open(cluster: KafkaCluster) -> None:
    broker = cluster.broker(0)
    async with ConnectionPool() as pool:
        async with SimpleConsumer(broker.host, broker.port, broker_id=0, pool=pool) as consumer:
            conn = await consumer.connection()
            assert await consumer.offsets_before("sp", 0, LATEST) == [0]
        assert not conn.closed
        assert await pool.connection(BrokerAddress(0, broker.host, broker.port)) is conn
    assert conn.closed
