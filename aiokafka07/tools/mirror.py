"""``aiokafka07 mirror``: copy topics from one cluster to another, like 0.7.2's MirrorMaker.

The source is consumed as a consumer group (so several mirror processes share the work,
and a restart resumes where the last one stopped); every message goes to the topic of the
same name on the target, to a random partition (0.7.2's MirrorMaker sends keyless too).

By default the consumer iterates shallowly (0.7.2 ``shallowiterator.enable``): a
compressed set arrives as its wrapper message and is produced again exactly as it is, so
the target gets the same bytes and nothing is decompressed or compressed on the way.
``--recompress CODEC`` decodes every message and compresses for the target with CODEC
(``none`` stores them uncompressed).

Nothing is lost when the mirror stops, or when the group rebalances: offsets are
committed only after the producer confirmed everything sent before (flush, *then*
commit), on a timer, before partitions are handed to another member, and at exit. If the
target fails for good, the mirror stops without committing, so the next run sends again
what was not confirmed (at least once). One window remains, shared with 0.7.2: a
rebalance commits the partitions a member keeps at the position it has handed out.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from ..cluster import Cluster, StaticCluster, ZooKeeperCluster
from ..errors import KafkaError, ProducerClosedError
from ..group import Consumer
from ..producer import Producer
from ..records import TopicPartition
from .common import (
    SECOND_CTRL_C,
    CommandError,
    Progress,
    UsageError,
    add_deprecated_seconds,
    add_progress_option,
    add_zk_timeout,
    connect_string,
    describe_exit_status,
    parse_brokers,
    positive_int,
    require_a_reachable_broker,
    require_one_topic_selection,
    stop_acknowledged,
)
from .produce import undelivered

#: Records taken from the consumer per step (bounded, so a stop is honoured quickly).
STEP_RECORDS = 5000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Copy TOPICs (or the topics a --whitelist / --blacklist selects) from the source "
        "cluster to the target, as a consumer group on the source. Compressed sets are "
        "forwarded as they are unless --recompress."
    )
    parser.add_argument("topics", nargs="*", metavar="TOPIC")
    parser.add_argument("--whitelist", metavar="REGEX", help="topics matching (0.7.2 syntax)")
    parser.add_argument("--blacklist", metavar="REGEX", help="topics not matching")
    parser.add_argument(
        "--source-zookeeper",
        required=True,
        metavar="HOST[:PORT][/CHROOT]",
        type=connect_string,
        help="source cluster",
    )
    target = parser.add_argument_group("target (one of)")
    target.add_argument("--target-zookeeper", metavar="HOST[:PORT][/CHROOT]", type=connect_string)
    target.add_argument("--target-brokers", metavar="[ID:]HOST:PORT,...")
    add_zk_timeout(parser)
    parser.add_argument(
        "-g",
        "--group",
        default="aiokafka07-mirror",
        help="source consumer group (aiokafka07-mirror)",
    )
    parser.add_argument(
        "--recompress",
        choices=["none", "gzip", "snappy"],
        metavar="CODEC",
        help="decode every message and compress for the target with CODEC (none, gzip, "
        "snappy) instead of forwarding compressed sets as they are",
    )
    parser.add_argument(
        "--from-latest",
        action="store_true",
        help="where the group has no offsets yet, start at the log end (default: earliest)",
    )
    parser.add_argument(
        "--commit-interval-ms",
        type=positive_int,
        metavar="MS",
        default=10000,
        help="flush the producer and commit offsets this often (10000)",
    )
    add_progress_option(parser)
    parser.add_argument(
        "--progress-interval-ms",
        type=positive_int,
        default=1000,
        metavar="MS",
        help="milliseconds between progress reports (1000)",
    )
    add_deprecated_seconds(parser, "--progress-interval", "--progress-interval-ms")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary at the end")
    describe_exit_status(
        parser,
        {
            0: "stopped by Ctrl-C or SIGTERM, the normal end: everything read was delivered "
            "and its offsets committed",
            1: "an error, reported in one line; offsets of what was not delivered are not "
            "committed (the next run sends it again)",
            130: SECOND_CTRL_C,
        },
    )


class Mirror:
    """The copy loop, and the group's rebalance listener: before partitions go to
    another member, everything handed out is delivered."""

    def __init__(self, args: argparse.Namespace, producer: Producer, progress: Progress) -> None:
        self.args = args
        self.producer = producer
        self.progress = progress
        self.shallow = args.recompress is None
        self.consumer: Consumer | None = None
        # Held while records are taken and handed to the producer, and while flushing:
        # nothing is handed out between a flush and the commit that relies on it.
        self.gate = asyncio.Lock()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self.gate:
            await self.flush()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None

    async def flush(self) -> None:
        """Wait until everything handed to the producer is delivered; raise if some of it
        cannot be (the offsets must then not move past it)."""
        await self.producer.flush()
        failed = self.producer.metrics.messages_failed
        if failed:
            raise KafkaError(f"{failed} messages could not be delivered to the target")

    async def step(self) -> None:
        """Take what the consumer has (waiting a little) and hand it all to the producer."""
        assert self.consumer is not None
        async with self.gate:
            batches = await self.consumer.getmany(timeout_ms=200, max_records=STEP_RECORDS)
            for records in batches.values():
                size = 0
                for record in records:
                    if self.shallow:
                        await self.producer.send_message(record.topic, record)
                    else:
                        await self.producer.send(record.topic, record.value)
                    size += len(record.value)
                self.progress.add(len(records), size)

    async def copy(self) -> None:
        """Copy until stopped; commit after a flush every --commit-interval-ms."""
        assert self.consumer is not None
        interval = self.args.commit_interval_ms / 1000
        next_commit = time.monotonic() + interval
        while True:
            # A step always completes: records handed out must reach the producer before
            # the final commit, even when the stop signal arrives in the middle.
            step = asyncio.ensure_future(self.step())
            try:
                await asyncio.shield(step)
            except asyncio.CancelledError:
                await step
                raise
            if time.monotonic() >= next_commit:
                async with self.gate:
                    await self.flush()
                    await self.consumer.commit()
                next_commit = time.monotonic() + interval


async def run(args: argparse.Namespace) -> int:
    if bool(args.target_zookeeper) == bool(args.target_brokers):
        raise UsageError("give --target-zookeeper or --target-brokers (one of them)")
    require_one_topic_selection(args)
    timeout_ms = args.zk_timeout_ms
    target: Cluster
    if args.target_brokers:
        target = StaticCluster(parse_brokers(args.target_brokers))
    else:
        target = ZooKeeperCluster(args.target_zookeeper, connection_timeout_ms=timeout_ms)
    producer = Producer(cluster=target, compression=args.recompress, confirm=True)
    progress = Progress(
        "mirrored",
        enabled=args.progress,
        interval=args.progress_interval_ms / 1000,
        detail=lambda: f"{producer.metrics.queued_messages} waiting for the target",
    )
    mirror = Mirror(args, producer, progress)
    consumer = Consumer(
        *args.topics,
        group=args.group,
        zookeeper=args.source_zookeeper,
        whitelist=args.whitelist,
        blacklist=args.blacklist,
        auto_offset_reset="largest" if args.from_latest else "smallest",
        auto_commit=False,
        shallow=mirror.shallow,
        listener=mirror,
        connection_timeout_ms=timeout_ms,
    )
    mirror.consumer = consumer
    await target.start()
    try:
        await producer.start()
        await require_a_reachable_broker(target, "--target-brokers")
        await consumer.start()
        delivered = False
        try:
            async with progress:
                await mirror.copy()
        except asyncio.CancelledError:
            stop_acknowledged()  # Ctrl-C / SIGTERM: the normal way to stop
        finally:
            # Flush, then commit: the order that loses nothing.
            try:
                async with mirror.gate:
                    await mirror.flush()
                delivered = True
            finally:
                await consumer.close(commit=delivered)
    finally:
        try:
            await producer.close()
        except ProducerClosedError as exc:
            raise CommandError(undelivered(exc, producer)) from exc
        finally:
            await target.close()
    if not args.quiet:
        print(progress.summary(), file=sys.stderr, flush=True)
    return 0
