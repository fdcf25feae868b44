"""``aiokafka07 produce``: send records from stdin or files to a topic.

The equivalent of 0.7.2's ConsoleProducer, with what it lacks: length-prefixed binary
records besides lines, a key per record (it picks the partition with the Java-compatible
hash, as a Java producer with a String key would; 0.7 messages carry no key), every
codec, a static broker list, delivery confirmed by default, and an exit at the end of the
input with a summary. Input streams through in bounded memory, read by a thread so the
event loop never waits for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import AsyncIterable, AsyncIterator
from typing import IO, Any

from ..cluster import Cluster, StaticCluster, ZooKeeperCluster
from ..connection import MAX_MESSAGE_SIZE
from ..errors import ProducerClosedError
from ..producer import Producer
from ..protocol import validate_topic
from .common import (
    ChunkReader,
    CommandError,
    Progress,
    UsageError,
    add_cluster_options,
    describe_exit_status,
    parse_broker_partitions,
    parse_brokers,
    positive_float,
    positive_int,
    require_a_reachable_broker,
)

log = logging.getLogger("aiokafka07.tools.produce")

_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|[tnr0\\])")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Send each line (or each length-prefixed record) of stdin or the given files to "
        "TOPIC, then print a summary. Delivery is confirmed by default."
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "files", nargs="*", metavar="FILE", help="read these in order instead of stdin ('-')"
    )
    add_cluster_options(parser)
    parser.add_argument(
        "--format",
        choices=["lines", "length-prefixed"],
        default="lines",
        help="lines (default; a trailing \\r is dropped) or records each preceded by a "
        "4-byte big-endian length",
    )
    parser.add_argument(
        "--key-separator",
        metavar="SEP",
        help="each record is KEY SEP VALUE; the key chooses the partition (Java String "
        "hash) and is not sent. Escapes: \\t \\n \\r \\0 \\\\ \\xHH",
    )
    parser.add_argument(
        "--compression", choices=["none", "gzip", "snappy"], default="none", help="codec"
    )
    parser.add_argument(
        "--compression-level",
        type=int,
        choices=range(10),
        metavar="0-9",
        help="gzip's level (default 6, as the Java producer: byte-identical sets; 1 costs "
        "less CPU for more bytes)",
    )
    parser.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="count a message as sent once written to the socket (0.7 has no acks; by "
        "default each request is confirmed by a request behind it)",
    )
    parser.add_argument(
        "--partition", metavar="BROKER-PARTITION", help="send everything to this partition"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=1000,
        metavar="N",
        help="messages per batch (1000)",
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="wait this long to fill a batch (5)",
    )
    parser.add_argument(
        "--max-message-size",
        type=positive_int,
        metavar="BYTES",
        default=MAX_MESSAGE_SIZE,
        help=f"refuse larger records (0.7.2 max.message.size, {MAX_MESSAGE_SIZE})",
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=positive_float,
        default=30000.0,
        metavar="MS",
        help="how long a request may go unanswered, and a confirmation wait for the "
        "broker's flush (30000)",
    )
    parser.add_argument(
        "--delivery-timeout-ms",
        type=positive_float,
        default=None,
        metavar="MS",
        help="how long a message may take, retries included, before it fails (120000, or "
        "linger and request timeout together if more): a broker restarting meanwhile fails "
        "nothing. With --brokers, none answering at the start fails at once",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="report progress every second (default: when stderr is a terminal and the "
        "input is not typed there)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary at the end")
    describe_exit_status(
        parser,
        {
            0: "every record was sent (delivery confirmed, unless --no-confirm)",
            1: "an error, or messages not delivered, reported in one line",
            130: "interrupted by Ctrl-C, after delivering what it had accepted (143: SIGTERM)",
        },
    )


def parse_separator(text: str) -> bytes:
    """``--key-separator`` with its escapes, as UTF-8 bytes."""

    def unescape(match: re.Match[str]) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] == "x" else _ESCAPES[code]

    separator = _ESCAPE.sub(unescape, text).encode("utf-8")
    if not separator:
        raise UsageError("--key-separator must not be empty")
    return separator


def partition_key(key: bytes) -> Any:
    """What the partitioner hashes: the key as a string (as a Java producer's String key),
    or the bytes when they are not UTF-8."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key


def undelivered(exc: ProducerClosedError, producer: Producer) -> str:
    """One line for messages the producer gave up on: how many, and why."""
    reason = next(iter(exc.errors.values()), None)
    total = producer.metrics.messages_sent + exc.undelivered
    return f"{exc.undelivered} of {total} messages were not delivered: {reason or exc}"


async def lines(
    chunks: AsyncIterable[bytes], max_size: int, name: str
) -> AsyncIterator[list[bytes]]:
    """Lines of the input, a list per chunk (a last line without newline counts)."""
    carry = b""
    count = 0
    async for chunk in chunks:
        parts = (carry + chunk if carry else chunk).split(b"\n")
        carry = parts.pop()
        if len(carry) > max_size:
            raise CommandError(
                f"{name}: line {count + len(parts) + 1} is longer than the maximum "
                f"message size ({max_size} bytes)"
            )
        count += len(parts)
        if parts:
            yield [p[:-1] if p.endswith(b"\r") else p for p in parts]
    if carry:
        yield [carry[:-1] if carry.endswith(b"\r") else carry]


async def length_prefixed(
    chunks: AsyncIterable[bytes], max_size: int, name: str
) -> AsyncIterator[list[bytes]]:
    """Records preceded by a 4-byte big-endian length, a list per chunk."""
    buf = bytearray()
    count = 0
    async for chunk in chunks:
        buf += chunk
        pos = 0
        records = []
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if not 0 <= size <= max_size:
                raise CommandError(
                    f"{name}: record {count + 1} declares {size} bytes, outside 0-{max_size} "
                    "(is the input length-prefixed?)"
                )
            if len(buf) - pos - 4 < size:
                break
            records.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
            count += 1
        del buf[:pos]
        if records:
            yield records
    if buf:
        raise CommandError(
            f"{name}: the input ends inside record {count + 1} "
            f"({len(buf)} bytes after the last complete record)"
        )


async def run(args: argparse.Namespace) -> int:
    if bool(args.zookeeper) == bool(args.brokers):
        raise UsageError("give --zookeeper or --brokers (one of them)")
    if args.compression_level is not None and args.compression != "gzip":
        raise UsageError("--compression-level is gzip's: give --compression gzip")
    validate_topic(args.topic)  # before any connection: a name no broker takes
    separator = None if args.key_separator is None else parse_separator(args.key_separator)
    partition = None
    if args.partition is not None:
        chosen = parse_broker_partitions([args.partition])
        if len(chosen) != 1:
            raise UsageError("--partition takes one BROKER-PARTITION, e.g. 0-1")
        partition = chosen[0]
    cluster: Cluster
    if args.brokers:
        cluster = StaticCluster(parse_brokers(args.brokers))
        if separator is not None and partition is None:
            log.warning(
                "with --brokers keys do not choose the partition: as 0.7.2 with broker.list, "
                "each batch goes to a random broker, which picks the partition"
            )
    else:
        cluster = ZooKeeperCluster(args.zookeeper, connection_timeout_ms=args.zk_timeout_ms)
    sources: list[tuple[str, IO[bytes]]] = []
    with contextlib.ExitStack() as files:
        for name in args.files or ["-"]:
            if name == "-":
                sources.append(("stdin", sys.stdin.buffer))
            else:
                opened = await asyncio.to_thread(open, name, "rb")
                sources.append((name, files.enter_context(opened)))
        producer = Producer(
            cluster=cluster,
            compression=args.compression,
            compression_level=args.compression_level,
            confirm=args.confirm,
            batch_size=args.batch_size,
            linger_ms=args.linger_ms,
            max_message_size=args.max_message_size,
            request_timeout_ms=args.request_timeout_ms,
            delivery_timeout_ms=args.delivery_timeout_ms,
        )
        # Typed at a terminal: no bar over the line being typed; the summary at the end
        # (Ctrl-D) counts what was sent, and --progress reports in lines of their own.
        typing = any(file.isatty() for _, file in sources)
        enabled: bool | None = args.progress  # None: when stderr is a terminal
        if enabled is None and typing:
            enabled = False
        progress = Progress("produced", enabled=enabled, bar=not typing)
        outcome = "failed"
        await cluster.start()
        try:
            await producer.start()
            await require_a_reachable_broker(cluster)
            if typing and not args.quiet:
                print(
                    f"aiokafka07 produce: type messages for {args.topic}, one per line; "
                    "Ctrl-D ends",
                    file=sys.stderr,
                    flush=True,
                )
            async with progress:
                for name, file in sources:
                    await _send(args, producer, name, file, separator, partition, progress)
            outcome = "done"
        except asyncio.CancelledError:
            outcome = "interrupted"
            raise
        finally:
            summary = None if outcome == "failed" or args.quiet else f"to {args.topic}"
            await finish_sending(producer, cluster, progress, summary, outcome == "interrupted")
    return 0


async def finish_sending(
    producer: Producer,
    cluster: Cluster,
    progress: Progress,
    summary: str | None,
    interrupted: bool,
) -> None:
    """Close ``producer``, which delivers everything it accepted (or raise
    :class:`CommandError` naming what it could not), then ``cluster``; then print the
    summary of what was delivered, ending with ``summary`` (None: no summary)."""
    try:
        await producer.close()
    except ProducerClosedError as exc:
        raise CommandError(undelivered(exc, producer)) from exc
    finally:
        await cluster.close()
    if summary is not None:
        progress.messages = producer.metrics.messages_sent
        progress.bytes = producer.metrics.bytes_sent
        text = f"{progress.summary()} {summary}" + (" (interrupted)" if interrupted else "")
        print(text, file=sys.stderr, flush=True)


async def _send(
    args: argparse.Namespace,
    producer: Producer,
    name: str,
    file: IO[bytes],
    separator: bytes | None,
    partition: tuple[int, int] | None,
    progress: Progress,
) -> None:
    reader = lines if args.format == "lines" else length_prefixed
    topic = args.topic
    number = 0
    async for records in reader(ChunkReader(file), args.max_message_size, name):
        size = 0
        for record in records:
            number += 1
            key = None
            value = record
            if separator is not None:
                raw_key, found, value = record.partition(separator)
                if not found:
                    raise CommandError(
                        f"{name}: record {number} has no key separator {separator!r}"
                    )
                key = partition_key(raw_key)
            await producer.send(topic, value, key=key, partition=partition)
            size += len(value)
        progress.add(len(records), size)
        await asyncio.sleep(0)
