"""The ``kafka07`` data source on a real local Spark, embedded brokers and ZooKeeper.

One SparkSession (local[2], loopback only) serves the module. Brokers run on the test's
event loop, so every Spark action runs in a thread (``spark_call``) while the loop
keeps serving the Python workers' fetches.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession

from aiokafka07 import Producer, SimpleConsumer
from aiokafka07.partitioner import default_partition
from aiokafka07.protocol import LATEST
from aiokafka07.spark import activate, local_session
from aiokafka07.testing import KafkaCluster
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .test_fetch_size import INNER_PARTIAL_SET, write_inner_partial_wrapper

T = TypeVar("T")

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


async def test_a_start_inside_a_message_fails_the_task_with_the_typed_error(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    """The issue's ``startingOffsets={"1-0": 5}`` spun a task for 12 minutes: the "size"
    read inside a message is larger than the log. The task now fails at once with the
    typed error naming the offset; a micro-batch cut on the driver does too."""
    async with kafka_cluster(1, num_partitions=1):
        values = [b"\x00\xd3\x4c\x8f view %d" % i for i in range(200)]  # 13,847,695 as a size
        await produce(zookeeper, "torn", values, "none", [(0, 0)])
        inside = json.dumps({"0-0": 10})  # the first message's payload
        started = time.monotonic()
        with pytest.raises(Exception, match=r"torn/0 at offset 10: .*not the offset of a message"):
            await rows(await load(spark, zookeeper, topic="torn", startingOffsets=inside))
        options = {"topic": "torn", "startingOffsets": inside, "maxBytesPerTrigger": "1000"}
        query = await spark_call(
            start_stream, spark, zookeeper, tmp_path / "cp", tmp_path / "sink", options
        )
        with pytest.raises(Exception, match=r"torn/0-0 at offset 10: .*not the offset of a"):
            await spark_call(query.awaitTermination, 60)
        assert time.monotonic() - started < 60


async def test_corrupt_data_inside_a_wrapper_fails_the_task_with_the_typed_error(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    """A wrapper whose inner set starts with a partial entry (the issue: 41,079 fetches
    in 10 s) fails the task at once, naming the wrapper's offset."""
    async with kafka_cluster(1, num_partitions=1) as cluster:
        await produce(zookeeper, "wrapped", INNER_PARTIAL_SET, "none", [(0, 0)], batch_size=3)
        at = write_inner_partial_wrapper(cluster.broker(0).config.log_dir, "wrapped")
        with pytest.raises(Exception, match=rf"wrapped/0 at offset {at}: in the compressed"):
            await rows(await load(spark, zookeeper, topic="wrapped"))


async def test_bad_options_fail_the_action_naming_the_option(
    spark: SparkSession, zookeeper: str
) -> None:
    df = spark.read.format("kafka07").option("zookeeper", zookeeper).load()
    with pytest.raises(Exception, match="'topic'"):
        await spark_call(df.collect)
    df = await load(spark, zookeeper, topic="t", startingOffset="earliest")  # typo
    with pytest.raises(Exception, match="'startingoffset'"):
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


async def test_unreachable_zookeeper_is_a_clear_job_error(spark: SparkSession) -> None:
    df = await load(spark, "127.0.0.1:1", topic="t", requestTimeoutMs="2000")
    with pytest.raises(Exception, match=r"ZooKeeper|127\.0\.0\.1:1"):
        await spark_call(df.collect)


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


async def test_topic_column_routes_rows(
    spark: SparkSession, kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1) as cluster:
        frame = spark.createDataFrame(
            [("left", b"1"), ("right", b"2"), ("left", b"3")], "topic string, value binary"
        )
        await spark_call(
            frame.write.format("kafka07").option("zookeeper", zookeeper).mode("append").save
        )
        assert sorted(r[4] for r in await log_contents(cluster, "left")) == [b"1", b"3"]
        assert [r[4] for r in await log_contents(cluster, "right")] == [b"2"]


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


async def test_undeliverable_write_fails_the_job(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("a",), ("b",)], "value string")
    with pytest.raises(Exception, match=r"ProducerClosedError|not delivered"):
        await spark_call(
            frame.write.format("kafka07")
            .option("brokers", "0:127.0.0.1:1")  # nothing listens there
            .option("topic", "t")
            .option("requestTimeoutMs", "2000")
            .mode("append")
            .save
        )


def test_format_is_found_without_registering(tmp_path: Path) -> None:
    """PySpark finds the source through the installed ``pyspark_kafka07`` module."""
    script = tmp_path / "lookup.py"
    script.write_text(
        "import os, sys\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "os.environ['SPARK_LOCAL_IP'] = '127.0.0.1'\n"
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
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "struct<topic:string,broker_id:int,partition:int,offset:bigint,value:binary>" in (
        result.stdout
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
