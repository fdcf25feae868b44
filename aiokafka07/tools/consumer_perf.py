"""``aiokafka07 consumer-perf``: 0.7.2's ConsumerPerformance (kafka-consumer-perf-test.sh).

Joins ``--group`` (default ``perf-consumer-<n>``; its ZooKeeper data is deleted first, as
0.7.2 does, which is refused while it has live members) with ``--threads`` streams on
``--topic`` and reads from the earliest offset (``--from-latest``: the log end) until no
message came for ``--consumer-timeout-ms`` (5000, 0.7.2's fixed value) or ``--messages``
were read. A default group is deleted again at the end (0.7.2 leaves it behind).

Output (see :mod:`.perf`): the header, then one row ``start.time, end.time, fetch.size,
data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec``. The clock starts once the
member joined the group and starts fetching (0.7.2 sleeps one second first, while it
already fetches) and stops at the last message read; 0.7.2 stops when the streams time out
and subtracts the timeout, which is the same when the run ends by timing out. With
``--show-detailed-stats``, instead, a row per stream every ``--reporting-interval``
messages and one when it ends: ``time, thread.id, fetch.size, data.consumed.in.MB, MB.sec,
data.consumed.in.nMsg, nMsg.sec`` (the stream's totals, the rates over the interval; the
final row's over the stream's life). 0.7.2's header of these rows leaves out
``thread.id``, which its rows print; this header names it. ``--messages`` counts for the
whole run here; 0.7.2 applies it to each thread.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from ..group import Consumer, Stream
from ..protocol import validate_topic
from ..znodes import GroupRegistry, group_path
from .common import (
    Progress,
    add_cluster_options,
    delete_tree,
    describe_exit_status,
    fresh_group,
    positive_int,
    refuse_live_members,
    stop_acknowledged,
    zookeeper_session,
)
from .perf import Meter, add_fetch_size, add_perf_options, perf_progress

log = logging.getLogger("aiokafka07.tools.consumer_perf")

HEADER = (
    "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
)
DETAILED_HEADER = (
    "time, thread.id, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read --topic as a consumer group with --threads streams and print the throughput "
        "in 0.7.2 ConsumerPerformance's columns."
    )
    parser.add_argument("--topic", required=True, help="the topic to read")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--group", help="the consumer group (default: a new perf-consumer-<n>, deleted at the end)"
    )
    add_fetch_size(parser, "bytes per partition per fetch")
    parser.add_argument(
        "--from-latest",
        action="store_true",
        help="start at the log end (default: the earliest offset)",
    )
    parser.add_argument(
        "--socket-buffer-size",
        type=positive_int,
        metavar="BYTES",
        help="accepted for 0.7.2 compatibility and not applied: the kernel sizes the "
        "receive buffer",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=10, metavar="N", help="streams (10)"
    )
    parser.add_argument(
        "--consumer-timeout-ms",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="end a stream after this long without a message (5000)",
    )
    add_perf_options(parser, messages_required=False)
    describe_exit_status(parser, {0: "the row was printed (also after Ctrl-C)"})


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    if args.socket_buffer_size is not None:
        log.warning("--socket-buffer-size is not applied: the kernel sizes the receive buffer")
    async with zookeeper_session(args) as zk:
        group = args.group or await fresh_group(zk, "perf-consumer")
        registry = GroupRegistry(zk, group)
        await refuse_live_members(
            registry, "deleting its data would break it (use another --group)"
        )
        await delete_tree(zk, group_path(group))  # 0.7.2 starts every run from scratch
        consumer = Consumer(
            args.topic,
            group=group,
            zookeeper=args.zookeeper,
            streams=args.threads,
            auto_offset_reset="largest" if args.from_latest else "smallest",
            consumer_timeout_ms=args.consumer_timeout_ms,
            fetch_size=args.fetch_size,
            max_fetch_size=max(args.fetch_size, 64 * 1048576),
            connection_timeout_ms=args.zk_timeout_ms,
        )
        if not args.hide_header:
            print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
        total = Meter(args.reporting_interval)
        last: list[float] = []  # when the last message was read (perf_counter)
        await consumer.start()
        total.restart()
        budget = Budget(args.messages)
        progress = perf_progress(args, "consumed")
        readers = [
            asyncio.ensure_future(_stream(stream, args, total, budget, last, progress))
            for stream in consumer.streams
        ]
        try:
            async with progress:
                await asyncio.gather(*readers)
        except asyncio.CancelledError:
            stop_acknowledged()  # Ctrl-C: print what was read so far
        finally:
            for reader in readers:  # after an error in one, the others stop too
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            await consumer.close()
            if not args.group:
                await delete_tree(zk, group_path(group))
    if not args.show_detailed_stats:
        elapsed = (last[0] if last else total.started) - total.started
        print(total.summary_row(args.date_format, [args.fetch_size], elapsed=elapsed), flush=True)
    return 0


class Budget:
    """``--messages`` shared by the streams. A stream reserves a message before it waits
    for one, so no more than the limit are ever handed out (and committed): the last ones
    go to whichever streams have them, and once all are read every stream ends."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit  # neither read nor reserved; None: no limit
        self.reserved = 0
        self._changed = asyncio.Condition()

    async def reserve(self) -> bool:
        """Reserve the next message; False once every message of the limit was read."""
        if self.left is None:
            return True
        async with self._changed:
            # While others hold the last reservations, wait: they may time out instead.
            await self._changed.wait_for(lambda: bool(self.left) or not self.reserved)
            if not self.left:
                return False
            self.left -= 1
            self.reserved += 1
            return True

    def take(self, wanted: int) -> int:
        """Up to ``wanted`` more messages for the stream holding a reservation, to take
        without waiting (returned by :meth:`settle` if not there); how many."""
        if self.left is None:
            return wanted
        taken = min(wanted, self.left)
        self.left -= taken
        return taken

    async def settle(self, *, read: bool, unused: int = 0) -> None:
        """The message a stream waited for was ``read``, or it timed out waiting; of the
        messages it took besides, ``unused`` were not there."""
        if self.left is None:
            return
        async with self._changed:
            self.reserved -= 1
            self.left += unused + (0 if read else 1)
            self._changed.notify_all()


async def _stream(
    stream: Stream,
    args: argparse.Namespace,
    total: Meter,
    budget: Budget,
    last: list[float],
    progress: Progress,
) -> None:
    """One 0.7.2 ConsumerPerfThread: read the stream until it times out or the run's
    --messages are read; count messages and payload bytes."""
    meter = Meter(args.reporting_interval)
    while await budget.reserve():
        try:
            record = await stream.__anext__()
        except StopAsyncIteration:  # --consumer-timeout-ms without a message
            await budget.settle(read=False)
            break
        records = [record]
        # Take what is buffered without waiting, one await per batch, not per message, and
        # up to the next detailed row, which comes after a multiple of the interval.
        allowed = budget.take(meter.until_report - 1)
        while len(records) <= allowed:
            more = stream.next_nowait()
            if more is None:
                break
            records.append(more)
        await budget.settle(read=True, unused=allowed - (len(records) - 1))
        size = sum(len(r.value) for r in records)
        last[:] = [time.perf_counter()]
        total.add(len(records), size)
        progress.add(len(records), size)
        if meter.add(len(records), size) and args.show_detailed_stats:
            print(meter.detail_row(args.date_format, [stream.index, args.fetch_size]), flush=True)
    if args.show_detailed_stats:
        row = meter.detail_row(args.date_format, [stream.index, args.fetch_size], overall=True)
        print(row, flush=True)
