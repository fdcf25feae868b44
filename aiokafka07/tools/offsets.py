"""``aiokafka07 offsets``: the offsets before a time for every partition of a topic.

0.7.2's GetOffsetShell asks one partition of one broker; this asks every broker-partition
of the topic at once (found in ZooKeeper, or partition 0 of each ``--brokers`` entry
unless ``--broker-partition`` says otherwise) and prints a table or JSON. ``--time`` is
``latest`` (the log end), ``earliest``, a timestamp in ms, or an ISO 8601 date-time. The
broker answers with segment start offsets (0.7 keeps no per-message time), newest first.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from typing import Any

from ..connection import BrokerAddress
from ..errors import KafkaError
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST, validate_topic
from .common import (
    CommandError,
    UsageError,
    add_cluster_options,
    describe_exit_status,
    format_table,
    no_partitions_error,
    parse_broker_partitions,
    parse_brokers,
    positive_int,
    read_brokers,
    topic_partitions,
    zookeeper_session,
)

_NAMED_TIMES = {
    "latest": LATEST,
    "largest": LATEST,
    "earliest": EARLIEST,
    "smallest": EARLIEST,
}


def parse_time(text: str) -> int:
    """``latest`` / ``earliest`` (or 0.7.2's ``largest`` / ``smallest``, ``-1`` / ``-2``),
    milliseconds since the epoch, or an ISO 8601 date-time (UTC unless it says)."""
    named = _NAMED_TIMES.get(text.strip().lower())
    if named is not None:
        return named
    try:
        value = int(text)
    except ValueError:
        pass
    else:
        if value < -2:
            raise argparse.ArgumentTypeError(f"{value} is not a time (ms, -1 or -2)")
        return value
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not latest, earliest, a time in ms or an ISO 8601 date-time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def time_name(time: int) -> str | int:
    return "latest" if time == LATEST else "earliest" if time == EARLIEST else time


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the offsets before --time (default: latest, the log end) for every "
        "broker-partition of TOPIC."
    )
    parser.add_argument("topic", metavar="TOPIC")
    add_cluster_options(parser)
    parser.add_argument(
        "-t",
        "--time",
        type=parse_time,
        default=LATEST,
        help="latest (default), earliest, ms since the epoch, or an ISO 8601 date-time",
    )
    parser.add_argument(
        "--max", type=positive_int, default=1, metavar="N", help="at most N offsets each (1)"
    )
    parser.add_argument(
        "--broker-partition",
        action="append",
        default=[],
        metavar="B-P[,B-P...]",
        help="only these partitions (with --brokers: default partition 0 of each broker)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    describe_exit_status(parser, {0: "the offsets were printed"})


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    if bool(args.zookeeper) == bool(args.brokers):
        raise UsageError("give --zookeeper or --brokers (one of them)")
    chosen = parse_broker_partitions(args.broker_partition)
    if args.brokers:
        brokers = parse_brokers(args.brokers)
        partitions = chosen or [(broker_id, 0) for broker_id in sorted(brokers)]
    else:
        async with zookeeper_session(args) as zk:
            brokers = await read_brokers(zk)
            partitions = chosen or await topic_partitions(zk, args.topic)
            if not partitions:
                raise await no_partitions_error(zk, args.topic)
    async with ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=10000) as pool:
        answers = await asyncio.gather(
            *(_offsets(pool, brokers.get(b), args.topic, b, p, args) for b, p in partitions)
        )
    errors = [row["error"] for row in answers if "error" in row]
    if errors and len(errors) == len(answers):
        raise CommandError(errors[0] if len(set(errors)) == 1 else "; ".join(errors))
    if args.json:
        document = {"topic": args.topic, "time": time_name(args.time), "partitions": answers}
        print(json.dumps(document, indent=2))
    else:
        rows = [
            [
                args.topic,
                f"{row['broker_id']}-{row['partition']}",
                f"{row['host']}:{row['port']}" if row["host"] else None,
                _cell(row.get("offsets")),
                row.get("error", ""),
            ]
            for row in answers
        ]
        headers = ["TOPIC", "PARTITION", "BROKER", f"OFFSETS ({time_name(args.time)})", ""]
        print(format_table(headers, rows))
    if errors:
        raise CommandError(f"{len(errors)} of {len(answers)} partitions could not be asked")
    return 0


def _cell(offsets: list[int] | None) -> int | str | None:
    if offsets is None:
        return None
    if not offsets:
        return "none"
    return offsets[0] if len(offsets) == 1 else ", ".join(map(str, offsets))


async def _offsets(
    pool: ConnectionPool,
    address: BrokerAddress | None,
    topic: str,
    broker_id: int,
    partition: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "broker_id": broker_id,
        "partition": partition,
        "host": address.host if address else None,
        "port": address.port if address else None,
    }
    if address is None:
        row["error"] = f"broker {broker_id} is not known (not registered / not listed)"
        return row
    try:
        connection = await pool.connection(address)
        row["offsets"] = list(await connection.offsets(topic, partition, args.time, args.max))
    except KafkaError as exc:
        row["error"] = f"broker {broker_id} at {address.host}:{address.port}: {exc}"
    return row
