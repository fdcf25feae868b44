"""``aiokafka07 consume``: print a topic's messages.

Two modes:

* **group** (default): a member of a consumer group, balanced with the group's other
  members (Java ones too), offsets committed to ZooKeeper, topics by name or by a
  whitelist / blacklist. Without ``--group`` a fresh ``console-consumer-<n>`` group is
  used and deleted from ZooKeeper at exit, as 0.7.2's ConsoleConsumer does.
* **simple**: chosen partitions (``--broker-partition``; all of the topic's by default)
  read directly from their brokers, from an offset, with nothing written to ZooKeeper; the
  only mode with ``--brokers``.

Output formats: ``raw`` (payload and a newline, as 0.7.2), ``hex``, ``length-prefixed``
(what ``produce --format length-prefixed`` reads) and ``json`` (one object per line:
``topic``, ``broker_id``, ``partition``, ``offset`` — the 0.7 "next offset", where a
consumer resumes after this message — ``value``, and ``encoding``: ``utf-8`` when the value
is shown as text, ``base64`` when it is not valid UTF-8), and 0.7.2's ``checksum``, or a
formatter of your own with its ``--property`` settings (see :mod:`.formatters`).

Output goes through a writer thread, a batch of records at a time. It ends after
``--max-messages``, after ``--timeout-ms`` without a message, when stdout's reader goes
away (``| head``), or on Ctrl-C / SIGTERM; in every case a group member commits what it
printed and leaves the group cleanly, and the exit status is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from .. import znodes
from ..connection import BrokerAddress
from ..errors import IllegalStateError, KafkaError
from ..group import Consumer
from ..group.subscription import TopicFilter
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST
from ..records import ConsumerRecord, TopicPartition
from ..simple import SimpleConsumer
from ..timeouts import wait_for
from ..znodes import GroupRegistry
from ..zookeeper import ZooKeeper
from .common import (
    SECOND_CTRL_C,
    CommandError,
    Output,
    Progress,
    UsageError,
    add_cluster_options,
    delete_tree,
    describe_exit_status,
    fresh_group,
    no_partitions_error,
    parse_broker_partitions,
    parse_brokers,
    plural,
    positive_int,
    read_brokers,
    refuse_live_members,
    stop_acknowledged,
    topic_partitions,
    zookeeper_session,
)
from .formatters import Formatter, MessageFormatter, build_formatter, parse_properties

log = logging.getLogger("aiokafka07.tools.consume")
NextBatch = Callable[[float | None, int | None], Awaitable[list[ConsumerRecord]]]
#: Puts back the records of a batch from ``handled`` on (they were not printed).
Rewind = Callable[[list[ConsumerRecord], int], None]

#: How long a simple-mode reader waits before fetching again once caught up.
POLL_INTERVAL_MS = 100


def _raw(record: ConsumerRecord) -> bytes:
    return record.value + b"\n"


def _hex(record: ConsumerRecord) -> bytes:
    return record.value.hex().encode() + b"\n"


def _length_prefixed(record: ConsumerRecord) -> bytes:
    return len(record.value).to_bytes(4, "big") + record.value


def record_json(record: ConsumerRecord) -> dict[str, Any]:
    """A record as the ``json`` format shows it (see the module docs)."""
    try:
        value, encoding = record.value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        value, encoding = base64.b64encode(record.value).decode("ascii"), "base64"
    return {
        "topic": record.topic,
        "broker_id": record.broker_id,
        "partition": record.partition,
        "offset": record.offset,
        "value": value,
        "encoding": encoding,
    }


def _json(record: ConsumerRecord) -> bytes:
    return json.dumps(record_json(record), ensure_ascii=False).encode("utf-8") + b"\n"


FORMATS: dict[str, Formatter] = {
    "raw": _raw,
    "json": _json,
    "hex": _hex,
    "length-prefixed": _length_prefixed,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print messages of TOPIC (or of the topics a --whitelist / --blacklist selects) as "
        "a consumer group member, or of chosen partitions with --simple / "
        "--broker-partition / --offset / --brokers."
    )
    parser.add_argument("topic", nargs="?", metavar="TOPIC")
    add_cluster_options(parser)
    group = parser.add_argument_group("group mode")
    group.add_argument(
        "-g",
        "--group",
        help="consumer group (default: a new console-consumer-<n>, deleted at exit)",
    )
    group.add_argument("--whitelist", metavar="REGEX", help="topics matching (0.7.2 filter syntax)")
    group.add_argument("--blacklist", metavar="REGEX", help="topics not matching")
    group.add_argument(
        "--commit-interval-ms",
        type=positive_int,
        metavar="MS",
        default=10000,
        help="commit offsets this often, and at exit (0.7.2 autocommit.interval.ms, 10000)",
    )
    simple = parser.add_argument_group("simple mode")
    simple.add_argument(
        "--simple", action="store_true", help="read the partitions directly, no group"
    )
    simple.add_argument(
        "--broker-partition",
        action="append",
        default=[],
        metavar="B-P[,B-P...]",
        help="only these partitions (implies --simple; with --brokers: default 0 of each)",
    )
    simple.add_argument(
        "--offset", type=int, metavar="N", help="start at this offset (implies --simple)"
    )
    where = parser.add_argument_group("what to print")
    where.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (default: the latest, for partitions that exist "
        "when it starts; one created later is printed from its first message). A named "
        "group's committed offsets of these topics are deleted first, as 0.7.2 does",
    )
    where.add_argument(
        "-n", "--max-messages", type=positive_int, metavar="N", help="stop after N messages"
    )
    where.add_argument(
        "--timeout-ms",
        type=positive_int,
        metavar="MS",
        help="stop after this long without a message",
    )
    where.add_argument(
        "-f",
        "--format",
        "--formatter",
        dest="format",
        default="raw",
        metavar="FORMAT",
        help="raw (value + newline, default), json (a JSON object per line), hex, "
        "length-prefixed (4-byte big-endian length + value), checksum (0.7.2's "
        "'[topic-]checksum:<crc>' lines), or MODULE:FACTORY for your own formatter",
    )
    where.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a formatter setting, repeatable (checksum: topic=NAME prefixes 'NAME-')",
    )
    where.add_argument(
        "--skip-message-on-error",
        action="store_true",
        help="skip (and report) a message the formatter fails on, instead of stopping",
    )
    where.add_argument(
        "--fetch-size",
        type=positive_int,
        default=1048576,
        metavar="BYTES",
        help="bytes per fetch (1048576)",
    )
    where.add_argument(
        "--progress", action="store_true", help="report progress on stderr every second"
    )
    where.add_argument("-q", "--quiet", action="store_true", help="no summary at the end")
    describe_exit_status(
        parser,
        {
            0: "the end: --max-messages, --timeout-ms, stdout closed (| head), or Ctrl-C / "
            "SIGTERM; a group member committed what it printed and left the group",
            130: SECOND_CTRL_C,
        },
    )


async def run(args: argparse.Namespace) -> int:
    simple = args.simple or args.broker_partition or args.offset is not None or args.brokers
    if args.zookeeper and args.brokers:
        raise UsageError("give --zookeeper or --brokers, not both")
    if not (args.zookeeper or args.brokers):
        raise UsageError("give --zookeeper (or --brokers for --simple)")
    if args.offset is not None and (args.offset < 0 or args.from_beginning):
        raise UsageError("--offset takes an offset >= 0, and not with --from-beginning")
    formatter = build_formatter(args.format, parse_properties(args.property), FORMATS)
    args.formatter = MessageFormatter(formatter, skip_on_error=args.skip_message_on_error)
    progress = Progress("consumed", enabled=args.progress)
    output = Output()
    try:
        async with progress:
            if simple:
                if args.group or args.whitelist or args.blacklist:
                    raise UsageError(
                        "--group, --whitelist and --blacklist need group mode, but "
                        "--simple, --broker-partition, --offset or --brokers was given"
                    )
                if not args.topic:
                    raise UsageError("simple mode reads one TOPIC")
                await _simple(args, output, progress)
            else:
                if sum(bool(x) for x in (args.topic, args.whitelist, args.blacklist)) != 1:
                    raise UsageError("give a TOPIC, a --whitelist or a --blacklist (one)")
                await _group(args, output, progress)
    finally:
        output.close()
    if not args.quiet:
        skipped = args.formatter.skipped
        note = f" ({plural(skipped, 'message')} skipped)" if skipped else ""
        print(progress.summary() + note, file=sys.stderr, flush=True)
    return 0


async def _print(
    next_batch: NextBatch,
    args: argparse.Namespace,
    output: Output,
    progress: Progress,
    rewind: Rewind | None = None,
) -> None:
    """Write batches until the limit, the timeout, a broken pipe or a stop signal; a
    formatter error ends it after what came before was written (and the rest rewound)."""
    formatter: MessageFormatter = args.formatter
    limit: int | None = args.max_messages
    timeout = None if args.timeout_ms is None else args.timeout_ms / 1000
    try:
        while limit is None or progress.messages < limit:
            left = None if limit is None else limit - progress.messages
            records = await next_batch(timeout, left)
            if not records:
                return  # --timeout-ms without a message
            batch = formatter.format(records)
            await output.write(batch.data)
            progress.add(batch.printed, batch.size)
            if batch.error is not None:
                if rewind is not None:
                    rewind(records, batch.handled)
                raise batch.error
    except asyncio.CancelledError:
        stop_acknowledged()  # Ctrl-C / SIGTERM: the normal way to stop
    except BrokenPipeError:
        pass  # the reader is gone (| head): stop quietly


# -- group mode --------------------------------------------------------------------------


async def _group(args: argparse.Namespace, output: Output, progress: Progress) -> None:
    zk = zookeeper_session(args)
    await zk.start()
    try:
        group = args.group or await fresh_group(zk, "console-consumer")
        if args.from_beginning and args.group:
            await _forget_offsets(zk, args)
        consumer = Consumer(
            *([args.topic] if args.topic else []),
            group=group,
            zookeeper=args.zookeeper,
            whitelist=args.whitelist,
            blacklist=args.blacklist,
            auto_offset_reset="smallest" if args.from_beginning else "largest",
            auto_commit_interval_ms=args.commit_interval_ms,
            fetch_size=args.fetch_size,
            max_fetch_size=max(args.fetch_size, 64 * 1048576),
            connection_timeout_ms=args.zk_timeout_ms,
        )

        # Where each partition stood before the batch: what a rewind goes back to.
        positions: dict[TopicPartition, int | None] = {}

        async def next_batch(timeout: float | None, limit: int | None) -> list[ConsumerRecord]:
            positions.clear()
            for tp in consumer.assignment():
                with contextlib.suppress(IllegalStateError):  # fenced: no rewind for it
                    positions[tp] = await consumer.position(tp)
            while True:
                wait = 3600.0 if timeout is None else timeout
                batches = await consumer.getmany(timeout_ms=wait * 1000, max_records=limit)
                if batches or timeout is not None:
                    return [record for batch in batches.values() for record in batch]

        def rewind(records: list[ConsumerRecord], handled: int) -> None:
            """Seek each partition back to its first record not printed, so closing
            commits only what was printed (a compressed set is then read again whole)."""
            starts: dict[TopicPartition, int | None] = dict(positions)
            for record in records[:handled]:
                starts[_partition_of(record)] = record.offset
            for tp in {_partition_of(record) for record in records[handled:]}:
                offset = starts.get(tp)
                if offset is not None and tp in consumer.assignment():
                    with contextlib.suppress(IllegalStateError):  # fenced meanwhile
                        consumer.seek(tp, offset)

        await consumer.start()
        try:
            if not consumer.assignment():
                reason = await _nothing_to_read(zk, args)
                if reason is not None:
                    log.warning("%s; waiting", reason)
            await _print(next_batch, args, output, progress, rewind)
        finally:
            await consumer.close()  # commits what was printed
            if not args.group:
                await delete_tree(zk, znodes.group_path(group))
    finally:
        await zk.close()


def _partition_of(record: ConsumerRecord) -> TopicPartition:
    return TopicPartition(record.topic, record.broker_id or 0, record.partition)


async def _nothing_to_read(zk: ZooKeeper, args: argparse.Namespace) -> str | None:
    """Why there is nothing to read, when ZooKeeper knows: no broker at all (a wrong
    chroot, say), or no partition of the topic (or of a topic the filter matches)."""
    if args.topic:
        if not await topic_partitions(zk, args.topic):
            return str(await no_partitions_error(zk, args.topic))
        return None
    if not await read_brokers(zk):
        return (
            f"no broker is registered in {zk.where}: check the chroot (brokers register "
            "under the chroot of their own zk.connect)"
        )
    topic_filter = _topic_filter(args)
    topics = await znodes.read_topics(zk)
    if not any(topic_filter.allows(topic) for topic in topics):
        which = "--whitelist" if args.whitelist else "--blacklist"
        return f"no registered topic is selected by {which} {topic_filter.regex!r}"
    return None


def _topic_filter(args: argparse.Namespace) -> TopicFilter:
    """The topics ``--whitelist`` or ``--blacklist`` selects."""
    return TopicFilter.parse(args.whitelist or args.blacklist, whitelist=bool(args.whitelist))


async def _forget_offsets(zk: ZooKeeper, args: argparse.Namespace) -> None:
    """--from-beginning with a named group: delete its committed offsets of the consumed
    topics (0.7.2 deletes the whole group), refusing while the group has live members."""
    registry = GroupRegistry(zk, args.group)
    await refuse_live_members(
        registry,
        "--from-beginning would reset their offsets (stop them first, or use another --group)",
    )
    if args.topic:
        topics = [args.topic]
    else:
        topic_filter = _topic_filter(args)
        topics = [t for t in await registry.offset_topics() if topic_filter.allows(t)]
    for topic in topics:
        await delete_tree(zk, znodes.offsets_path(args.group, topic))


# -- simple mode --------------------------------------------------------------------------


async def _simple(args: argparse.Namespace, output: Output, progress: Progress) -> None:
    topic: str = args.topic
    chosen = parse_broker_partitions(args.broker_partition)
    if args.brokers:
        brokers = parse_brokers(args.brokers)
        partitions = chosen or [(broker_id, 0) for broker_id in sorted(brokers)]
    else:
        async with zookeeper_session(args) as zk:
            brokers = await read_brokers(zk)
            partitions = chosen or await topic_partitions(zk, topic)
            reason = None if partitions else await _nothing_to_read(zk, args)
        if not partitions:
            raise CommandError(reason or f"topic {topic} has no partitions registered")
    for broker_id, _ in partitions:
        if broker_id not in brokers:
            raise CommandError(f"broker {broker_id} is not known (not registered / not listed)")
    queue: asyncio.Queue[list[ConsumerRecord] | BaseException] = asyncio.Queue(16)
    async with ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=30000) as pool:
        readers = [
            asyncio.create_task(_read(args, brokers[b], p, pool, queue)) for b, p in partitions
        ]
        pending: list[ConsumerRecord] = []

        async def next_batch(timeout: float | None, limit: int | None) -> list[ConsumerRecord]:
            if not pending:
                try:
                    item = await wait_for(queue.get(), timeout)
                except asyncio.TimeoutError:
                    return []
                if isinstance(item, BaseException):
                    raise item
                pending.extend(item)
            cut = len(pending) if limit is None else limit
            batch = pending[:cut]
            del pending[:cut]
            return batch

        try:
            await _print(next_batch, args, output, progress)
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


async def _read(
    args: argparse.Namespace,
    address: BrokerAddress,
    partition: int,
    pool: ConnectionPool,
    queue: asyncio.Queue[list[ConsumerRecord] | BaseException],
) -> None:
    """One partition's records into ``queue`` (an error goes there too, named)."""
    topic: str = args.topic
    name = f"{topic} {address.broker_id}-{partition} at {address.host}:{address.port}"
    consumer = SimpleConsumer(
        address.host,
        address.port,
        broker_id=address.broker_id,
        fetch_size=args.fetch_size,
        max_fetch_size=max(args.fetch_size, 64 * 1048576),
        pool=pool,
    )
    try:
        offset = args.offset
        if offset is None:
            time = EARLIEST if args.from_beginning else LATEST
            offsets = await consumer.offsets_before(topic, partition, time, 1)
            offset = offsets[0] if offsets else 0
        batches = consumer.batches(topic, partition, offset, poll_interval_ms=POLL_INTERVAL_MS)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                await queue.put(batch.messages)
    except KafkaError as exc:
        await queue.put(CommandError(f"{name}: {exc}"))
