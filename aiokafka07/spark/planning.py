"""What to read: the broker-partitions of the topics, their offsets, and how to split them.

Runs where Spark plans a read (a Python worker process of the driver): discovers the
broker-partitions from ZooKeeper (through :mod:`aiokafka07.znodes`) or a static broker
list, and asks each broker for its segment start offsets and log end with one OFFSETS
request per broker-partition (PROTOCOL §11), pipelined.

In 0.7 an offset is a byte position, so a read range can only start or stop between
messages. Known boundaries without reading any data are the segment starts and the log
end; :func:`split_range` cuts there. A stretch longer than the wanted size with no
segment start inside is cut where :mod:`.boundaries` finds a message boundary from one
small FETCH at the wanted position (:func:`plan_pieces`). Whatever the options name
(topics, broker-partitions, offsets, times) is checked here against what the cluster
says, and a mistake raises :class:`OptionError` naming the option.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..connection import BrokerAddress
from ..errors import KafkaError
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST
from ..records import TopicPartition
from ..znodes import (
    BROKER_TOPICS,
    read_brokers,
    read_topic_registrations,
    read_topics,
    topic_exists,
)
from ..zookeeper import ZooKeeper
from .boundaries import ENTRY_OVERHEAD, Fetch, check_boundary, cut_after
from .options import Assignment, Connection, OffsetSpec, OptionError

__all__ = [
    "Discovery",
    "PartitionState",
    "check_named",
    "check_user_offset",
    "describe",
    "discover",
    "fetcher",
    "plan_pieces",
    "resolve",
    "split_range",
    "wanted_cuts",
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

    @property
    def key(self) -> tuple[str, str]:
        """(topic, ``"b-p"``): how offsets options and streaming offsets name it."""
        return self.tp.topic, self.tp.name

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


def wanted_cuts(
    start: int, end: int, boundaries: Sequence[int], max_bytes: int, lead: int = 0
) -> list[tuple[int, int]]:
    """Where ``[start, end)`` needs cuts that no known boundary gives: for each stretch
    between known boundaries longer than ``max_bytes``, positions that divide it into
    equal pieces of at most ``max_bytes``, each as ``(position - lead, stretch end)``
    (a cut is searched for from ``lead`` bytes before where it is wanted; never before
    the stretch starts)."""
    edges = [start, *(b for b in boundaries if start < b < end), end]
    wanted: list[tuple[int, int]] = []
    for low, high in itertools.pairwise(edges):
        pieces = -(-(high - low) // max_bytes)
        wanted.extend(
            (max(low, low + (high - low) * k // pieces - lead), high) for k in range(1, pieces)
        )
    return wanted


async def plan_pieces(
    state: PartitionState,
    start: int,
    end: int,
    max_bytes: int | None,
    fetch: Fetch,
    max_message_size: int,
) -> list[tuple[int, int]]:
    """``[start, end)`` of ``state`` cut into pieces of about ``max_bytes``, at segment
    starts and, inside segments, at boundaries found from a window of about
    ``max_message_size`` bytes per cut (:func:`~.boundaries.cut_after`)."""
    if max_bytes is None or end - start <= max_bytes:
        return split_range(start, end, state.boundaries, max_bytes)
    max_entry = max_message_size + ENTRY_OVERHEAD
    wanted = wanted_cuts(start, end, state.boundaries, max_bytes, lead=max_entry)
    found = await asyncio.gather(
        *(cut_after(fetch, at, before, max_entry) for at, before in wanted)
    )
    cuts = sorted({*state.boundaries, *(b for b in found if b is not None)})
    return split_range(start, end, cuts, max_bytes)


@dataclass(frozen=True)
class Discovery:
    """The broker-partitions found, and why a topic asked for has none: ``missing``, a
    topic that does not exist (no broker ever registered it), which fails batch reads and
    streams alike; ``absent``, one that exists with no live broker now, which a stream
    reads once a broker serves it again."""

    found: list[tuple[TopicPartition, BrokerAddress]]
    absent: dict[str, str] = field(default_factory=dict)  # topic -> why it has none
    missing: dict[str, str] = field(default_factory=dict)  # topic -> why it does not exist
    matched_nothing: str | None = None  # a pattern no topic matches: the known topics


async def discover(
    connection: Connection,
    topics: list[str] | None,
    pattern: str | None,
    assigned: Assignment | None,
    partitions_per_broker: int | None,
    zookeeper: ZooKeeper | None,
) -> Discovery:
    """Every broker-partition of the topics read, with its broker's address, sorted.

    From ZooKeeper: the partitions live brokers registered for each topic. From a static
    list: ``partitions_per_broker`` partitions on every listed broker, or the ones
    ``assigned`` lists (from ZooKeeper, :func:`check_named` and the caller apply it).
    """
    if connection.brokers is not None:
        assert topics is not None
        if assigned is not None:
            listed = [
                (tp, connection.brokers[tp.broker_id])
                for topic, names in assigned.items()
                for tp in (TopicPartition.parse(topic, name) for name in names)
            ]
            return Discovery(sorted(listed))
        assert partitions_per_broker is not None
        return Discovery(
            [
                (TopicPartition(topic, broker_id, p), address)
                for topic in topics
                for broker_id, address in sorted(connection.brokers.items())
                for p in range(partitions_per_broker)
            ]
        )
    assert zookeeper is not None
    brokers = await read_brokers(zookeeper)
    matched_nothing = None
    if topics is None:
        assert pattern is not None
        regex = re.compile(pattern)
        names = await read_topics(zookeeper)
        topics = sorted(t for t in names if regex.fullmatch(t))
        if not topics:
            matched_nothing = ", ".join(names) or "none"
    found: list[tuple[TopicPartition, BrokerAddress]] = []
    absent: dict[str, str] = {}
    missing: dict[str, str] = {}
    for topic in topics:
        # A topic's node is persistent: only a topic without registrations can be one
        # that does not exist, so only then is ZooKeeper asked which it is.
        registered = await read_topic_registrations(zookeeper, topic)
        live = [
            (TopicPartition(topic, broker_id, p), brokers[broker_id])
            for broker_id, count in registered.items()
            if broker_id in brokers  # else a registration outliving its broker
            for p in range(count)
        ]
        if live:
            found.extend(live)
        elif registered or await topic_exists(zookeeper, topic):
            absent[topic] = f"no live broker serves topic {topic!r} now"
        else:
            known = ", ".join(await read_topics(zookeeper)) or "none"
            missing[topic] = (
                f"topic {topic!r} does not exist: no broker has registered it under "
                f"{BROKER_TOPICS} in {zookeeper.where} (topics: {known})"
            )
    return Discovery(sorted(found), absent, missing, matched_nothing)


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


def check_named(
    specs: Iterable[OffsetSpec], found: Iterable[TopicPartition], assigned: Assignment | None
) -> None:
    """Every broker-partition ``assign`` or an offsets option names must exist."""
    have: dict[str, list[str]] = {}
    for tp in found:
        have.setdefault(tp.topic, []).append(tp.name)
    named = [(spec.option, topic, name) for spec in specs for topic, name, _ in spec.named()]
    if assigned is not None:
        named[:0] = [
            ("assign", t, n) for t, names in sorted(assigned.items()) for n in sorted(names)
        ]
    for option, topic, name in named:
        if name not in have.get(topic, []):
            partitions = ", ".join(have.get(topic, [])) or "none live"
            raise OptionError(
                f"option {option!r} names {topic}/{name}, which is not a broker-partition of "
                f"{topic!r} (its broker-partitions: {partitions})"
            )


async def resolve(spec: OffsetSpec, state: PartitionState, pool: ConnectionPool) -> int:
    """The offset ``spec`` gives for ``state``'s partition: earliest and latest from the
    state, a time through OFFSETS (the newest segment start at or before it, else the
    earliest offset)."""
    value = spec.for_partition(state.tp.topic, state.name)
    if value == EARLIEST:
        return state.earliest
    if value == LATEST:
        return state.latest
    if spec.kind != "timestamp":
        return value
    conn = await pool.connection(state.address)
    before = await conn.offsets(state.tp.topic, state.tp.partition, value, 1)
    return before[0] if before else state.earliest


def fetcher(pool: ConnectionPool, state: PartitionState) -> Fetch:
    """A :data:`~.boundaries.Fetch` over ``state``'s broker-partition."""

    async def fetch(offset: int, size: int) -> bytes:
        conn = await pool.connection(state.address)
        response = await conn.fetch(state.tp.topic, state.tp.partition, offset, size)
        error = response.error(offset)
        if error is not None:
            raise error
        return bytes(response.message_set)

    return fetch


async def check_user_offset(
    option: str, state: PartitionState, offset: int, fetch: Fetch, max_entry: int
) -> None:
    """Raise :class:`OptionError` naming the partition and offset unless ``offset`` (one
    a user gave, within the log) is a message boundary. Known boundaries cost nothing;
    any other offset one small fetch (two for a message larger than 64 KiB)."""
    if offset in state.boundaries:
        return
    reason = await check_boundary(fetch, offset, max_entry)
    if reason is not None:
        raise OptionError(
            f"option {option!r}: offset {offset} of {state.tp.topic}/{state.name} is not a "
            f"message boundary: {reason}. A 0.7 offset is a byte position, not a message "
            "number: use an offset a read returned in the 'offset' column or a consumer "
            "committed, or -2 (earliest) / -1 (latest)"
        )
