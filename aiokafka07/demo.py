"""``aiokafka07 demo``: a whole pipeline on a throw-away local cluster, in a few minutes.

1. A real ZooKeeper when the machine has Debian's ``zookeeper`` package (else static
   mode, with a broker list) and two embedded brokers, each in its own process.
2. A realistic event stream: page views ``user|page|country|ms``, keyed by user (Java
   partitioning), produced by three producers with different codecs (none, gzip,
   snappy) at once.
3. A consumer group (three members, balanced through ZooKeeper) counting views per page
   live, committing offsets as a Java consumer would.
4. A Spark batch job and a Spark streaming job (``availableNow``, several micro-batches,
   progress published to ZooKeeper as group ``spark-pageviews``) computing the same
   counts through the ``kafka07`` data source, and a Spark write of the counts to the
   topic ``pageview-counts``, read back.
5. A report: whether the three counts agree, each stage's throughput, and where the
   data went. Everything started is stopped and removed at the end.

Exit status 0 when every path agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .connection import BrokerAddress
from .group import Consumer
from .pool import ConnectionPool
from .producer import Producer
from .protocol import LATEST
from .simple import SimpleConsumer
from .testing.process import start_broker_process
from .testing.zookeeper_server import ZooKeeperNotInstalled, ZooKeeperServer, zookeeper_classpath

__all__ = ["configure", "run"]

LOG_LEVEL = logging.WARNING

TOPIC = "pageviews"
COUNTS_TOPIC = "pageview-counts"
CODECS = ("none", "gzip", "snappy")

Counts = dict[str, int]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (__doc__ or "").split("\n\n")[0]
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="page views to produce (default 1M)"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions per broker")
    parser.add_argument("--members", type=int, default=3, help="consumer group members")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark stages")
    parser.add_argument("--static", action="store_true", help="no ZooKeeper: a static broker list")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")


@dataclass
class Stage:
    name: str
    messages: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Report:
    stages: list[Stage] = field(default_factory=list)
    counts: dict[str, Counts] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, messages: int, started: float, note: str = "") -> None:
        stage = Stage(name, messages, time.perf_counter() - started, note)
        self.stages.append(stage)
        print(f"  {name}: {messages:,} in {stage.seconds:.1f} s ({stage.rate:,.0f}/s) {note}")


# -- the local cluster -------------------------------------------------------------------


@dataclass
class LocalCluster:
    """ZooKeeper (optional) and broker processes on loopback, in one data directory."""

    root: Path
    zookeeper: str | None
    brokers: dict[int, BrokerAddress]
    processes: list[asyncio.subprocess.Process]

    @property
    def broker_list(self) -> str:
        return ",".join(f"{b}:{a.host}:{a.port}" for b, a in sorted(self.brokers.items()))

    def connection(self) -> dict[str, str]:
        """The cluster options of the producer, consumer and data source."""
        if self.zookeeper is not None:
            return {"zookeeper": self.zookeeper}
        return {"brokers": self.broker_list}


async def _start_broker(
    broker_id: int, root: Path, zookeeper: str | None, partitions: int
) -> tuple[asyncio.subprocess.Process, BrokerAddress]:
    log_dir = root / f"broker-{broker_id}"
    # An empty partition log: the broker opens it at start-up and registers the topic,
    # as on a cluster that has been running for a while, so producers see every
    # partition from the first message (0.7 creates a topic at its first write).
    (log_dir / f"{TOPIC}-0").mkdir(parents=True, exist_ok=True)
    # Visible within 200 ms of a write, without an fsync per batch.
    settings = {"log.flush.interval": "10000", "log.default.flush.scheduler.interval.ms": "200"}
    return await start_broker_process(
        log_dir, broker_id=broker_id, partitions=partitions, zookeeper=zookeeper, settings=settings
    )


@contextlib.asynccontextmanager
async def local_cluster(
    static: bool, partitions: int, keep: bool, brokers: int = 2
) -> AsyncIterator[LocalCluster]:
    """Start ZooKeeper (unless static or not installed) and ``brokers`` broker processes."""
    root = Path(tempfile.mkdtemp(prefix="aiokafka07-demo-"))
    server: ZooKeeperServer | None = None
    processes: list[asyncio.subprocess.Process] = []
    try:
        if not static:
            try:
                zookeeper_classpath()
                server = ZooKeeperServer(data_dir=root / "zookeeper")
                await asyncio.to_thread(server.start)
            except ZooKeeperNotInstalled:
                print("  no ZooKeeper on this machine (Debian's 'zookeeper'): static mode")
                server = None
        connect = f"{server.connect_string}/demo" if server is not None else None
        addresses: dict[int, BrokerAddress] = {}
        for broker_id in range(brokers):
            process, address = await _start_broker(broker_id, root, connect, partitions)
            processes.append(process)
            addresses[broker_id] = address
        yield LocalCluster(root, connect, addresses, processes)
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
        for process in processes:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait(), 30)
        if server is not None:
            await asyncio.to_thread(server.close)
        if keep:
            print(f"data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


# -- stage 1: produce ----------------------------------------------------------------------


def page_views(count: int, seed: int = 7) -> list[tuple[str, bytes]]:
    """``count`` page views (user, value), users and pages skewed as real traffic is."""
    rng = random.Random(seed)
    users = [f"user-{i}" for i in range(max(1, count // 20))]
    pages = [f"/p/{i}" for i in range(200)]
    page_weights = [1 / (rank + 1) for rank in range(len(pages))]
    countries = ["DE", "US", "FR", "BR", "IN", "JP", "GB", "NL"]
    start_ms = 1_700_000_000_000
    chosen_users = rng.choices(users, k=count)
    chosen_pages = rng.choices(pages, weights=page_weights, k=count)
    chosen_countries = rng.choices(countries, k=count)
    return [
        (u, f"{u}|{p}|{c}|{start_ms + i * 3}".encode())
        for i, (u, p, c) in enumerate(
            zip(chosen_users, chosen_pages, chosen_countries, strict=True)
        )
    ]


def page_of(value: bytes) -> str:
    return value.split(b"|", 2)[1].decode()


async def produce(cluster: LocalCluster, views: list[tuple[str, bytes]], report: Report) -> int:
    """Three producers, one codec each, sending a third of the views at once."""
    total_bytes = 0

    async def one(codec: str, share: list[tuple[str, bytes]]) -> None:
        nonlocal total_bytes
        async with Producer(
            zookeeper=cluster.zookeeper,
            brokers=None if cluster.zookeeper else cluster.broker_list,
            compression=codec,
        ) as producer:
            for user, value in share:
                await producer.send(TOPIC, value, key=user)
            await producer.flush()
            total_bytes += producer.metrics.bytes_sent

    started = time.perf_counter()
    thirds = [views[i :: len(CODECS)] for i in range(len(CODECS))]
    await asyncio.gather(*(one(codec, share) for codec, share in zip(CODECS, thirds, strict=True)))
    keyed = "keyed by user" if cluster.zookeeper else "random partitions (static mode)"
    report.add("produce, 3 producers (none/gzip/snappy)", len(views), started, keyed)
    return total_bytes


# -- stage 2: consume live -----------------------------------------------------------------


async def count_with_group(
    cluster: LocalCluster, members: int, partitions: int, expected: int, report: Report
) -> tuple[Counts, dict[str, int]]:
    """A consumer group counts views per page until it has seen every view.

    The members join together and start counting once the group is balanced, so no
    partition changes hands after a member has counted from it: each view is counted
    exactly once.
    """
    counts: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[str] = collections.Counter()
    seen = 0
    done = asyncio.Event()
    started = time.perf_counter()
    assert cluster.zookeeper is not None
    consumers = [
        Consumer(
            TOPIC,
            group="pageview-counter",
            zookeeper=cluster.zookeeper,
            auto_offset_reset="smallest",
        )
        for _ in range(members)
    ]

    async def member(consumer: Consumer) -> None:
        nonlocal seen
        while not done.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            for tp, records in batch.items():
                per_partition[tp.name] += len(records)
                for record in records:
                    counts[page_of(record.value)] += 1
                seen += len(records)
            if seen >= expected:
                done.set()

    try:
        await asyncio.gather(*(c.start() for c in consumers))
        everything = {(b, p) for b in cluster.brokers for p in range(partitions)}
        for _ in range(300):
            owned = [(tp.broker_id, tp.partition) for c in consumers for tp in c.assignment()]
            if len(owned) == len(everything) and set(owned) == everything:
                break
            await asyncio.sleep(0.1)
        tasks = [asyncio.create_task(member(c)) for c in consumers]
        try:
            await asyncio.wait_for(done.wait(), 600)
        finally:
            done.set()
            await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(c.close() for c in consumers))
    report.add(f"consumer group, {members} members", seen, started, "counting views per page")
    return dict(counts), dict(per_partition)


async def count_with_simple_consumers(
    cluster: LocalCluster, partitions: int, expected: int, report: Report
) -> tuple[Counts, dict[str, int]]:
    """Static mode has no groups: one SimpleConsumer task per broker-partition."""
    counts: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[str] = collections.Counter()
    next_offsets: dict[str, int] = {}
    started = time.perf_counter()
    async with ConnectionPool() as pool:

        async def one(address: BrokerAddress, partition: int) -> None:
            simple = SimpleConsumer(
                address.host, address.port, broker_id=address.broker_id, pool=pool
            )
            name = f"{address.broker_id}-{partition}"
            async for batch in simple.batches(TOPIC, partition, next_offsets.get(name, 0)):
                for record in batch.messages:
                    counts[page_of(record.value)] += 1
                per_partition[name] += len(batch.messages)
                next_offsets[name] = batch.next_offset

        # Each round goes on from where the last stopped, until the brokers' periodic
        # flush has made everything visible.
        for _ in range(100):
            await asyncio.gather(
                *(one(a, p) for a in cluster.brokers.values() for p in range(partitions))
            )
            if sum(per_partition.values()) >= expected:
                break
            await asyncio.sleep(0.2)
    seen = sum(per_partition.values())
    report.add("simple consumers, one per partition", seen, started, "counting views per page")
    return dict(counts), dict(per_partition)


# -- stage 3: Spark --------------------------------------------------------------------


def _counts(rows: list[Any]) -> Counts:
    return {row["page"]: int(row["count"]) for row in rows}


def spark_stages(
    spark: Any, cluster: LocalCluster, partitions: int, total_bytes: int, report: Report
) -> None:
    """Batch count, streaming count, write of the counts and read-back (blocking)."""
    from pyspark.sql import functions as F

    from .spark import activate

    activate(spark)  # this runs in a worker thread, and writes need an active session
    options = dict(cluster.connection())
    if cluster.zookeeper is None:
        options["partitionsPerBroker"] = str(partitions)
    page = F.split(F.col("value").cast("string"), r"\|").getItem(1).alias("page")

    started = time.perf_counter()
    views = spark.read.format("kafka07").options(**options).option("topic", TOPIC).load()
    counts_df = views.select(page).groupBy("page").count()
    batch_counts = _counts(counts_df.collect())
    report.counts["spark batch"] = batch_counts
    report.add(
        "spark batch read + count",
        sum(batch_counts.values()),
        started,
        "(first job: includes starting Spark's Python workers)",
    )

    started = time.perf_counter()
    checkpoint = cluster.root / "spark-checkpoint"
    stream = (
        spark.readStream.format("kafka07")
        .options(**options)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", str(max(1 << 20, total_bytes // 4)))
    )
    if cluster.zookeeper is not None:
        stream = stream.option("group", "spark-pageviews")
    query = (
        stream.load()
        .select(page)
        .groupBy("page")
        .count()
        .writeStream.format("memory")
        .queryName("stream_counts")
        .outputMode("complete")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    micro_batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    stream_counts = _counts(spark.sql("select page, count from stream_counts").collect())
    report.counts["spark streaming"] = stream_counts
    report.add(
        "spark streaming (availableNow)",
        sum(stream_counts.values()),
        started,
        f"{micro_batches} micro-batches with data",
    )

    started = time.perf_counter()
    counts_df = spark.createDataFrame(sorted(batch_counts.items()), "page string, count long")
    out = counts_df.select(
        F.col("page").alias("key"),
        F.concat_ws(",", F.col("page"), F.col("count").cast("string")).alias("value"),
    )
    out.write.format("kafka07").options(**cluster.connection()).option(
        "topic", COUNTS_TOPIC
    ).option("compression", "gzip").mode("append").save()
    report.add(f"spark write to {COUNTS_TOPIC}", len(batch_counts), started, "gzip, keyed by page")

    back = spark.read.format("kafka07").options(**options).option("topic", COUNTS_TOPIC).load()
    written: Counts = {}
    for row in back.select(F.col("value").cast("string").alias("v")).collect():
        name, count = row["v"].rsplit(",", 1)
        written[name] = int(count)
    report.counts[f"read back from {COUNTS_TOPIC}"] = written


# -- the report ------------------------------------------------------------------------


async def log_ends(cluster: LocalCluster, partitions: int) -> dict[str, int]:
    """The log end offset (bytes) of every broker-partition of the topic."""
    async with ConnectionPool() as pool:

        async def end(address: BrokerAddress, partition: int) -> tuple[str, int]:
            conn = await pool.connection(address)
            (offset,) = await conn.offsets(TOPIC, partition, LATEST, 1)
            return f"{address.broker_id}-{partition}", offset

        ends = await asyncio.gather(
            *(end(a, p) for a in cluster.brokers.values() for p in range(partitions))
        )
    return dict(ends)


async def group_offsets(cluster: LocalCluster, group: str) -> dict[str, int]:
    from .znodes import GroupRegistry
    from .zookeeper import ZooKeeper

    assert cluster.zookeeper is not None
    async with ZooKeeper(cluster.zookeeper) as zk:
        return await GroupRegistry(zk, group).offsets(TOPIC)


def print_agreement(report: Report, produced: Counts) -> bool:
    print("\ncounts per page:")
    agree = True
    for path, counts in report.counts.items():
        same = counts == produced
        agree = agree and same
        total = sum(counts.values())
        print(
            f"  {path:<34} {len(counts):>4} pages {total:>10,} views  {'ok' if same else 'DIFFERS'}"
        )
    top = sorted(produced.items(), key=lambda kv: -kv[1])[:3]
    print("  top pages: " + ", ".join(f"{p} {n:,}" for p, n in top))
    return agree


async def run(args: argparse.Namespace) -> int:
    if args.messages < 1 or args.partitions < 1 or args.members < 1:
        raise ValueError("--messages, --partitions and --members must be positive")
    spark_available = not args.no_spark
    if spark_available:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            print(
                "PySpark is not installed: pip install 'aiokafka07[spark]'. Spark stages skipped."
            )
            spark_available = False
    report = Report()
    started_all = time.perf_counter()
    print(f"aiokafka07 demo: {args.messages:,} page views")
    views = page_views(args.messages)
    produced: Counts = dict(collections.Counter(page_of(v) for _, v in views))
    async with local_cluster(args.static, args.partitions, args.keep) as cluster:
        where = f"ZooKeeper {cluster.zookeeper}" if cluster.zookeeper else "static broker list"
        print(f"  2 brokers ({cluster.broker_list}), {args.partitions} partitions each, {where}")
        total_bytes = await produce(cluster, views, report)
        del views
        if cluster.zookeeper is not None:
            live, per_partition = await count_with_group(
                cluster, args.members, args.partitions, args.messages, report
            )
            report.counts["consumer group (live)"] = live
        else:
            live, per_partition = await count_with_simple_consumers(
                cluster, args.partitions, args.messages, report
            )
            report.counts["simple consumers (live)"] = live
        if spark_available:
            from .spark import local_session

            started = time.perf_counter()
            spark = await asyncio.to_thread(local_session, 2, "aiokafka07-demo")
            print(f"  (local Spark started in {time.perf_counter() - started:.1f} s)")
            try:
                await asyncio.to_thread(
                    spark_stages,
                    spark,
                    cluster,
                    args.partitions,
                    total_bytes,
                    report,
                )
            finally:
                await asyncio.to_thread(spark.stop)
        ends = await log_ends(cluster, args.partitions)
        offsets = {}
        if cluster.zookeeper is not None:
            for group in ("pageview-counter", "spark-pageviews"):
                offsets[group] = await group_offsets(cluster, group)
        agree = print_agreement(report, produced)
        print("\nwhere the data went (topic pageviews):")
        print(f"  {'broker-partition':<18}{'messages':>10}{'log end (bytes)':>18}")
        for name in sorted(ends):
            print(f"  {name:<18}{per_partition.get(name, 0):>10,}{ends[name]:>18,}")
        print(f"  {'total':<18}{sum(per_partition.values()):>10,}{sum(ends.values()):>18,}")
        for group, committed in offsets.items():
            lag = sum(ends[n] - committed.get(n, 0) for n in ends)
            print(f"  group {group}: offsets in ZooKeeper, lag {lag:,} bytes")
        print(f"  logs in {cluster.root} (removed at exit unless --keep)")
    verdict = "all paths agree" if agree else "PATHS DISAGREE"
    print(f"\n{verdict}; total {time.perf_counter() - started_all:.1f} s")
    return 0 if agree else 1
