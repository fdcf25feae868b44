"""What a group member knows about the partitions it owns, and nothing that does I/O.

The coordinator creates a :class:`PartitionState` when a rebalance gives the member a
partition and removes it when the partition is revoked; the fetchers read the states to
decide what to fetch from where, and advance ``fetch_offset``; the streams advance the
position as records are handed out; the facade reads them for ``position()``, ``paused()``,
``highwater()`` and the metrics. One :class:`Assignment` holds them all, with the broker
addresses the last rebalance read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..connection import BrokerAddress
from ..errors import IllegalStateError
from ..fetch_size import FetchSizer
from ..record_batch import offset_at
from ..records import TopicPartition

if TYPE_CHECKING:
    from .streams import Chunk, Stream

__all__ = ["Assignment", "ConsumerMetrics", "PartitionMetrics", "PartitionState"]


class PartitionState:
    """One owned partition: where fetching and consuming stand, and what holds it back.

    * ``fetch_offset``: where the next fetch starts; ``sizer`` how many bytes it asks
      (``fetch_size``), grown for a large message (:class:`~aiokafka07.fetch_size.FetchSizer`).
    * ``position`` (a property): the next offset to consume, what a commit writes: the
      offset of the last record handed out, or where consuming starts.
    * ``committed``: the last offset this member committed (or read) for it.
    * ``paused`` (by the application), ``halted`` (an error was queued for the application:
      not fetched until ``seek()``), ``fenced`` (the ZooKeeper session it was claimed in
      expired: nothing is fetched, handed out or committed until a rebalance decides).
    * ``epoch``: bumped by every ``seek()``; a fetch answer for an older epoch is dropped.
    * ``session``: the ZooKeeper session that claimed it; commits are written only there.
    * ``highwater``: the log end as last seen (a short fetch reached it), or None.
    * ``last_poll_ms``: when (ms since the epoch) the last fetch answer for it was taken
      in, or None before the first.
    """

    __slots__ = (
        "buffered",
        "committed",
        "consumed",
        "epoch",
        "fenced",
        "fetch_offset",
        "halted",
        "highwater",
        "last_poll_ms",
        "parked",
        "paused",
        "reading",
        "session",
        "sizer",
        "stream",
        "thread",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        thread: str,
        stream: Stream,
        offset: int,
        *,
        sizer: FetchSizer,
        session: int,
        committed: int | None,
    ) -> None:
        self.tp = tp
        self.thread = thread
        self.stream = stream
        self.fetch_offset = offset
        self.sizer = sizer
        self.consumed = offset  # the position when no chunk of it is being read
        self.committed = committed
        self.session = session
        self.epoch = 0
        self.paused = False
        self.halted = False
        self.fenced = False
        self.highwater: int | None = None
        self.last_poll_ms: int | None = None
        self.reading: Chunk | None = None  # the chunk its records are handed out from
        self.buffered = 0  # chunks of it waiting in its stream
        self.parked: list[Chunk] = []  # chunks held back while paused

    def __repr__(self) -> str:
        return f"<PartitionState {self.tp.topic}/{self.tp.name} at {self.position}>"

    @property
    def position(self) -> int:
        """The next offset to consume: the offset of the last record handed out."""
        chunk = self.reading
        if chunk is not None and chunk.pos:
            return offset_at(chunk.records, chunk.pos - 1)
        return self.consumed

    @property
    def fetch_size(self) -> int:
        """The size of the next fetch."""
        return self.sizer.size

    @property
    def fetchable(self) -> bool:
        return not (self.paused or self.halted or self.fenced)


@dataclass(frozen=True)
class PartitionMetrics:
    """One owned partition, as :attr:`Consumer.metrics` saw it. Offsets are 0.7 byte
    offsets, so ``lag`` is in bytes: from ``position`` to the last known log end."""

    thread: str
    stream: int
    position: int
    committed: int | None
    highwater: int | None
    lag: int | None
    fetch_size: int
    paused: bool
    halted: bool


@dataclass(frozen=True)
class ConsumerMetrics:
    """A snapshot of a group member (``consumer.metrics``; take a new one to refresh).

    ``records`` counts records handed out (counted per fetched chunk as it is started),
    ``listener_errors`` rebalance-listener calls that raised or timed out,
    ``fetcher_crashes`` fetcher tasks that crashed (each was restarted),
    ``commit_failures`` commits that could not be written, ``session_expiries`` the
    ZooKeeper sessions this member lost.
    """

    consumer_id: str
    generation: int
    rebalances: int
    partitions: dict[TopicPartition, PartitionMetrics] = field(default_factory=dict)
    buffered_bytes: int = 0
    records: int = 0
    listener_errors: int = 0
    fetcher_crashes: int = 0
    commit_failures: int = 0
    session_expiries: int = 0

    @property
    def lag(self) -> int | None:
        """Total bytes behind the known log ends (None if any log end is unknown yet)."""
        lags = [p.lag for p in self.partitions.values()]
        return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)


class Assignment:
    """The owned partitions by TopicPartition, and where their brokers listen.

    ``generation`` counts the rebalances that changed anything (or confirmed ownership
    after a session expiry).
    """

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.brokers: dict[int, BrokerAddress] = {}
        self.generation = 0

    def __len__(self) -> int:
        return len(self.partitions)

    def __contains__(self, tp: object) -> bool:
        return tp in self.partitions

    def get(self, tp: TopicPartition) -> PartitionState | None:
        return self.partitions.get(tp)

    def require(self, tp: TopicPartition) -> PartitionState:
        """The state of an owned partition; :class:`IllegalStateError` otherwise."""
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"expected a TopicPartition, not {tp!r}")
        state = self.partitions.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}/{tp.name} is not assigned to this consumer")
        return state

    def require_all(self, partitions: Iterable[TopicPartition]) -> list[PartitionState]:
        """States of ``partitions`` (all owned ones when empty)."""
        wanted = list(partitions)
        if not wanted:
            return list(self.partitions.values())
        return [self.require(tp) for tp in wanted]

    def holds(self, state: PartitionState) -> bool:
        """Whether ``state`` is still the current, unfenced state of its partition."""
        return self.partitions.get(state.tp) is state and not state.fenced

    def of_broker(self, broker_id: int) -> list[PartitionState]:
        return [s for s in self.partitions.values() if s.tp.broker_id == broker_id]

    def broker_ids(self) -> set[int]:
        return {tp.broker_id for tp in self.partitions}
