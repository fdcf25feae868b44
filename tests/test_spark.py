"""The ``kafka07`` data source on a real local Spark, embedded brokers and ZooKeeper.

One SparkSession (local[2], loopback only) serves the module. Brokers run on the test's
event loop, so every Spark action runs in a thread (``spark_call``) while the loop
keeps serving the Python workers' fetches.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark.sql import DataFrame, SparkSession

from aiokafka07 import Producer, SimpleConsumer
from aiokafka07.partitioner import default_partition
from aiokafka07.protocol import LATEST
from aiokafka07.spark import activate, local_session
from aiokafka07.spark.reader import SCHEMA, OffsetRange, RangeEndError, read_range
from aiokafka07.spark.runtime import WorkerRuntime
from aiokafka07.testing import KafkaCluster
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .test_fetch_size import INNER_PARTIAL_SET, write_inner_partial_wrapper

T = TypeVar("T")

REPOSITORY = Path(__file__).resolve().parent.parent

Row = tuple[str, int, int, int, bytes]  # topic, broker, partition, offset, value


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_session(
        2,
        "aiokafka07-tests",
        {"spark.driver.memory": "1g", "spark.python.worker.reuse": "true"},
    )
    yield session
    session.stop()


async def spark_call(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking Spark call in a thread, with the session active there (writes
    need it)."""
    session = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

    def call() -> T:
        activate(session)
        return fn(*args)

    return await asyncio.to_thread(call)


async def load(spark: SparkSession, zookeeper: str, **options: str) -> DataFrame:
    """``spark.read.format("kafka07")...load()``, off the loop: Spark may plan the read
    (asking the brokers on this loop for offsets) while loading."""

    def build() -> DataFrame:
        r = spark.read.format("kafka07").option("zookeeper", zookeeper)
        for key, value in options.items():
            r = r.option(key, value)
        return r.load()

    return await spark_call(build)


async def rows(df: DataFrame) -> list[Row]:
    collected = await spark_call(df.collect)
    return sorted((r.topic, r.broker_id, r.partition, r.offset, bytes(r.value)) for r in collected)


async def log_contents(cluster: KafkaCluster, topic: str) -> list[Row]:
    """Every message of ``topic`` on every broker-partition, read with the SimpleConsumer."""
    found: list[Row] = []
    for broker in cluster.running:
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker.broker_id) as c:
            for partition in range(broker.config.partitions_for(topic)):
                async for m in c.messages(topic, partition, 0):
                    found.append((topic, broker.broker_id, partition, m.offset, m.value))
    return sorted(found)


async def produce(
    zookeeper: str,
    topic: str,
    values: list[bytes],
    compression: str = "none",
    partitions: list[tuple[int, int]] | None = None,
    batch_size: int = 1000,
) -> None:
    async with Producer(
        zookeeper=zookeeper, compression=compression, linger_ms=1, batch_size=batch_size
    ) as producer:
        for i, value in enumerate(values):
            target = partitions[i % len(partitions)] if partitions else None
            await producer.send(topic, value, partition=target)


SPREAD = [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
async def test_batch_read_across_two_brokers_equals_what_was_produced(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, codec: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        values = [b"view-%05d" % i for i in range(4000)]
        await produce(zookeeper, "views", values, codec, SPREAD)
        expected = await log_contents(cluster, "views")
        got = await rows(await load(spark, zookeeper, topic="views"))
    assert len(expected) == 4000
    assert got == expected  # same offsets (0.7.2 semantics), same values, nothing else
    assert sorted(r[4] for r in got) == values


async def test_ranges_split_at_segment_starts_and_explicit_offsets(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=1, log_file_size=4096) as cluster:
        await produce(zookeeper, "segs", [b"x" * 200] * 300, "none", [(0, 0)], batch_size=10)
        expected = await log_contents(cluster, "segs")
        broker = cluster.running[0]
        async with SimpleConsumer(broker.host, broker.port) as c:
            boundaries = sorted(await c.offsets_before("segs", 0, LATEST, 1000))
        assert len(boundaries) > 10  # many segments
        df = await load(spark, zookeeper, topic="segs", maxBytesPerPartition="20000")
        assert await spark_call(lambda: df.rdd.getNumPartitions()) > 2
        assert await rows(df) == expected
        # Explicit offsets: a middle stretch, from one segment start to another.
        start, end = boundaries[3], boundaries[8]
        df = await load(
            spark,
            zookeeper,
            topic="segs",
            startingOffsets=json.dumps({"0-0": start}),
            endingOffsets=json.dumps({"segs": {"0-0": end}}),
        )
        middle = await rows(df)
    assert middle
    assert middle == [r for r in expected if start < r[3] <= end]


async def test_out_of_range_start_fails_or_starts_at_the_earliest(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1):
        await produce(zookeeper, "lost", [b"a", b"b"], "none", [(0, 0)])
        beyond = json.dumps({"0-0": 10_000})
        with pytest.raises(Exception, match="failOnDataLoss"):
            await rows(await load(spark, zookeeper, topic="lost", startingOffsets=beyond))
        df = await load(
            spark, zookeeper, topic="lost", startingOffsets=beyond, failOnDataLoss="false"
        )
        assert [r[4] for r in await rows(df)] == [b"a", b"b"]


async def test_a_start_inside_a_message_fails_the_query_at_once(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    """The issue's ``startingOffsets={"1-0": 5}`` spun a task for 12 minutes: the "size"
    read inside a message is larger than the log. Planning now refuses the offset, for a
    batch read and for a stream, naming topic, partition and offset, within seconds
    (the task-side check, for data that changes after planning, is
    ``test_corrupt_data_inside_a_wrapper_fails_the_task_with_the_typed_error``)."""
    async with kafka_cluster(1, num_partitions=1):
        values = [b"\x00\xd3\x4c\x8f view %d" % i for i in range(200)]  # 13,847,695 as a size
        await produce(zookeeper, "torn", values, "none", [(0, 0)])
        inside = json.dumps({"0-0": 10})  # the first message's payload
        refused = r"offset 10 of torn/0-0 is not a message boundary"
        started = time.monotonic()
        with pytest.raises(Exception, match=refused):
            await rows(await load(spark, zookeeper, topic="torn", startingOffsets=inside))
        options = {"topic": "torn", "startingOffsets": inside, "maxBytesPerTrigger": "1000"}

        def run_stream() -> None:  # fails at start, or while planning the first batch
            start_stream(
                spark, zookeeper, tmp_path / "cp", tmp_path / "sink", options
            ).awaitTermination(60)

        with pytest.raises(Exception, match=refused):
            await spark_call(run_stream)
        assert time.monotonic() - started < 60


async def test_corrupt_data_inside_a_wrapper_fails_the_task_with_the_typed_error(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    """A wrapper whose inner set starts with a partial entry (the issue: 41,079 fetches
    in 10 s) fails the task at once, naming the wrapper's offset."""
    async with kafka_cluster(1, num_partitions=1) as cluster:
        await produce(zookeeper, "wrapped", INNER_PARTIAL_SET, "none", [(0, 0)], batch_size=3)
        at = write_inner_partial_wrapper(cluster.broker(0).config.log_dir, "wrapped")
        with pytest.raises(Exception, match=rf"wrapped/0-0 at offset {at}: in the compressed"):
            await rows(await load(spark, zookeeper, topic="wrapped"))


async def test_bad_options_fail_load_and_save_naming_the_option(
    spark: SparkSession, zookeeper: str
) -> None:
    with pytest.raises(Exception, match="'topic'"):
        await load(spark, zookeeper)
    with pytest.raises(Exception, match="'startingoffset'"):
        await load(spark, zookeeper, topic="t", startingOffset="earliest")  # typo
    # Spark's Kafka options: the error names what to use instead.
    with pytest.raises(Exception, match="'zookeeper'"):
        await load(spark, zookeeper, topic="t", **{"kafka.bootstrap.servers": "127.0.0.1:9092"})
    with pytest.raises(Exception, match="'maxBytesPerTrigger'"):
        await load(spark, zookeeper, topic="t", maxOffsetsPerTrigger="1000")
    # Right for a stream, wrong for a batch: load() passes, the batch read names it.
    df = await load(spark, zookeeper, topic="t", group="g")
    with pytest.raises(Exception, match="'group' applies to streaming"):
        await spark_call(df.collect)
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="'compression'"):
        await spark_call(
            frame.write.format("kafka07")
            .option("zookeeper", zookeeper)
            .option("topic", "t")
            .option("compression", "zip")
            .mode("append")
            .save
        )
    frame = spark.createDataFrame([(1,)], "payload int")
    with pytest.raises(Exception, match="'value' column"):
        await spark_call(
            frame.write.format("kafka07").option("zookeeper", zookeeper).mode("append").save
        )
    # Spark's Kafka sink writes headers; 0.7 has none: refused, not dropped.
    frame = spark.createDataFrame(
        [("v", [("h", b"1")])], "value string, headers array<struct<key:string,value:binary>>"
    )
    with pytest.raises(Exception, match=r"column 'headers': Kafka 0\.7 messages have no headers"):
        await spark_call(
            frame.write.format("kafka07")
            .option("zookeeper", zookeeper)
            .option("topic", "t")
            .mode("append")
            .save
        )


async def test_a_batch_only_option_stops_a_stream_with_its_own_error(
    spark: SparkSession, zookeeper: str, tmp_path: Path
) -> None:
    """``endingOffsets`` on a stream: Spark's load() does not say it reads a stream, so
    the query's start refuses it, with the option's error alone (PySpark's own
    UnboundLocalError followed it)."""
    options = {"topic": "t", "endingOffsets": "latest"}

    def run_stream() -> None:
        query = start_stream(spark, zookeeper, tmp_path / "cp", tmp_path / "sink", options)
        query.awaitTermination(60)  # raises what stopped the query

    with pytest.raises(Exception, match="'endingOffsets' applies to batch reads only") as info:
        await spark_call(run_stream)
    assert "UnboundLocalError" not in str(info.value)


async def test_a_stream_of_a_topic_that_does_not_exist_fails_at_its_start(
    spark: SparkSession, zookeeper: str, tmp_path: Path
) -> None:
    """As a batch read does, naming the topic, where it looked and the topics there
    (the stream used to end at once, without an error, having found no partition)."""

    def run_stream() -> None:
        options = {"topic": "nope"}
        query = start_stream(spark, zookeeper, tmp_path / "cp", tmp_path / "sink", options)
        query.awaitTermination(60)  # raises what stopped the query

    chroot = "/" + zookeeper.partition("/")[2]
    with pytest.raises(Exception, match="topic 'nope' does not exist") as info:
        await spark_call(run_stream)
    assert (
        f"no broker has registered it under /brokers/topics in ZooKeeper at {zookeeper} "
        f"(chroot {chroot}) (topics: none)"
    ) in str(info.value)


async def test_planning_names_what_the_cluster_does_not_have(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    """Every mistake fails when the read is planned (no task runs), naming the topic,
    broker-partition or offset, in well under the time one task would take."""
    async with kafka_cluster(1, num_partitions=2):
        await produce(zookeeper, "known", [b"x" * 20] * 10, "none", [(0, 0)])

        async def fails(match: str, **options: str) -> None:
            df = await load(spark, zookeeper, **options)
            started = asyncio.get_running_loop().time()
            with pytest.raises(Exception, match=match):
                await spark_call(df.collect)
            assert asyncio.get_running_loop().time() - started < 60

        await fails(r"topic 'nope' does not exist.*topics: known", topic="nope")
        await fails(r"option 'topicPattern': no topic matches", topicPattern="zz.*")
        await fails(
            r"option 'startingOffsets' names known/7-9, which is not a broker-partition",
            topic="known",
            startingOffsets='{"7-9": 0}',
        )
        await fails(
            r"option 'assign' names known/0-5, which is not a broker-partition",
            assign='{"known": ["0-5"]}',
        )
        # "Message 5": an offset is a byte position, and 5 is inside the first message.
        await fails(
            r"option 'startingOffsets': offset 5 of known/0-0 is not a message boundary",
            topic="known",
            startingOffsets='{"0-0": 5}',
        )
        await fails(
            r"option 'endingOffsets': offset 33 of known/0-0 is not a message boundary",
            topic="known",
            endingOffsets='{"0-0": 33}',
        )
        # A user-given schema: a column the source does not have is named.
        df = spark.read.format("kafka07").schema("value binary, key string")
        df = df.option("zookeeper", zookeeper).option("topic", "known").load()
        with pytest.raises(Exception, match="'key string'"):
            await spark_call(df.collect)
        # ... and one that selects some columns reads just those.
        df = spark.read.format("kafka07").schema("offset long, value binary")
        df = df.option("zookeeper", zookeeper).option("topic", "known").load()
        picked = await spark_call(df.collect)
        assert sorted((r.offset, bytes(r.value)) for r in picked) == [
            (30 * (i + 1), b"x" * 20) for i in range(10)
        ]


async def test_unreachable_cluster_fails_reads_and_writes_when_planned(
    spark: SparkSession,
) -> None:
    df = await load(spark, "127.0.0.1:1", topic="t", requestTimeoutMs="2000")
    with pytest.raises(Exception, match=r"ZooKeeper session at 127\.0\.0\.1:1"):
        await spark_call(df.collect)
    frame = spark.createDataFrame([("a",), ("b",)], "value string")
    for where, address in (("zookeeper", "127.0.0.1:1"), ("brokers", "0:127.0.0.1:1")):
        started = asyncio.get_running_loop().time()
        with pytest.raises(Exception, match=f"kafka07 cannot write to {address}"):
            await spark_call(
                frame.write.format("kafka07")
                .option(where, address)  # nothing listens there
                .option("topic", "t")
                .option("requestTimeoutMs", "2000")
                .mode("append")
                .save
            )
        # On the driver, once: not every task four times over.
        assert asyncio.get_running_loop().time() - started < 20


async def test_write_then_read_back_with_keys_on_java_partitions(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        # Register the topic on both brokers first, so keyed routing sees 4 partitions.
        await produce(zookeeper, "out", [b"seed"] * 4, "none", SPREAD)
        data = [(f"user-{i % 37}", f"event {i}") for i in range(3000)]
        frame = spark.createDataFrame(data, "key string, value string").repartition(3)
        await spark_call(
            frame.write.format("kafka07")
            .option("zookeeper", zookeeper)
            .option("topic", "out")
            .option("compression", "gzip")
            .mode("append")
            .save
        )
        got = [r for r in await log_contents(cluster, "out") if r[4] != b"seed"]
    assert sorted(r[4] for r in got) == sorted(v.encode() for _, v in data)
    where = {r[4]: (r[1], r[2]) for r in got}
    for key, value in data:
        assert where[value.encode()] == SPREAD[default_partition(key, len(SPREAD))], key


async def test_topic_and_partition_columns_route_rows(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        frame = spark.createDataFrame(
            [("left", b"1"), ("right", b"2"), ("left", b"3")], "topic string, value binary"
        )
        await spark_call(
            frame.write.format("kafka07").option("zookeeper", zookeeper).mode("append").save
        )
        assert sorted(r[4] for r in await log_contents(cluster, "left")) == [b"1", b"3"]
        assert [r[4] for r in await log_contents(cluster, "right")] == [b"2"]
        # A kafka07 read written back with the 'topic' option: the option overrides the
        # rows' topic column (Spark's Kafka sink does the same), placements are kept.
        read = await load(spark, zookeeper, topic="left")
        await spark_call(
            read.write.format("kafka07")
            .option("zookeeper", zookeeper)
            .option("topic", "copy")
            .mode("append")
            .save
        )
        left = await log_contents(cluster, "left")
        assert sorted(r[4] for r in left) == [b"1", b"3"]  # nothing written back there
        copy = await log_contents(cluster, "copy")
        assert sorted((r[1], r[2], r[4]) for r in copy) == sorted((r[1], r[2], r[4]) for r in left)
        # Explicit placement: "<broker>-<partition>", or broker_id and partition ints
        # (as a kafka07 read returns them); a null partition leaves it to the key.
        placed = spark.createDataFrame(
            [("1-1", b"a"), ("0-1", b"b"), ("1-0", b"c")], "partition string, value binary"
        )
        copied = spark.createDataFrame(
            [(1, 1, b"d"), (0, 0, b"e")], "broker_id int, partition int, value binary"
        )
        for frame in (placed, copied):
            await spark_call(
                frame.write.format("kafka07")
                .option("zookeeper", zookeeper)
                .option("topic", "placed")
                .mode("append")
                .save
            )
        where = {r[4]: (r[1], r[2]) for r in await log_contents(cluster, "placed")}
        assert where == {b"a": (1, 1), b"b": (0, 1), b"c": (1, 0), b"d": (1, 1), b"e": (0, 0)}
        with pytest.raises(Exception, match="'broker_id'"):
            await spark_call(
                spark.createDataFrame([(1, b"f")], "partition int, value binary")
                .write.format("kafka07")
                .option("zookeeper", zookeeper)
                .option("topic", "placed")
                .mode("append")
                .save
            )


async def log_order(cluster: KafkaCluster, topic: str) -> dict[tuple[int, int], list[bytes]]:
    """The values of each broker-partition of ``topic`` in log order."""
    found: dict[tuple[int, int], list[bytes]] = {}
    for broker in cluster.running:
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker.broker_id) as c:
            for partition in range(broker.config.partitions_for(topic)):
                found[(broker.broker_id, partition)] = [
                    m.value async for m in c.messages(topic, partition, 0)
                ]
    return found


async def produce_mixed(zookeeper: str, topic: str, rounds: int, per_round: int) -> None:
    """Plain messages next to gzip and snappy wrappers on broker-partitions 0-0 and 0-1:
    the messages of a wrapper share an offset with each other and with the message
    before the wrapper."""
    for r in range(rounds):
        for codec in ("none", "gzip", "snappy"):
            values = [b"%s-%02d-%04d" % (codec.encode(), r, i) for i in range(per_round)]
            await produce(zookeeper, topic, values, codec, [(0, 0), (0, 1)], batch_size=25)


WITH_SEQ = tuple[int, int, int, int, bytes]  # broker, partition, offset, offset_seq, value


async def rows_with_seq(df: DataFrame) -> list[WITH_SEQ]:
    collected = await spark_call(df.collect)
    return sorted(
        (r.broker_id, r.partition, r.offset, r.offset_seq, bytes(r.value)) for r in collected
    )


async def test_offset_seq_makes_rows_unique_and_cuts_inside_a_segment_change_nothing(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2) as cluster:
        await produce_mixed(zookeeper, "mixed", 4, 300)
        order = await log_order(cluster, "mixed")
        whole = await rows_with_seq(await load(spark, zookeeper, topic="mixed"))
        # Unique, and (offset, offset_seq) is log order, though offsets repeat.
        assert len(whole) == 4 * 3 * 300
        assert len({r[:4] for r in whole}) == len(whole)
        assert len({r[:3] for r in whole}) < len(whole) / 2
        for (broker, partition), values in order.items():
            assert [r[4] for r in whole if r[:2] == (broker, partition)] == values
        # Each partition is one segment; cut inside it, the read is the same.
        broker = cluster.running[0]
        async with SimpleConsumer(broker.host, broker.port) as c:
            assert len(await c.offsets_before("mixed", 0, LATEST, 100)) == 2  # start and end
            (end,) = await c.offsets_before("mixed", 0, LATEST, 1)
        split = await load(
            spark,
            zookeeper,
            topic="mixed",
            maxBytesPerPartition=str(end // 5),
            maxMessageSize="2000",  # no wrapper here is larger (25 short messages)
        )
        assert await spark_call(lambda: split.rdd.getNumPartitions()) >= 8
        assert await rows_with_seq(split) == whole
        # A range cut where no message starts fails its task, loudly.
        runtime = WorkerRuntime()
        try:
            first = whole[0][2]  # the end of 0-0's first entry
            # A 30 s request timeout (a 5 ms one, left from when it was seconds, timed out
            # under load before the cut was reached).
            cut = OffsetRange(zookeeper, "mixed", 0, 0, broker.host, broker.port, 0, first + 5,
                              1 << 20, 30_000, True)  # fmt: skip
            with pytest.raises(RangeEndError, match=f"{first + 5} is not a message boundary"):
                await asyncio.to_thread(
                    lambda: list(runtime.iterate(read_range(cut, runtime, SCHEMA)))
                )
        finally:
            runtime.shutdown()


async def test_assign_and_starting_timestamps_read_what_they_name(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2, log_file_size=1000):
        # A message larger than a segment makes the next write start a new segment.
        big1, big2 = b"1" * 1500, b"2" * 1500
        old = [b"old-%03d" % i for i in range(20)]
        for written in ([big1], old, [big2]):  # one write each
            await produce(zookeeper, "timed", written, "none", [(0, 0)])
        await produce(zookeeper, "timed", [b"other"], "none", [(0, 1)])
        loop = asyncio.get_running_loop()
        when = int(time.time() * 1000)  # every segment so far was last written before
        deadline = loop.time() + 10
        while int(time.time() * 1000) < when + 50:  # file times are a few ms coarse
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        new = [b"new-%03d" % i for i in range(10)]
        await produce(zookeeper, "timed", new, "none", [(0, 0)])

        async def values(**options: str) -> list[tuple[int, int, bytes]]:
            df = await load(spark, zookeeper, **options)
            return sorted((r[1], r[2], r[4]) for r in await rows(df))

        assert await values(assign='{"timed": ["0-1"]}') == [(0, 1, b"other")]
        # 0.7 knows times per segment: the read starts at the newest segment start
        # written at or before the time, so it misses nothing after it.
        since = sorted([(0, 0, v) for v in [*old, big2, *new]] + [(0, 1, b"other")])
        assert await values(topic="timed", startingTimestamp=str(when)) == since
        by_partition = json.dumps({"0-0": when})  # 0-1: the default, earliest
        assert await values(topic="timed", startingOffsetsByTimestamp=by_partition) == since
        assert await values(subscribe="timed", startingTimestamp="0") == sorted(
            [(0, 0, v) for v in [big1, *old, big2, *new]] + [(0, 1, b"other")]
        )


async def test_filters_on_broker_and_partition_are_pushed_down(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2) as cluster:
        await produce(zookeeper, "pushed", [b"v%02d" % i for i in range(40)], "none", SPREAD[:2])
        broker = cluster.running[0]
        # Broker 1 is listed but nothing listens there: planning that asks it fails.
        brokers = f"0:{broker.host}:{broker.port},1:127.0.0.1:1"

        async def read(where: str, pushdown: str) -> list[Row]:
            def build() -> DataFrame:
                return (
                    spark.read.format("kafka07")
                    .option("brokers", brokers)
                    .option("partitionsPerBroker", "2")
                    .option("topic", "pushed")
                    .option("requestTimeoutMs", "2000")
                    .option("filterPushdown", pushdown)
                    .load()
                    .where(where)
                )

            return await rows(await spark_call(build))

        with pytest.raises(Exception, match=r"spark\.sql\.python\.filterPushdown\.enabled"):
            await read("broker_id = 0", "true")  # PySpark refuses it while its switch is off
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        try:
            got = await read("broker_id = 0 and partition in (1) and topic = 'pushed'", "true")
            assert [r[4] for r in got] == [b"v%02d" % i for i in range(1, 40, 2)]
            assert {r[1:3] for r in got} == {(0, 1)}
            with pytest.raises(Exception, match=r"broker 1 at 127\.0\.0\.1:1"):
                await read("broker_id = 0", "false")  # Spark filters after the read
        finally:
            spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def start_stream(
    spark: SparkSession, zookeeper: str, checkpoint: Path, sink: Path, options: dict[str, str]
) -> Any:
    r = spark.readStream.format("kafka07").option("zookeeper", zookeeper)
    for key, value in options.items():
        r = r.option(key, value)
    return (
        r.load()
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


async def test_stream_restarts_from_its_checkpoint_without_gaps_or_duplicates(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    async with kafka_cluster(2, num_partitions=2) as cluster:
        # First run: data on broker 0 only.
        await produce(zookeeper, "clicks", [b"a%04d" % i for i in range(1500)], "none", [(0, 0)])
        options = {
            "topic": "clicks",
            "startingOffsets": "earliest",
            "maxBytesPerTrigger": "8000",  # several micro-batches, cut between messages
            "group": "spark-clicks",
        }
        query = await spark_call(start_stream, spark, zookeeper, checkpoint, sink, options)
        await spark_call(query.awaitTermination)
        assert query.exception() is None
        batches = len(query.recentProgress)
        assert batches > 2
        # More data, on a broker-partition the stream has not seen yet, and on the old one.
        await produce(zookeeper, "clicks", [b"b%04d" % i for i in range(700)], "gzip", [(1, 1)])
        await produce(zookeeper, "clicks", [b"c%04d" % i for i in range(300)], "snappy", [(0, 0)])
        query = await spark_call(start_stream, spark, zookeeper, checkpoint, sink, options)
        await spark_call(query.awaitTermination)
        assert query.exception() is None
        expected = await log_contents(cluster, "clicks")
        got = await rows(spark.read.parquet(str(sink)))
        ends = {
            f"{b}-{p}": max([0] + [r[3] for r in expected if r[1:3] == (b, p)]) for b, p in SPREAD
        }
        async with ZooKeeper(zookeeper) as zk:
            group = GroupRegistry(zk, "spark-clicks")
            # Spark commits a micro-batch to its source when it plans the next one, so
            # the group trails by one batch until the query runs again.
            trailing = await group.offsets("clicks")
            assert all(0 <= trailing[name] <= end for name, end in ends.items())
            assert trailing["0-0"] > 0
            query = await spark_call(start_stream, spark, zookeeper, checkpoint, sink, options)
            await spark_call(query.awaitTermination)
            assert await group.offsets("clicks") == ends
    assert len(expected) == 2500
    assert got == expected  # every message once: no gap, no duplicate, same offsets


DRIVER = Path(__file__).with_name("spark_stream_driver.py")


def batch_under_way(checkpoint: Path, after: int) -> int | None:
    """A micro-batch later than ``after`` that has started (its offsets are in the
    checkpoint) and not finished (no commit yet), if there is one."""
    started = [int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")]
    for batch in sorted(started, reverse=True):
        if batch > after and not (checkpoint / "commits" / str(batch)).exists():
            return batch
    return None


@pytest.mark.timeout(1200)  # three drivers, each starting Spark: minutes on a busy machine
async def test_stream_is_exactly_once_with_its_driver_killed_twice_mid_batch(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    """The driver (a process of its own) is SIGKILLed twice while a micro-batch runs;
    restarted from its checkpoint, the query's sink holds every message exactly once,
    with the same (offset, offset_seq) as a batch read."""
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    loop = asyncio.get_running_loop()
    async with kafka_cluster(1, num_partitions=2):
        await produce_mixed(zookeeper, "killed", 1, 300)
        killed = -1
        for kill in (True, True, False):
            driver = await asyncio.create_subprocess_exec(
                sys.executable, str(DRIVER), zookeeper, "killed", str(checkpoint), str(sink),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            try:
                if not kill:
                    _, stderr = await asyncio.wait_for(driver.communicate(), 600)
                    assert driver.returncode == 0, stderr.decode()[-3000:]
                    break
                deadline = loop.time() + 400  # Spark's start, on a busy machine
                while (batch := batch_under_way(checkpoint, killed)) is None:
                    assert driver.returncode is None, (await driver.communicate())[1][-3000:]
                    assert loop.time() < deadline, "no micro-batch started"
                    await asyncio.sleep(0.02)
                os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and its workers
                await driver.wait()
                assert not (checkpoint / "commits" / str(batch)).exists()  # mid-batch
                killed = batch
            finally:
                if driver.returncode is None:
                    os.killpg(driver.pid, signal.SIGKILL)
                    await driver.wait()
        assert killed >= 1
        expected = await rows_with_seq(await load(spark, zookeeper, topic="killed"))
        got = await rows_with_seq(spark.read.parquet(str(sink)))
    assert len(expected) == 3 * 300
    assert got == expected


async def test_streaming_write_copies_a_topic(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    async with kafka_cluster(1, num_partitions=2) as cluster:
        values = [b"m%04d" % i for i in range(1200)]
        await produce(zookeeper, "src", values, "none", [(0, 0), (0, 1)])
        query = await spark_call(
            lambda: (
                spark.readStream.format("kafka07")
                .option("zookeeper", zookeeper)
                .option("topic", "src")
                .option("startingOffsets", "earliest")
                .load()
                .select("value")
                .writeStream.format("kafka07")
                .option("zookeeper", zookeeper)
                .option("topic", "dst")
                .option("compression", "snappy")
                .option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True)
                .start()
            )
        )
        await spark_call(query.awaitTermination)
        assert query.exception() is None
        copied = [r[4] for r in await log_contents(cluster, "dst")]
    assert sorted(copied) == values


@pytest.mark.timeout(900)  # a build (the C accelerator) and Spark's start, when busy
def test_an_editable_install_is_found_without_registering(tmp_path: Path) -> None:
    """``pip install -e`` of a copy of the project into a fresh virtual environment, then
    ``format("kafka07")`` with no ``register()``: PySpark's lookup lists ``sys.path`` for
    ``pyspark_*`` modules, which the editable install must put there."""
    project = tmp_path / "project"
    shutil.copytree(
        REPOSITORY,
        project,
        ignore=shutil.ignore_patterns(
            ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "tests"
        ),
    )
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    # It sees this interpreter's packages (pip, setuptools, PySpark...), through a .pth
    # line per site directory, after its own. Not --system-site-packages: that shows the
    # base interpreter's, which under a virtual environment has none of them. (Their own
    # .pth files are not read, so this project's editable install here is not seen.)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    theirs = Path(subprocess.check_output([python, "-c", where], text=True).strip())
    ours = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (theirs / "outer_site_packages.pth").write_text("".join(f"{p}\n" for p in ours))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what pip installs

    def run(*command: str, cwd: Path) -> str:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        errors = [line for line in done.stderr.splitlines() if "Error" in line]
        assert done.returncode == 0, "\n".join(errors)[-3000:] or done.stderr[-3000:]
        return done.stdout

    # --no-build-isolation: no download; the build backend is this environment's
    # setuptools, which the test extra brings at the version pyproject.toml's build-system
    # needs (an isolated build, as README's install does, fetches its own instead, so
    # without the extra this environment keeps whatever the interpreter came with).
    setuptools = importlib.metadata.version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, (
        f"setuptools {setuptools} here; the test extra installs >= 77: "
        "python -m pip install -e '.[test,spark]'"
    )
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ".",
        cwd=project)  # fmt: skip
    script = tmp_path / "lookup.py"
    script.write_text(
        "import os, sys\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "os.environ['SPARK_LOCAL_IP'] = '127.0.0.1'\n"
        "import aiokafka07\n"
        "print(aiokafka07.__file__)\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]')\n"
        "         .config('spark.ui.enabled', 'false')\n"
        "         .config('spark.driver.host', '127.0.0.1')\n"
        "         .config('spark.driver.bindAddress', '127.0.0.1').getOrCreate())\n"
        "df = (spark.read.format('kafka07').option('brokers', '0:127.0.0.1:1')\n"
        "      .option('topic', 't').option('partitionsPerBroker', '1').load())\n"
        "print(df.schema.simpleString())\n"
        "spark.stop()\n"
    )
    stdout = run(python, str(script), cwd=tmp_path)
    assert str(project / "aiokafka07" / "__init__.py") in stdout  # the copy, editable
    assert (
        "struct<topic:string,broker_id:int,partition:int,offset:bigint,offset_seq:int,"
        "value:binary>" in stdout
    )


async def test_one_job_reads_one_cluster_and_writes_another(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    """Both clusters have a broker 0: each keeps its own connections in the workers."""
    other = f"{zookeeper}-target"
    async with kafka_cluster(1, num_partitions=2), kafka_cluster(1, zookeeper=other) as target:
        values = [b"copy-%04d" % i for i in range(2000)]
        await produce(zookeeper, "src", values, "gzip", [(0, 0), (0, 1)])
        source = await load(spark, zookeeper, topic="src")
        await spark_call(
            source.select("value")
            .write.format("kafka07")
            .option("zookeeper", other)
            .option("topic", "copy")
            .mode("append")
            .save
        )
        copied = [r[4] for r in await log_contents(target, "copy")]
    assert sorted(copied) == values
