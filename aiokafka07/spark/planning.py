"""What to read: the broker-partitions of the topics, their offsets, and how to split them.

Runs where Spark plans a read (a Python worker process of the driver): discovers the
broker-partitions from ZooKeeper (``/brokers/ids``, ``/brokers/topics/<topic>/<broker>``)
or a static broker list, and asks each broker for its segment start offsets and log end
with one OFFSETS request per broker-partition (PROTOCOL §11), pipelined.

In 0.7 an offset is a byte position, so a read range can only start or stop between
messages. Known boundaries without reading any data are the segment starts and the log
end; :func:`split_range` cuts only there. The splitting rules are pure functions.
"""

from __future__ import annotations

import asyncio
import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..connection import BrokerAddress
from ..errors import KafkaError, ZooKeeperError
from ..pool import ConnectionPool
from ..protocol import LATEST
from ..records import TopicPartition
from ..znodes import read_brokers, read_topic_registrations, read_topics, topic_path
from ..zookeeper import ZooKeeper
from .options import Connection

__all__ = [
    "PartitionState",
    "describe",
    "discover",
    "split_range",
]

#: Enough OFFSETS entries to list every segment of a partition (0.7.2 answers newest first).
MAX_SEGMENTS = 1 << 20


@dataclass(frozen=True)
class PartitionState:
    """One broker-partition as its broker reports it now."""

    tp: TopicPartition
    address: BrokerAddress
    earliest: int
    latest: int
    boundaries: tuple[int, ...]  # segment starts and the log end, ascending

    @property
    def name(self) -> str:
        return self.tp.name

    def boundary_at_or_before(self, offset: int) -> int | None:
        """The largest known message boundary <= ``offset`` (None if there is none)."""
        i = bisect.bisect_right(self.boundaries, offset)
        return self.boundaries[i - 1] if i else None


def split_range(
    start: int, end: int, boundaries: Sequence[int], max_bytes: int | None
) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into ranges of at most ``max_bytes`` where it can be done.

    Cuts fall only on ``boundaries`` (ascending): ranges are as large as possible below
    the limit, and a stretch with no boundary inside stays whole even when larger.
    """
    if end <= start:
        return []
    if max_bytes is None:
        return [(start, end)]
    cuts = [b for b in boundaries if start < b < end]
    ranges: list[tuple[int, int]] = []
    current = start
    i = 0
    while current < end:
        if end - current <= max_bytes:
            ranges.append((current, end))
            break
        # The furthest cut within the limit, or else the nearest one beyond it.
        j = bisect.bisect_right(cuts, current + max_bytes, lo=i)
        if j > i:
            cut = cuts[j - 1]
        elif i < len(cuts):
            cut = cuts[i]
            j = i + 1
        else:
            cut = end
        ranges.append((current, cut))
        current, i = cut, j
    return ranges


async def discover(
    connection: Connection,
    topics: list[str] | None,
    pattern: str | None,
    partitions_per_broker: int | None,
    zookeeper: ZooKeeper | None,
) -> list[tuple[TopicPartition, BrokerAddress]]:
    """Every broker-partition of the topics read, with its broker's address, sorted.

    From ZooKeeper: the partitions brokers registered for each topic (a topic nobody
    has written yet has none). From a static list: ``partitions_per_broker`` partitions
    on every listed broker.
    """
    if connection.brokers is not None:
        assert topics is not None
        assert partitions_per_broker is not None
        return [
            (TopicPartition(topic, broker_id, p), address)
            for topic in topics
            for broker_id, address in sorted(connection.brokers.items())
            for p in range(partitions_per_broker)
        ]
    assert zookeeper is not None
    brokers = await read_brokers(zookeeper)
    if topics is None:
        assert pattern is not None
        regex = re.compile(pattern)
        names = await read_topics(zookeeper)
        topics = sorted(t for t in names if regex.fullmatch(t))
    found: list[tuple[TopicPartition, BrokerAddress]] = []
    for topic in topics:
        try:
            registered = await read_topic_registrations(zookeeper, topic)
        except ZooKeeperError:
            if await zookeeper.exists(topic_path(topic)):
                raise
            continue  # nobody has written the topic yet
        for broker_id, count in registered.items():
            if broker_id in brokers:  # else a registration outliving its broker
                found.extend(
                    (TopicPartition(topic, broker_id, p), brokers[broker_id]) for p in range(count)
                )
    return sorted(found)


async def describe(
    found: Iterable[tuple[TopicPartition, BrokerAddress]], pool: ConnectionPool
) -> list[PartitionState]:
    """Segment starts and log end of each broker-partition, asked concurrently.

    An unreachable broker raises :class:`KafkaConnectionError` naming it: a read that
    silently skipped a broker would return a partial answer as if it were complete.
    """
    found = list(found)

    async def one(tp: TopicPartition, address: BrokerAddress) -> PartitionState:
        conn = await pool.connection(address)
        offsets = await conn.offsets(tp.topic, tp.partition, LATEST, MAX_SEGMENTS)
        # Newest first: the (flushed) log end, then segment starts. An unknown
        # partition answers [0].
        boundaries = tuple(sorted(set(offsets))) or (0,)
        return PartitionState(tp, address, boundaries[0], boundaries[-1], boundaries)

    try:
        return list(await asyncio.gather(*(one(tp, a) for tp, a in found)))
    except KafkaError as exc:
        exc.args = (f"asking the brokers for offsets: {exc}",)
        raise
