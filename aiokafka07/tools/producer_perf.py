"""``aiokafka07 producer-perf``: 0.7.2's ProducerPerformance (kafka-producer-perf-test.sh).

``--threads`` producers (each with its own broker connections, as each 0.7.2 thread has
its own Producer; they share one cluster view) send ``--messages`` messages of
``--message-size`` zero bytes to ``--topic``, keyless, so each batch goes to a random
partition. As in 0.7.2 the messages are split evenly, rounding down: in the default sync
mode each producer sends ``messages / threads / batch-size`` batches of ``--batch-size``
messages, waiting for each batch before the next; with ``--async`` it hands over
``messages / threads`` messages one by one and the producer batches them
(``--batch-size`` per request). ``--vary-message-size`` draws each size below
``--message-size`` (random bytes with ``--async``, zeros without, as 0.7.2).

A message counts once written to the broker's socket, as with 0.7.2's producer (0.7 has
no acknowledgement); ``--confirm`` counts it only once an OFFSETS request behind the
produce was answered. The clock starts once the cluster view is loaded (0.7.2's also
times creating its producers) and stops when every producer has delivered everything.

Output (see :mod:`.perf`): the header, then one row ``start.time, end.time,
compression, message.size, batch.size, total.data.sent.in.MB, MB.sec,
total.data.sent.in.nMsg, nMsg.sec``; with ``--show-detailed-stats``, instead, a row per
thread every ``--reporting-interval`` messages: ``time, compression, thread.id,
message.size, batch.size, total.data.sent.in.MB, MB.sec, total.data.sent.in.nMsg,
nMsg.sec`` (that thread's totals; the rates over the interval).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from ..errors import ProducerClosedError
from ..producer import Producer
from ..protocol import Compression, validate_topic
from .common import (
    CommandError,
    Progress,
    add_cluster_options,
    describe_exit_status,
    non_negative_int,
    require_a_reachable_broker,
    stop_acknowledged,
)
from .perf import Meter, add_perf_options, add_sender_options, brokerinfo_cluster, perf_progress

HEADER = (
    "start.time, end.time, compression, message.size, batch.size, total.data.sent.in.MB, "
    "MB.sec, total.data.sent.in.nMsg, nMsg.sec"
)
DETAILED_HEADER = (
    "time, compression, thread.id, message.size, batch.size, total.data.sent.in.MB, MB.sec, "
    "total.data.sent.in.nMsg, nMsg.sec"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Send --messages messages to --topic from --threads producers and print the "
        "throughput in 0.7.2 ProducerPerformance's columns."
    )
    parser.add_argument("--topic", required=True, help="the topic to send to")
    parser.add_argument(
        "--brokerinfo",
        metavar="zk.connect=HOST:PORT | broker.list=ID:HOST:PORT,...",
        help="the cluster, in 0.7.2's form (or --zookeeper / --brokers)",
    )
    add_cluster_options(parser)
    parser.add_argument(
        "--message-size", type=non_negative_int, default=100, metavar="BYTES", help="(100)"
    )
    parser.add_argument(
        "--vary-message-size",
        action="store_true",
        help="each message a random size below --message-size",
    )
    parser.add_argument(
        "--async",
        dest="is_async",
        action="store_true",
        help="hand messages over one by one, the producer batches (default: send batches "
        "and wait for each)",
    )
    add_sender_options(parser, threads=10, threads_help="producers")
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="count a message once the broker confirmed its request (default, as 0.7.2: "
        "once written)",
    )
    add_perf_options(parser, messages_required=True)
    describe_exit_status(
        parser,
        {0: "every message was delivered", 1: "an error, or messages not delivered (counted "
         "in the row are only the delivered ones)"},
    )  # fmt: skip


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    cluster = brokerinfo_cluster(args)
    codec: Compression = args.compression_codec
    producers = [
        Producer(
            cluster=cluster,
            compression=codec,
            confirm=args.confirm,
            batch_size=args.batch_size,
            batch_bytes=max(1 << 20, args.batch_size * (args.message_size + 10)),
        )
        for _ in range(args.threads)
    ]
    if not args.hide_header:
        print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
    total = Meter(args.reporting_interval)
    failures: list[str] = []
    interrupted = False
    await cluster.start()
    try:
        for producer in producers:
            await producer.start()
        await require_a_reachable_broker(cluster, "--brokers / --brokerinfo")
        total.restart()
        try:
            async with perf_progress(args, "sent") as progress:
                await asyncio.gather(
                    *(_thread(i, p, args, progress) for i, p in enumerate(producers))
                )
        except asyncio.CancelledError:
            interrupted = True
            stop_acknowledged()
        finally:
            for producer in producers:
                try:
                    await producer.close()
                except ProducerClosedError as exc:
                    failures.append(str(exc))
    finally:
        await cluster.close()
    elapsed = time.perf_counter() - total.started
    total.messages = sum(p.metrics.messages_sent for p in producers)
    total.bytes = sum(p.metrics.bytes_sent for p in producers)
    if not args.show_detailed_stats:
        fields = [int(codec), args.message_size, args.batch_size]
        row = total.summary_row(args.date_format, fields, elapsed=elapsed, mb_decimals=2)
        print(row, flush=True)
    if interrupted:
        print("interrupted: the row counts what was delivered until then", file=sys.stderr)
        raise asyncio.CancelledError
    if failures:
        failed = sum(p.metrics.messages_failed for p in producers)
        raise CommandError(f"{failed} messages were not delivered: {failures[0]}")
    return 0


async def _thread(
    thread_id: int, producer: Producer, args: argparse.Namespace, progress: Progress
) -> None:
    """One 0.7.2 ProducerThread: its share of the messages, in batches (sync) or one by
    one (async), with a detailed row every --reporting-interval messages."""
    meter = Meter(args.reporting_interval)
    size, batch_size, topic = args.message_size, args.batch_size, args.topic
    fixed = bytes(size)
    if args.is_async:
        for _ in range(args.messages // args.threads):
            if args.vary_message_size:
                value = random.randbytes(random.randrange(size)) if size else b""
            else:
                value = fixed
            await producer.send(topic, value)
            progress.add(1, len(value))
            if meter.add(1, len(value)) and args.show_detailed_stats:
                _detail(thread_id, meter, args)
        return
    for _ in range(args.messages // args.threads // batch_size):
        if args.vary_message_size:
            values = [bytes(random.randrange(size)) if size else b"" for _ in range(batch_size)]
        else:
            values = [fixed] * batch_size
        futures = [await producer.send(topic, value) for value in values]
        await asyncio.wait(futures)  # 0.7.2's sync send: the batch is written (or failed)
        sent = [v for v, f in zip(values, futures, strict=True) if f.exception() is None]
        progress.add(len(sent), sum(map(len, sent)))
        if meter.add(len(sent), sum(map(len, sent))) and args.show_detailed_stats:
            _detail(thread_id, meter, args)


def _detail(thread_id: int, meter: Meter, args: argparse.Namespace) -> None:
    fields = [int(args.compression_codec), thread_id, args.message_size, args.batch_size]
    print(meter.detail_row(args.date_format, fields, mb_decimals=2), flush=True)
