"""Lag in messages (issue 37, item 3): counted exactly between a committed offset and the
log end where the bound allows (compressed wrappers counted as the messages inside),
estimated from the recent mean message size otherwise, labelled with the method; unknown
never 0. Against real brokers (and, for the exporter, a real ZooKeeper): message sets are
produced as the test builds them, so the expected counts are the messages written."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import InvalidMessageError
from aiokafka07.monitor.cluster_state import ClusterMonitor
from aiokafka07.monitor.collector import METRICS
from aiokafka07.monitor.message_lag import EXACT, MessageCounter, MessageLag, PartitionRange
from aiokafka07.pool import ConnectionPool
from aiokafka07.protocol import LATEST, decode_message_set, encode_message_set
from aiokafka07.protocol.messages import count_message_set
from aiokafka07.protocol.requests import encode_produce_request
from aiokafka07.records import TopicPartition
from aiokafka07.testing import KafkaCluster
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .test_exporter import by_labels, exporter, get, partition_key, scrape, value
from .wire import eventually

TOPIC = "events"


def payloads(tag: str, count: int, size: int = 40) -> list[bytes]:
    return [f"{tag}-{i:06d}".encode().ljust(size, b".") for i in range(count)]


async def write(
    connection: BrokerConnection, partition: int, message_set: bytes, timeout: float = 10.0
) -> int:
    """PRODUCE ``message_set`` to ``TOPIC``/``partition``; wait until the log end shows it
    (PRODUCE has no answer); return the new log end."""
    (before,) = await connection.offsets(TOPIC, partition, LATEST, 1) or (0,)
    await connection.send(encode_produce_request(TOPIC, partition, message_set))

    async def shown() -> int | None:
        (end,) = await connection.offsets(TOPIC, partition, LATEST, 1) or (0,)
        return end if end >= before + len(message_set) else None

    end: int = await eventually(shown, timeout)
    return end


async def write_mixed(connection: BrokerConnection, partition: int, tag: str) -> tuple[int, int]:
    """13 plain messages, a gzip wrapper of 20, a snappy wrapper of 30, 4 gzip wrappers
    of 1 and a snappy wrapper of 100: (messages written, log end)."""
    sets = [
        encode_message_set(payloads(tag + "p", 13)),
        encode_message_set(payloads(tag + "g", 20), compression="gzip"),
        encode_message_set(payloads(tag + "s", 30), compression="snappy"),
        *(encode_message_set([b"one %d" % i], compression="gzip") for i in range(4)),
        encode_message_set(payloads(tag + "S", 100, 90), compression="snappy"),
    ]
    end = 0
    for message_set in sets:
        end = await write(connection, partition, message_set)
    return 13 + 20 + 30 + 4 + 100, end


# -- the counting primitive --------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
def test_count_message_set_counts_as_decoding_does(impl: Any, codec: str) -> None:
    """count_message_set gives the messages a decoder yields (wrappers expanded) and the
    same valid bytes, a partial tail dropped; a bad CRC raises as decoding does."""
    whole = b"".join(
        [
            encode_message_set(payloads("a", 3)),
            encode_message_set(payloads("b", 17), compression=codec),
            encode_message_set([b"x" * 500], compression=codec),
            encode_message_set(payloads("c", 5)),
        ]
    )
    for cut in (len(whole), len(whole) - 3, len(whole) - 400, 200):
        buf = whole[:cut]
        decoded = decode_message_set(buf)
        counted = count_message_set(buf)
        assert counted.messages == len(decoded.messages)
        assert counted.valid_bytes == decoded.valid_bytes
    assert count_message_set(whole).messages == 3 + 17 + 1 + 5
    corrupt = bytearray(whole)
    corrupt[-3] ^= 0xFF  # in the last message's payload
    with pytest.raises(InvalidMessageError):
        count_message_set(corrupt)


# -- the counter against a real broker -----------------------------------------------------


def address_of(cluster: KafkaCluster) -> dict[int, BrokerAddress]:
    return {b.broker_id: BrokerAddress(b.broker_id, b.host, b.port) for b in cluster.running}


async def test_counter_exact_with_compressed_wrappers_and_moving_offsets(
    cluster: KafkaCluster,
) -> None:
    """Exact counts between committed offsets and the log end, gzip and snappy wrappers
    counted as their messages; a second refresh with nothing changed reads nothing; an
    advancing range reads only the new bytes (and the bytes up to a new committed offset
    inside the counted span, at most a chunk), and is exact again."""
    (broker,) = cluster.running
    tp = TopicPartition(TOPIC, broker.broker_id, 0)
    counter = MessageCounter(chunk_bytes=4096)
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        first, middle = await write_mixed(connection, 0, "a")
        second, end = await write_mixed(connection, 0, "b")
        ranges = {tp: PartitionRange(0, end, frozenset({0, middle, end}))}
        lags = await counter.refresh(pool, address_of(cluster), ranges)
        assert lags == {
            (tp, 0): MessageLag(first + second, EXACT),
            (tp, middle): MessageLag(second, EXACT),
            (tp, end): MessageLag(0, EXACT),
        }
        # Read once, in chunks cut at the offsets (a partial tail read twice at most).
        assert end <= counter.stats.bytes_read <= end + 4096
        assert counter.stats.fetches <= end // 4096 + 2
        assert await counter.refresh(pool, address_of(cluster), ranges) == lags
        assert counter.stats.bytes_read == 0  # nothing changed: nothing read

        third, newest = await write_mixed(connection, 0, "c")
        plain_end = middle + len(encode_message_set(payloads("bp", 13)))
        moved = {tp: PartitionRange(0, newest, frozenset({plain_end, end}))}
        lags = await counter.refresh(pool, address_of(cluster), moved)
        assert lags == {
            (tp, plain_end): MessageLag(second - 13 + third, EXACT),
            (tp, end): MessageLag(third, EXACT),
        }
        # The new bytes at the end, and at most one chunk to place the new offset.
        assert newest - end <= counter.stats.bytes_read <= newest - end + 4096
        (span,) = counter.spans()
        assert span[1:3] == (plain_end, newest)  # what both groups consumed is dropped


async def test_counter_estimates_beyond_the_bound_and_catches_up(cluster: KafkaCluster) -> None:
    """A range longer than max_range_bytes is estimated from the mean message size (one
    sample chunk read), labelled so; a backlog larger than one refresh's budget is
    estimated, then counted over several refreshes, the counted part kept."""
    (broker,) = cluster.running
    tp = TopicPartition(TOPIC, broker.broker_id, 1)
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        end = 0
        for i in range(40):  # 40 sets of 25 messages of one size: the mean is exact
            end = await write(connection, 1, encode_message_set(payloads(f"{i}", 25)))
        ranges = {tp: PartitionRange(0, end, frozenset({0}))}

        far = MessageCounter(max_range_bytes=end - 1, chunk_bytes=2048)
        (lag,) = (await far.refresh(pool, address_of(cluster), ranges)).values()
        assert lag is not None
        assert lag.method == "estimate"
        assert abs(lag.messages - 1000) <= 1
        assert 0 < far.stats.bytes_read <= 2048  # one sample chunk
        assert far.spans() == []
        (again,) = (await far.refresh(pool, address_of(cluster), ranges)).values()
        assert again == lag
        assert far.stats.bytes_read == 0  # the sample is recent: not read again

        # Bigger messages arrive: a new sample, where they start, gives the recent mean.
        far.resample_seconds = 0.0
        for i in range(4):
            newest = await write(connection, 1, encode_message_set(payloads(f"big{i}", 25, 90)))
        moved = {tp: PartitionRange(0, newest, frozenset({0}))}
        (recent,) = (await far.refresh(pool, address_of(cluster), moved)).values()
        assert recent == MessageLag(round(newest / 100), "estimate")  # 100 bytes a message

        small = MessageCounter(refresh_bytes=8192, chunk_bytes=2048)
        seen = []
        for _ in range(40):
            (lag,) = (await small.refresh(pool, address_of(cluster), ranges)).values()
            assert lag is not None
            seen.append(lag)
            assert small.stats.bytes_read <= 8192
            if lag.method == EXACT:
                break
        assert seen[0].method == "estimate"
        assert seen[-1] == MessageLag(1000, EXACT)
        assert len(seen) >= end // 8192


async def test_counter_unknown_is_never_zero(cluster: KafkaCluster) -> None:
    """No mean message size known and nothing readable (the broker is not among the
    addresses), or an offset past the log end: None, never 0; caught up is 0, exact,
    without reading."""
    (broker,) = cluster.running
    tp = TopicPartition(TOPIC, broker.broker_id, 0)
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        end = await write(connection, 0, encode_message_set(payloads("u", 10)))
        counter = MessageCounter()
        ranges = {tp: PartitionRange(0, end, frozenset({0, end, end + 100}))}
        lags = await counter.refresh(pool, {}, ranges)
        assert lags == {(tp, 0): None, (tp, end): MessageLag(0, EXACT), (tp, end + 100): None}
        assert counter.stats.bytes_read == 0
        lags = await counter.refresh(pool, address_of(cluster), ranges)
        assert lags[(tp, 0)] == MessageLag(10, EXACT)


async def test_a_refresh_stays_bounded_with_a_big_backlog(cluster: KafkaCluster) -> None:
    """16 MiB of backlog over two partitions: a refresh reads at most its budget and
    takes little more than the time to read it; the rest is estimated, never 0."""
    (broker,) = cluster.running
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        ends = {}
        for partition in (0, 1):
            block = encode_message_set(payloads(f"{partition}", 2000, 1000))  # ~2 MiB a set
            for _ in range(4):
                ends[partition] = await write(connection, partition, block, timeout=30)
        ranges = {
            TopicPartition(TOPIC, 0, p): PartitionRange(0, end, frozenset({0}))
            for p, end in ends.items()
        }
        budget = 2 << 20
        counter = MessageCounter(refresh_bytes=budget, max_seconds=1.0)
        started = time.perf_counter()
        lags = await counter.refresh(pool, address_of(cluster), ranges)
        took = time.perf_counter() - started
        assert counter.stats.bytes_read <= budget
        assert counter.stats.exhausted
        assert took < 3.0, took
        for lag in lags.values():
            assert lag is not None
            assert lag.method == "estimate"
            assert abs(lag.messages - 8000) <= 80  # same-size messages: a close estimate
        print(f"\nbounded refresh: {counter.stats.bytes_read} bytes in {took * 1000:.0f} ms")


# -- through the exporter ----------------------------------------------------------------


async def test_exporter_series_and_status(kafka_cluster: Any, zookeeper: str) -> None:
    """kafka07_group_partition_lag_messages{method="exact"} equals the messages written
    and not committed (wrappers counted as their messages), kafka07_group_lag_messages
    sums them per group and topic, and /status shows both with the method; a group
    beyond the bound is method="estimate"."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=2) as cluster,
        ZooKeeper(zookeeper) as zk,
    ):
        (broker,) = cluster.running
        async with await BrokerConnection.open(
            BrokerAddress(0, broker.host, broker.port)
        ) as connection:
            first, middle = await write_mixed(connection, 0, "a")
            second, end0 = await write_mixed(connection, 0, "b")
            await write(connection, 1, encode_message_set(payloads("z", 9), compression="gzip"))
        registry = GroupRegistry(zk, "g")
        await registry.commit(TOPIC, "0-0", middle)
        await registry.commit(TOPIC, "0-1", 0)
        await GroupRegistry(zk, "h").commit(TOPIC, "0-0", 0)
        await GroupRegistry(zk, "far").commit(TOPIC, "0-0", 0)
        await GroupRegistry(zk, "far").commit(TOPIC, "0-1", 0)
        # "far": the same ranges, but a counter bound below them (another exporter).
        async with exporter(zookeeper) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            samples = await scrape(server)
            status = json.loads((await get(server, "/status/g"))[1])
        counter = MessageCounter(max_range_bytes=100)
        async with exporter(zookeeper, message_counter=counter) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            bounded = await scrape(server)

    def exact(partition: int) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((*partition_key(0, partition), ("method", "exact"))))

    lags = by_labels(samples, "kafka07_group_partition_lag_messages", group="g")
    assert lags == {exact(0): second, exact(1): 9}
    assert value(samples, "kafka07_group_lag_messages", group="g", topic=TOPIC) == second + 9
    assert value(samples, "kafka07_group_lag_messages", group="h", topic=TOPIC) == first + second
    rows = {f"{p['broker_id']}-{p['partition']}": p for p in status["partitions"]}
    assert rows["0-0"]["lag_messages"] == second
    assert rows["0-0"]["lag_messages_method"] == "exact"
    assert rows["0-0"]["lag"] == end0 - middle
    assert rows["0-1"]["lag_messages"] == 9
    assert status["total_lag_messages"] == second + 9
    assert status["total_lag_messages_method"] == "exact"

    far = by_labels(bounded, "kafka07_group_partition_lag_messages", group="far")
    assert {dict(k)["method"] for k in far} == {"estimate"}
    assert len(far) == 2
    assert all(v > 0 for v in far.values())
    assert value(bounded, "kafka07_group_lag_messages", group="far", topic=TOPIC) == sum(
        far.values()
    )


async def test_refresh_time_with_and_without_counting(kafka_cluster: Any, zookeeper: str) -> None:
    """With a backlog far beyond one refresh's budget, a refresh counting messages takes
    at most the counting's time bound more than one that does not (refresh_bytes=0):
    the exporter stays fresh."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=4) as cluster,
        ZooKeeper(zookeeper) as zk,
    ):
        (broker,) = cluster.running
        async with await BrokerConnection.open(
            BrokerAddress(0, broker.host, broker.port)
        ) as connection:
            block = encode_message_set(payloads("big", 1000, 1000))
            for partition in range(4):
                for _ in range(4):
                    await write(connection, partition, block, timeout=30)
        for partition in range(4):
            await GroupRegistry(zk, "g").commit(TOPIC, f"0-{partition}", 0)
        timings = {}
        stats = {}
        for name, counter in (
            ("without", MessageCounter(refresh_bytes=0)),
            ("with", MessageCounter(refresh_bytes=4 << 20, max_seconds=1.0)),
        ):
            monitor = ClusterMonitor(zookeeper, message_counter=counter, interval_ms=60_000)
            async with monitor:
                assert await monitor.wait_refreshed(20)
                timings[name] = monitor.state.refresh_seconds
                stats[name] = counter.stats
                (group,) = monitor.state.groups
                assert len(group.partitions) == 4
                assert all(p.lag == 4 * len(block) for p in group.partitions)
    assert stats["without"].bytes_read == 0
    assert 0 < stats["with"].bytes_read <= 4 << 20
    assert stats["with"].exhausted
    assert timings["without"] is not None
    assert timings["with"] is not None
    assert timings["with"] < timings["without"] + 2.5, timings
    print(f"\nrefresh without counting {timings['without']:.3f} s, with {timings['with']:.3f} s")


async def test_counter_estimates_an_offset_inside_a_message(cluster: KafkaCluster) -> None:
    """A committed offset that is not a message boundary (a tool wrote it) is never
    counted from: estimated, while another group's range on the partition stays exact,
    whether the offset is met inside the counted span or past its end."""
    (broker,) = cluster.running
    tp = TopicPartition(TOPIC, broker.broker_id, 0)
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        written, end = await write_mixed(connection, 0, "m")
        counter = MessageCounter(chunk_bytes=1024)
        inside = 7  # inside the first message (50 bytes)
        for committed in ({0, inside}, {0}, {0, inside}):  # past the span's end, then inside
            ranges = {tp: PartitionRange(0, end, frozenset(committed))}
            lags = await counter.refresh(pool, address_of(cluster), ranges)
            assert lags[(tp, 0)] == MessageLag(written, EXACT)
            if inside in committed:
                lag = lags[(tp, inside)]
                assert lag is not None
                assert lag.method == "estimate"
                assert lag.messages > 0


async def test_counter_estimates_each_partition_from_its_own_messages(
    cluster: KafkaCluster,
) -> None:
    """With a budget that ends after the first fetches, each partition is still
    estimated from a sample of its own messages (one gzip-compressed, one plain: a
    topic's mean would be several times off for both)."""
    (broker,) = cluster.running
    async with (
        await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port)) as connection,
        ConnectionPool() as pool,
    ):
        ends = {}
        for partition, codec in ((0, "gzip"), (1, "none")):
            for i in range(20):  # 20 sets of 50 messages of 100 bytes
                values = payloads(f"{partition}-{i}", 50, 100)
                ends[partition] = await write(
                    connection, partition, encode_message_set(values, compression=codec)
                )
        ranges = {
            TopicPartition(TOPIC, 0, p): PartitionRange(0, end, frozenset({0}))
            for p, end in ends.items()
        }
        counter = MessageCounter(refresh_bytes=2 * 4096, sample_bytes=4096, chunk_bytes=1 << 20)
        lags = await counter.refresh(pool, address_of(cluster), ranges)
        assert counter.stats.exhausted
        for lag in lags.values():
            assert lag is not None
            assert lag.method == "estimate"
            assert abs(lag.messages - 1000) <= 100, lags


def test_every_metric_has_a_row_in_the_monitoring_page() -> None:
    """The monitoring page's table names every series the collector yields (the two
    message series included), so rules and dashboards can be written from it."""
    page = (Path(__file__).resolve().parents[1] / "docs/operations/monitoring.md").read_text()
    assert "kafka07_group_partition_lag_messages" in METRICS
    assert "kafka07_group_lag_messages" in METRICS
    missing = [name for name in METRICS if f"| `{name}` |" not in page]
    assert missing == []
