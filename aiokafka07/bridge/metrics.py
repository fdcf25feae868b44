"""What a running bridge reports: counts, and how far behind the 0.7 log end it is.

:class:`BridgeMetrics` is the snapshot :attr:`aiokafka07.bridge.Bridge.metrics` returns,
as :attr:`aiokafka07.Producer.metrics` is the producer's: the progress display of
``aiokafka07 bridge`` reads it, and an application embedding the bridge reads it the same
way. The lag of a broker-partition is in bytes, as 0.7 offsets are: the 0.7 log end
minus the offset the bridge has copied up to (committed on the target). The log ends come
from :class:`LogEnds`, one task of the bridge's supervisor asking every broker for its
partitions' ends (OFFSETS, pipelined per broker) every ``interval_ms``; a broker that
cannot be asked keeps its partitions' last known ends, and its partitions show
``log_end`` None until one was read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..connection import BrokerAddress
from ..monitor.offsets import probe_broker
from ..pool import ConnectionPool
from ..records import TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from .positions import Position

__all__ = ["BridgeMetrics", "LogEnds", "PartitionLag"]

log = logging.getLogger("aiokafka07.bridge")


@dataclass(frozen=True)
class PartitionLag:
    """One 0.7 broker-partition: the position copied up to (committed on the target),
    its log end when last read (None: not read yet), and the bytes between them (None
    while the log end is unknown)."""

    position: Position
    log_end: int | None

    @property
    def lag_bytes(self) -> int | None:
        """Bytes of the 0.7 log not yet copied (0 when caught up)."""
        if self.log_end is None:
            return None
        return max(0, self.log_end - self.position.offset)


@dataclass(frozen=True)
class BridgeMetrics:
    """A snapshot of a bridge's counters (this run) and of its lag per 0.7
    broker-partition."""

    #: Messages and bytes (values) written to the target in committed transactions.
    messages: int = 0
    bytes: int = 0
    transactions: int = 0
    #: Messages found already copied at recovery and not written again.
    skipped: int = 0
    partitions: Mapping[TopicPartition, PartitionLag] = field(default_factory=dict)

    @property
    def lag_bytes(self) -> int | None:
        """The sum of the partitions' lags (None while any log end is unknown)."""
        lags = [p.lag_bytes for p in self.partitions.values()]
        if any(lag is None for lag in lags):
            return None
        return sum(lag for lag in lags if lag is not None)


class LogEnds:
    """The 0.7 log end of each broker-partition the bridge reads, refreshed every
    ``interval_ms`` by a task of ``supervisor`` (LOG policy: a display that stops
    moving costs the copying nothing, and says why once in the log)."""

    def __init__(self, supervisor: Supervisor, *, interval_ms: float = 1000.0) -> None:
        self.supervisor = supervisor
        self.interval = interval_ms / 1000
        self.ends: dict[TopicPartition, int] = {}
        self._brokers: dict[BrokerAddress, list[TopicPartition]] = {}

    def watch(self, brokers: Mapping[BrokerAddress, Sequence[TopicPartition]]) -> None:
        """Start refreshing the log ends of these broker-partitions."""
        self._brokers = {address: list(sources) for address, sources in brokers.items()}
        self.supervisor.spawn("log-ends", self._refresh, policy=CrashPolicy.LOG)

    async def _refresh(self) -> None:
        async with ConnectionPool(request_timeout_ms=self.interval * 1000 + 5000) as pool:
            while True:
                probes = await asyncio.gather(
                    *(probe_broker(pool, a, s) for a, s in self._brokers.items())
                )
                for probe in probes:
                    self.ends.update({tp: offsets.end for tp, offsets in probe.offsets.items()})
                await asyncio.sleep(self.interval)
