"""``aiokafka07 replay-log``: 0.7.2's ReplayLogProducer (kafka-replay-log-producer.sh).

Reads every message of ``--inputtopic`` (each broker-partition registered in
``--zookeeper``, from its earliest offset to the log end it has when the command starts)
and sends its payload again to ``--outputtopic`` on the cluster ``--brokerinfo`` (or
``--brokers``) names, by default the same one. Compressed sets are read message by message
and compressed again with ``--compression-codec``. ``--messages`` stops after that many.

By default every ``--batch-size`` messages are waited for (delivered and confirmed by the
broker) before the next ones are read, as with 0.7.2's sync producer;
``--async`` keeps sending while earlier batches are on their way. ``--delay-btw-batch-ms``
pauses after each batch; ``--threads`` partitions are read at a time.

Unlike 0.7.2, nothing is written to ZooKeeper: 0.7.2 reads as the consumer group
``replay-log-producer`` (deleting its data first, so two replays at once disturb each
other) and stops after 10 s without a message; this reads the partitions directly and
stops at the log ends it saw at the start, at once, replaying a topic that is being
written up to that point. At the end, a summary goes to stderr; Ctrl-C stops reading,
delivers what was read, prints the summary and exits 130.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from ..connection import BrokerAddress
from ..errors import KafkaError
from ..pool import ConnectionPool
from ..producer import Producer, ProduceResult
from ..protocol import EARLIEST, LATEST, validate_topic
from ..simple import SimpleConsumer
from .common import (
    CommandError,
    Progress,
    UsageError,
    add_progress_option,
    add_zk_timeout,
    connect_string,
    describe_exit_status,
    no_partitions_error,
    non_negative_int,
    positive_int,
    read_brokers,
    require_a_reachable_broker,
    topic_partitions,
    zookeeper_session,
)
from .perf import add_sender_options, brokerinfo_cluster
from .produce import finish_sending


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Send every message of --inputtopic again, to --outputtopic (0.7.2's ReplayLogProducer)."
    )
    parser.add_argument(
        "-z",
        "--zookeeper",
        required=True,
        metavar="HOST[:PORT][,...][/CHROOT]",
        type=connect_string,
        help="ZooKeeper of the cluster to read from",
    )
    parser.add_argument(
        "--brokerinfo",
        metavar="zk.connect=HOST:PORT | broker.list=ID:HOST:PORT,...",
        help="the cluster to send to, in 0.7.2's form (default: the one read from)",
    )
    parser.add_argument(
        "-b", "--brokers", metavar="[ID:]HOST:PORT,...", help="the cluster to send to, listed"
    )
    add_zk_timeout(parser)
    parser.add_argument("--inputtopic", required=True, metavar="TOPIC", help="read this topic")
    parser.add_argument("--outputtopic", required=True, metavar="TOPIC", help="send to this one")
    parser.add_argument(
        "--messages", type=positive_int, metavar="N", help="stop after N messages (default: all)"
    )
    parser.add_argument(
        "--async",
        dest="is_async",
        action="store_true",
        help="do not wait for each batch to be delivered before reading on",
    )
    parser.add_argument(
        "--delay-btw-batch-ms",
        type=non_negative_int,
        default=0,
        metavar="MS",
        help="pause this long after each batch (0)",
    )
    add_sender_options(parser, threads=1, threads_help="partitions read at a time")
    add_progress_option(parser)
    parser.add_argument(
        "--reporting-interval",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="milliseconds between progress reports (5000)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary at the end")
    describe_exit_status(
        parser, {0: "every message read was delivered", 1: "an error, or messages not delivered"}
    )


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.inputtopic)
    validate_topic(args.outputtopic)
    if args.inputtopic == args.outputtopic and not (args.brokerinfo or args.brokers):
        raise UsageError("--outputtopic is --inputtopic on the same cluster")
    target = brokerinfo_cluster(args, source=args.zookeeper)
    async with zookeeper_session(args) as zk:
        brokers = await read_brokers(zk)
        partitions = await topic_partitions(zk, args.inputtopic)
        if not partitions:
            raise await no_partitions_error(zk, args.inputtopic)
    for broker_id, _ in partitions:
        if broker_id not in brokers:
            raise CommandError(f"broker {broker_id} of {args.inputtopic} is not registered")
    producer = Producer(
        cluster=target, compression=args.compression_codec, batch_size=args.batch_size
    )
    progress = Progress("replayed", enabled=args.progress, interval=args.reporting_interval / 1000)
    budget: list[int | None] = [args.messages]
    outcome = "failed"
    await target.start()
    try:
        await producer.start()
        await require_a_reachable_broker(target, "--brokers / --brokerinfo")
        slots = asyncio.Semaphore(args.threads)
        async with (
            progress,
            ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=30000) as pool,
        ):
            await asyncio.gather(
                *(
                    _replay(args, brokers[b], p, pool, producer, progress, slots, budget)
                    for b, p in partitions
                )
            )
        outcome = "done"
    except asyncio.CancelledError:
        outcome = "interrupted"
        raise
    finally:
        summary: str | None = f"from {args.inputtopic} to {args.outputtopic}"
        if outcome == "failed" or args.quiet:
            summary = None
        await finish_sending(producer, target, progress, summary, outcome == "interrupted")
    return 0


async def _replay(
    args: argparse.Namespace,
    address: BrokerAddress,
    partition: int,
    pool: ConnectionPool,
    producer: Producer,
    progress: Progress,
    slots: asyncio.Semaphore,
    budget: list[int | None],
) -> None:
    """Send one partition's messages, from the earliest offset to the log end as of now."""
    topic: str = args.inputtopic
    name = f"{topic} {address.broker_id}-{partition} at {address.host}:{address.port}"
    consumer = SimpleConsumer(address.host, address.port, broker_id=address.broker_id, pool=pool)
    batch: list[asyncio.Future[ProduceResult]] = []
    async with slots:
        try:
            start = await consumer.offsets_before(topic, partition, EARLIEST, 1)
            end = await consumer.offsets_before(topic, partition, LATEST, 1)
            batches = consumer.batches(
                topic, partition, start[0] if start else 0, end_offset=end[0] if end else 0
            )
            async with contextlib.aclosing(batches):
                async for fetched in batches:
                    records = fetched.messages
                    if budget[0] is not None:
                        records = records[: budget[0]]
                        budget[0] -= len(records)
                    for record in records:
                        batch.append(await producer.send(args.outputtopic, record.value))
                        if len(batch) >= args.batch_size:
                            await _end_batch(args, batch)
                    progress.add(len(records), sum(len(r.value) for r in records))
                    if budget[0] == 0:
                        return
        except KafkaError as exc:
            raise CommandError(f"{name}: {exc}") from exc


async def _end_batch(args: argparse.Namespace, batch: list[asyncio.Future[ProduceResult]]) -> None:
    """A batch is complete: wait for its delivery (unless --async), pause if asked."""
    if not args.is_async:
        await asyncio.wait(batch)  # failures are the producer's to report at close
    batch.clear()
    if args.delay_btw_batch_ms:
        await asyncio.sleep(args.delay_btw_batch_ms / 1000)
