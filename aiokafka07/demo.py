"""``aiokafka07 demo``: a whole pipeline on a throw-away local cluster, in a few minutes.

1. A real ZooKeeper (Debian's ``zookeeper`` package, installed first when missing and
   running as root; otherwise the demo says what to run) and two embedded brokers, each
   in its own process. ``--static`` runs the brokers without ZooKeeper instead.
2. A realistic event stream: page views ``user|page|country|ms``, keyed by user (Java
   partitioning), produced by three producers with different codecs (none, gzip,
   snappy) at once.
3. A consumer group (three members, balanced through ZooKeeper) counting views per page
   live, committing offsets as a Java consumer would.
4. A Spark batch job and a Spark streaming job (``availableNow``, several micro-batches,
   progress published to ZooKeeper as group ``spark-pageviews``) computing the same
   counts through the ``kafka07`` data source, and a Spark write of the counts to the
   topic ``pageview-counts``, read back.
5. A report: whether the counts agree, each stage's throughput, and where the data went.
   Everything started is stopped and removed at the end.

On a terminal each stage shows live progress (on stderr); Spark's own output (its banner,
its WARN lines) goes to ``spark.log`` in the data directory, not into the report. One
Ctrl-C stops everything (Spark, the brokers, ZooKeeper), removes the data directory and
says so in one line, exit status 130: the child processes run in sessions of their own,
so the terminal's Ctrl-C reaches the demo alone, which stops them in order.

Exit status 0 when every path agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import logging
import random
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._install import install_hint
from .connection import BrokerAddress
from .errors import ProducerClosedError
from .group import Consumer
from .pool import ConnectionPool
from .producer import Producer
from .protocol import LATEST
from .simple import SimpleConsumer
from .testing.local import LocalCluster, local_cluster
from .timeouts import wait_for
from .tools.common import (
    describe_exit_status,
    in_daemon_thread,
    positive_int,
    require_zookeeper,
    stop_acknowledged,
)
from .tools.progress import Counter, Elapsed, LiveCount

__all__ = ["configure", "run"]

LOG_LEVEL = logging.WARNING

log = logging.getLogger("aiokafka07.demo")

TOPIC = "pageviews"
COUNTS_TOPIC = "pageview-counts"
#: The consumer groups of the report: the live one, and the Spark stream's.
LIVE_GROUP = "pageview-counter"
SPARK_GROUP = "spark-pageviews"
CODECS = ("none", "gzip", "snappy")
#: Bound on one Spark clean-up step (cancelling jobs, stopping the session).
SPARK_STOP_TIMEOUT = 10.0

Counts = dict[str, int]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (__doc__ or "").split("\n\n")[0]
    parser.add_argument(
        "--messages", type=positive_int, default=1_000_000, help="page views to produce (1M)"
    )
    parser.add_argument("--partitions", type=positive_int, default=4, help="partitions per broker")
    parser.add_argument("--members", type=positive_int, default=3, help="consumer group members")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark stages")
    parser.add_argument("--static", action="store_true", help="no ZooKeeper: a static broker list")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    describe_exit_status(
        parser,
        {
            0: "every path agrees",
            1: "some path disagrees, or an error, reported in one line",
            130: "interrupted (Ctrl-C or SIGTERM); everything it started is stopped",
        },
    )


class _Interrupted(Exception):
    """Ctrl-C / SIGTERM arrived during a stage: clean up, then say so once."""


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
    #: What runs now, for the line an interruption prints.
    current: str = "start-up"

    def add(self, name: str, messages: int, started: float, note: str = "") -> None:
        stage = Stage(name, messages, time.perf_counter() - started, note)
        self.stages.append(stage)
        line = f"  {name}: {messages:,} in {stage.seconds:.1f} s ({stage.rate:,.0f}/s) {note}"
        print(line.rstrip(), flush=True)


# -- live progress -----------------------------------------------------------------------


def _counting(count: Callable[[], int], total: int | None) -> Counter:
    async def counter() -> tuple[int, int | None]:
        return count(), total

    return counter


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


#: How long an interrupted produce stage lets each producer deliver what it holds.
INTERRUPTED_CLOSE_MS = 5000


async def produce(
    cluster: LocalCluster, views: list[tuple[str, bytes]], report: Report, live: bool
) -> int:
    """Three producers, one codec each, sending a third of the views at once."""
    producers = [
        Producer(
            zookeeper=cluster.zookeeper,
            brokers=None if cluster.zookeeper else cluster.broker_list,
            compression=codec,
            # Little left to deliver when Ctrl-C closes them (close() delivers what it
            # accepted), so an interrupted demo stops at once.
            max_buffered_messages=20_000,
        )
        for codec in CODECS
    ]

    async def one(producer: Producer, share: list[tuple[str, bytes]]) -> None:
        async with producer:
            try:
                for user, value in share:
                    await producer.send(TOPIC, value, key=user)
                await producer.flush()
            except asyncio.CancelledError:
                # Ctrl-C stops the brokers with the demo (one process group), so what is
                # still buffered may find none left: not an error of its own, since the
                # demo's one line says it was interrupted and its data is removed. Bounded:
                # an interrupted demo stops within seconds whatever its brokers do.
                try:
                    await producer.close(timeout_ms=INTERRUPTED_CLOSE_MS)
                except ProducerClosedError as exc:
                    log.debug("closing a producer of the interrupted demo: %s", exc)
                raise

    def delivered() -> int:
        return sum(p.metrics.messages_sent for p in producers)

    started = time.perf_counter()
    thirds = [views[i :: len(CODECS)] for i in range(len(CODECS))]
    async with LiveCount("produce", "msg", _counting(delivered, len(views)), enabled=live):
        await asyncio.gather(*(one(p, share) for p, share in zip(producers, thirds, strict=True)))
    keyed = "keyed by user" if cluster.zookeeper else "random partitions (static mode)"
    report.add("produce, 3 producers (none/gzip/snappy)", len(views), started, keyed)
    return sum(p.metrics.bytes_sent for p in producers)


# -- stage 2: consume live -----------------------------------------------------------------


async def count_with_group(
    cluster: LocalCluster,
    members: int,
    partitions: int,
    expected: int,
    report: Report,
    live: bool,
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
            group=LIVE_GROUP,
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
        async with LiveCount("consume", "msg", _counting(lambda: seen, expected), enabled=live):
            tasks = [asyncio.create_task(member(c)) for c in consumers]
            try:
                await wait_for(done.wait(), 600)
            finally:
                done.set()
                await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(c.close() for c in consumers))
    report.add(f"consumer group, {members} members", seen, started, "counting views per page")
    return dict(counts), dict(per_partition)


async def count_with_simple_consumers(
    cluster: LocalCluster, partitions: int, expected: int, report: Report, live: bool
) -> tuple[Counts, dict[str, int]]:
    """Static mode has no groups: one SimpleConsumer task per broker-partition."""
    counts: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[str] = collections.Counter()
    next_offsets: dict[str, int] = {}
    started = time.perf_counter()

    def seen() -> int:
        return sum(per_partition.values())

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

        async with LiveCount("consume", "msg", _counting(seen, expected), enabled=live):
            # Each round goes on from where the last stopped, until the brokers' periodic
            # flush has made everything visible.
            for _ in range(100):
                await asyncio.gather(
                    *(one(a, p) for a in cluster.brokers.values() for p in range(partitions))
                )
                if seen() >= expected:
                    break
                await asyncio.sleep(0.2)
    report.add("simple consumers, one per partition", seen(), started, "counting views per page")
    return dict(counts), dict(per_partition)


# -- stage 3: Spark --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def spark_session(log_file: Path, live: bool) -> AsyncIterator[Any]:
    """A local Spark session (2 cores) whose output goes to ``log_file``; stopped on exit,
    its running jobs and streaming queries first, each step bounded. Its start (half a
    minute or more) is announced, and on a terminal its time counts up meanwhile."""
    from .spark import local_session

    started = time.perf_counter()
    print("  starting local Spark (its JVM; half a minute or more) ...", flush=True)
    async with Elapsed("  starting Spark", enabled=live):
        spark = await in_daemon_thread(
            functools.partial(local_session, 2, "aiokafka07-demo", log_file=log_file)
        )
    print(f"  (local Spark started in {time.perf_counter() - started:.1f} s)", flush=True)
    try:
        yield spark
    finally:

        def cancel_everything() -> None:
            for query in spark.streams.active:
                query.stop()
            spark.sparkContext.cancelAllJobs()

        with contextlib.suppress(Exception):
            await wait_for(in_daemon_thread(cancel_everything), SPARK_STOP_TIMEOUT)
        with contextlib.suppress(Exception):
            await wait_for(in_daemon_thread(spark.stop), SPARK_STOP_TIMEOUT)
        # The data source's own sessions and connections in this (the driver) process:
        # closed now, while the cluster still answers, rather than at exit.
        from .spark.runtime import WorkerRuntime

        with contextlib.suppress(Exception):
            await wait_for(in_daemon_thread(WorkerRuntime.get().shutdown), 15)


def _counts(rows: list[Any]) -> Counts:
    return {row["page"]: int(row["count"]) for row in rows}


def _spark_tasks(spark: Any) -> Counter:
    """Completed and total tasks of the stages Spark has run so far."""
    stages: dict[int, tuple[int, int]] = {}

    def read() -> tuple[int, int | None]:
        tracker = spark.sparkContext.statusTracker()
        active = set(tracker.getActiveStageIds())
        for stage_id, (_, total) in stages.items():
            if stage_id not in active:
                stages[stage_id] = (total, total)  # finished since the last look
        for stage_id in active:
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                stages[stage_id] = (info.numCompletedTasks, info.numTasks)
        return sum(done for done, _ in stages.values()), sum(t for _, t in stages.values())

    async def counter() -> tuple[int, int | None]:
        return await in_daemon_thread(read)

    return counter


async def spark_stages(
    spark: Any,
    cluster: LocalCluster,
    partitions: int,
    total_bytes: int,
    expected: int,
    report: Report,
    live: bool,
) -> None:
    """Batch count, streaming count, write of the counts and read-back."""
    from pyspark.sql import functions as F

    from .spark import activate

    def in_spark_thread(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        def call() -> Any:
            activate(spark)  # writes need an active session in the calling thread
            return function(*args)

        call.__name__ = function.__name__
        return in_daemon_thread(call)

    options = dict(cluster.connection())
    if cluster.zookeeper is None:
        options["partitionsPerBroker"] = str(partitions)
    page = F.split(F.col("value").cast("string"), r"\|").getItem(1).alias("page")

    report.current = "the Spark batch job"
    started = time.perf_counter()

    def batch_count() -> Counts:
        views = spark.read.format("kafka07").options(**options).option("topic", TOPIC).load()
        return _counts(views.select(page).groupBy("page").count().collect())

    async with LiveCount("spark batch", "task", _spark_tasks(spark), enabled=live):
        batch_counts: Counts = await in_spark_thread(batch_count)
    report.counts["spark batch"] = batch_counts
    report.add(
        "spark batch read + count",
        sum(batch_counts.values()),
        started,
        "(first job: includes starting Spark's Python workers)",
    )

    report.current = "the Spark streaming job"
    started = time.perf_counter()

    def start_stream() -> Any:
        stream = (
            spark.readStream.format("kafka07")
            .options(**options)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxBytesPerTrigger", str(max(1 << 20, total_bytes // 4)))
        )
        if cluster.zookeeper is not None:
            stream = stream.option("group", SPARK_GROUP)
        return (
            stream.load()
            .select(page)
            .groupBy("page")
            .count()
            .writeStream.format("memory")
            .queryName("stream_counts")
            .outputMode("complete")
            .option("checkpointLocation", str(cluster.root / "spark-checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    query = await in_spark_thread(start_stream)

    async def rows_read() -> tuple[int, int | None]:
        progress = await in_daemon_thread(lambda: query.recentProgress)
        return sum(p["numInputRows"] for p in progress), expected

    async with LiveCount("spark streaming", "row", rows_read, enabled=live):
        await in_daemon_thread(query.awaitTermination)
    micro_batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    stream_counts = await in_spark_thread(
        lambda: _counts(spark.sql("select page, count from stream_counts").collect())
    )
    report.counts["spark streaming"] = stream_counts
    report.add(
        "spark streaming (availableNow)",
        sum(stream_counts.values()),
        started,
        f"{micro_batches} micro-batch{'' if micro_batches == 1 else 'es'} with data",
    )

    report.current = f"the Spark write to {COUNTS_TOPIC}"
    started = time.perf_counter()

    def write_counts() -> None:
        counts_df = spark.createDataFrame(sorted(batch_counts.items()), "page string, count long")
        out = counts_df.select(
            F.col("page").alias("key"),
            F.concat_ws(",", F.col("page"), F.col("count").cast("string")).alias("value"),
        )
        out.write.format("kafka07").options(**cluster.connection()).option(
            "topic", COUNTS_TOPIC
        ).option("compression", "gzip").mode("append").save()

    async with LiveCount("spark write", "task", _spark_tasks(spark), enabled=live):
        await in_spark_thread(write_counts)
    report.add(f"spark write to {COUNTS_TOPIC}", len(batch_counts), started, "gzip, keyed by page")

    def read_back() -> Counts:
        back = spark.read.format("kafka07").options(**options).option("topic", COUNTS_TOPIC)
        written: Counts = {}
        for row in back.load().select(F.col("value").cast("string").alias("v")).collect():
            name, count = row["v"].rsplit(",", 1)
            written[name] = int(count)
        return written

    report.counts[f"read back from {COUNTS_TOPIC}"] = await in_spark_thread(read_back)


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


async def group_offsets(cluster: LocalCluster, groups: Iterable[str]) -> dict[str, dict[str, int]]:
    """The committed offsets of each group, read in one ZooKeeper session."""
    from .znodes import GroupRegistry
    from .zookeeper import ZooKeeper

    assert cluster.zookeeper is not None
    async with ZooKeeper(cluster.zookeeper) as zk:
        return {group: await GroupRegistry(zk, group).offsets(TOPIC) for group in groups}


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


# -- the whole pipeline ----------------------------------------------------------------


def _spark_missing() -> str | None:
    """Why the Spark stages cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return f"PySpark is not installed: {install_hint('spark')}"
    from .testing.zookeeper_server import _java_executable

    if _java_executable() is None:
        return "Spark needs Java (17 or later), and there is none: apt-get install default-jre"
    return None


async def run(args: argparse.Namespace) -> int:
    if not args.static:
        await require_zookeeper(
            "demo",
            "the consumer group and its offsets live in ZooKeeper; --static runs without it",
        )
    spark = not args.no_spark
    spark_missing = _spark_missing() if spark else None
    if spark_missing is not None:
        print(f"{spark_missing}. Spark stages skipped.", flush=True)
        spark = False
    live = sys.stderr.isatty()
    report = Report()
    root = Path(tempfile.mkdtemp(prefix="aiokafka07-demo-"))
    started = time.perf_counter()
    try:
        agree = await _pipeline(args, root, report, live, spark=spark)
    except _Interrupted:
        # Everything was stopped on the way out; this is the one line about it.
        data = f"data kept in {root}" if args.keep else f"{root} removed"
        print(
            f"aiokafka07 demo: interrupted during {report.current}: everything it started "
            f"is stopped, {data}",
            file=sys.stderr,
            flush=True,
        )
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    verdict = "all paths agree" if agree else "PATHS DISAGREE"
    print(f"\n{verdict}; total {time.perf_counter() - started:.1f} s", flush=True)
    return 0 if agree else 1


async def _pipeline(
    args: argparse.Namespace, root: Path, report: Report, live: bool, *, spark: bool
) -> bool:
    print(f"aiokafka07 demo: {args.messages:,} page views", flush=True)
    views = page_views(args.messages)
    produced: Counts = dict(collections.Counter(page_of(v) for _, v in views))
    async with (
        local_cluster(
            root,
            brokers=2,
            partitions=args.partitions,
            zookeeper=not args.static,
            chroot="/demo",
            # Visible within 200 ms of a write, without an fsync per batch.
            settings={
                "log.flush.interval": "10000",
                "log.default.flush.scheduler.interval.ms": "200",
            },
            topics=[TOPIC],
        ) as cluster,
        contextlib.AsyncExitStack() as resources,
    ):
        try:
            where = f"ZooKeeper {cluster.zookeeper}" if cluster.zookeeper else "static broker list"
            print(
                f"  2 brokers ({cluster.broker_list}), {args.partitions} partitions each, {where}",
                flush=True,
            )
            report.current = "the produce stage"
            total_bytes = await produce(cluster, views, report, live)
            del views
            report.current = "the consume stage"
            if cluster.zookeeper is not None:
                live_counts, per_partition = await count_with_group(
                    cluster, args.members, args.partitions, args.messages, report, live
                )
                report.counts["consumer group (live)"] = live_counts
            else:
                live_counts, per_partition = await count_with_simple_consumers(
                    cluster, args.partitions, args.messages, report, live
                )
                report.counts["simple consumers (live)"] = live_counts
            if spark:
                report.current = "Spark's start"
                session = await resources.enter_async_context(
                    spark_session(root / "spark.log", live)
                )
                await spark_stages(
                    session, cluster, args.partitions, total_bytes, args.messages, report, live
                )
                await resources.aclose()  # Spark stopped before the report
            report.current = "the report"
            ends = await log_ends(cluster, args.partitions)
            offsets: dict[str, dict[str, int]] = {}
            if cluster.zookeeper is not None:
                # Only the groups that ran: a Spark group never started has no offsets,
                # and its "lag" would be the whole topic.
                groups = (LIVE_GROUP, SPARK_GROUP) if spark else (LIVE_GROUP,)
                offsets = await group_offsets(cluster, groups)
        except asyncio.CancelledError:
            # Ctrl-C / SIGTERM: acknowledged here, so that stopping Spark and the cluster
            # on the way out runs (with its own time bounds) as any clean-up does.
            stop_acknowledged()
            raise _Interrupted from None
    agree = print_agreement(report, produced)
    print("\nwhere the data went (topic pageviews):")
    print(f"  {'broker-partition':<18}{'messages':>10}{'log end (bytes)':>18}")
    for name in sorted(ends):
        print(f"  {name:<18}{per_partition.get(name, 0):>10,}{ends[name]:>18,}")
    print(f"  {'total':<18}{sum(per_partition.values()):>10,}{sum(ends.values()):>18,}")
    for group, committed in offsets.items():
        lag = sum(ends[n] - committed.get(n, 0) for n in ends)
        print(f"  group {group}: offsets in ZooKeeper, lag {lag:,} bytes")
    kept = f"kept in {root}" if args.keep else f"in {root}, removed at exit (--keep keeps them)"
    print(f"  logs {kept}", flush=True)
    return agree
