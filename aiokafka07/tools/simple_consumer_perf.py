"""``aiokafka07 simple-consumer-perf``: 0.7.2's SimpleConsumerPerformance
(kafka-simple-consumer-perf-test.sh).

Reads one partition of one broker (``--server``, ``--topic``, ``--partition``) from its
earliest offset (``--from-latest``: the log end) with ``--fetch-size`` fetches until a
fetch returns nothing or ``--messages`` were read, with no ZooKeeper. Unlike 0.7.2's loop,
the next fetch is in flight while a result is counted (that is how
:class:`~aiokafka07.SimpleConsumer` reads), and a message larger than ``--fetch-size``
grows the fetch (0.7.2 stops there, as if the partition were empty).

Output (see :mod:`.perf`): the header, then one row ``start.time, end.time, fetch.size,
data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec``, timed from the first
fetch to the empty one; with ``--show-detailed-stats``, instead, a row each time more than
``--reporting-interval`` messages were read since the last one: ``time, fetch.size,
data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec`` (totals; rates over the
interval). ``--messages`` stops after exactly that many (0.7.2: after the fetch that
passed it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

from ..protocol import EARLIEST, LATEST, validate_topic
from ..simple import SimpleConsumer
from .common import UsageError, describe_exit_status, stop_acknowledged
from .perf import Meter, add_fetch_size, add_perf_options, perf_progress

HEADER = (
    "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
)
DETAILED_HEADER = "time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"


def parse_server(text: str) -> tuple[str, int]:
    """``--server``: ``kafka://HOST:PORT`` as 0.7.2 writes it, or plain ``HOST:PORT``."""
    address = text.strip().removeprefix("kafka://").rstrip("/")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not kafka://HOST:PORT")
    return host, int(port)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read one partition directly from its broker and print the throughput in 0.7.2 "
        "SimpleConsumerPerformance's columns."
    )
    parser.add_argument(
        "--server",
        required=True,
        type=parse_server,
        metavar="kafka://HOST:PORT",
        help="the broker to read from",
    )
    parser.add_argument("--topic", required=True, help="the topic to read")
    parser.add_argument(
        "--partition", type=int, default=0, metavar="N", help="the partition on that broker (0)"
    )
    add_fetch_size(parser, "bytes per fetch")
    parser.add_argument(
        "--from-latest", action="store_true", help="start at the log end (default: earliest)"
    )
    add_perf_options(parser, messages_required=False)
    describe_exit_status(parser, {0: "the row was printed (also after Ctrl-C)"})


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    if args.partition < 0:
        raise UsageError(f"--partition {args.partition} is not a partition number")
    host, port = args.server
    if not args.hide_header:
        print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
    meter = Meter(args.reporting_interval)
    since_report = 0
    limit: int | None = args.messages
    async with SimpleConsumer(
        host, port, fetch_size=args.fetch_size, max_fetch_size=max(args.fetch_size, 64 << 20)
    ) as consumer:
        start = LATEST if args.from_latest else EARLIEST
        offsets = await consumer.offsets_before(args.topic, args.partition, start, 1)
        meter.restart()
        batches = consumer.batches(args.topic, args.partition, offsets[0] if offsets else 0)
        try:
            async with perf_progress(args, "consumed") as progress, contextlib.aclosing(batches):
                async for batch in batches:
                    records = batch.messages
                    if limit is not None:
                        records = records[: limit - meter.messages]
                    size = sum(len(r.value) for r in records)
                    meter.add(len(records), size)
                    progress.add(len(records), size)
                    since_report += len(records)
                    if since_report > args.reporting_interval:
                        since_report = 0
                        if args.show_detailed_stats:
                            row = meter.detail_row(args.date_format, [args.fetch_size])
                            print(row, flush=True)
                    if limit is not None and meter.messages >= limit:
                        break
        except asyncio.CancelledError:
            stop_acknowledged()  # Ctrl-C: print what was read so far
        elapsed = time.perf_counter() - meter.started
    if not args.show_detailed_stats:
        print(meter.summary_row(args.date_format, [args.fetch_size], elapsed=elapsed), flush=True)
    return 0
