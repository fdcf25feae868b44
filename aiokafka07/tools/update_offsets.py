"""``aiokafka07 update-offsets earliest|latest GROUP TOPIC``: 0.7.2's UpdateOffsetsInZK.

Sets GROUP's committed offset of every broker-partition of TOPIC registered in ZooKeeper
to that partition's earliest or latest offset, as its broker reports it (OFFSETS -2 / -1),
so the group starts over from the beginning or skips to the end. The output is 0.7.2's,
line for line: ``updating partition <b-p> with new offset: <n>`` per partition (in 0.7.2's
order, the names sorted as strings), then ``updated the offset for <n> partitions``.

Unlike 0.7.2, every broker is asked before anything is written, so a broker that cannot
answer leaves the group's offsets as they were (0.7.2 stops half-way); the update is
refused while the group has live members, which would overwrite the new offsets with their
own at their next commit (``--force`` writes anyway); ``--dry-run`` shows the change.
"""

from __future__ import annotations

import argparse
import asyncio

from ..connection import BrokerAddress
from ..errors import KafkaError
from ..group import partition_names
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST, validate_topic
from ..records import TopicPartition
from ..znodes import GroupRegistry, read_topic_registrations
from .common import (
    CommandError,
    add_cluster_options,
    describe_exit_status,
    no_partitions_error,
    read_brokers,
    refuse_live_members,
    zookeeper_session,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Set GROUP's committed offsets of every partition of TOPIC to the earliest or the "
        "latest offset (0.7.2's UpdateOffsetsInZK)."
    )
    parser.add_argument("position", choices=["earliest", "latest"], help="where to move to")
    parser.add_argument("group", metavar="GROUP")
    parser.add_argument("topic", metavar="TOPIC")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--force", action="store_true", help="update even while the group has live members"
    )
    parser.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    describe_exit_status(parser, {0: "the offsets were updated (or, with --dry-run, shown)"})


async def run(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    time = EARLIEST if args.position == "earliest" else LATEST
    async with zookeeper_session(args) as zk:
        registry = GroupRegistry(zk, args.group)
        if not (args.force or args.dry_run):
            await refuse_live_members(
                registry,
                "they would overwrite the new offsets at their next commit; stop them first "
                "(or --force)",
            )
        names = partition_names(await read_topic_registrations(zk, args.topic))
        if not names:
            raise await no_partitions_error(zk, args.topic)
        partitions = [TopicPartition.parse(args.topic, name) for name in names]
        brokers = await read_brokers(zk)
        async with ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=10000) as pool:
            # Every answer is awaited before the pool closes (one that failed first must
            # not leave the others to fail unobserved); the first error is reported.
            answers = await asyncio.gather(
                *(_offset(pool, brokers.get(tp.broker_id), tp, time) for tp in partitions),
                return_exceptions=True,
            )
        offsets: list[int] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            offsets.append(answer)
        for tp, offset in zip(partitions, offsets, strict=True):
            if args.dry_run:
                current = await registry.committed(tp.topic, tp.name)
                print(f"would update partition {tp.name} with new offset: {offset} (now {current})")
            else:
                print(f"updating partition {tp.name} with new offset: {offset}", flush=True)
                await registry.commit(tp.topic, tp.name, offset)
    verb = "would update" if args.dry_run else "updated"
    print(f"{verb} the offset for {len(partitions)} partitions")
    return 0


async def _offset(
    pool: ConnectionPool, address: BrokerAddress | None, tp: TopicPartition, time: int
) -> int:
    """The earliest / latest offset of one partition (0 for a partition with no log yet)."""
    if address is None:
        raise CommandError(
            f"broker {tp.broker_id} is unavailable (not registered): cannot ask it for the "
            f"offsets of {tp.topic} {tp.name}; nothing was written"
        )
    try:
        connection = await pool.connection(address)
        offsets = await connection.offsets(tp.topic, tp.partition, time, 1)
    except KafkaError as exc:
        raise CommandError(
            f"broker {tp.broker_id} at {address.host}:{address.port}: {exc}; nothing was written"
        ) from exc
    return offsets[0] if offsets else 0
