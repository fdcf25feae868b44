"""What a running bridge reports: counts, and how far behind the 0.7 log end it is.

:class:`BridgeMetrics` is the snapshot :attr:`aiokafka07.bridge.Bridge.metrics` returns,
as :attr:`aiokafka07.Producer.metrics` is the producer's: the progress display of
``aiokafka07 bridge`` reads it, its Prometheus endpoint (``--metrics-port``,
:mod:`aiokafka07.bridge.collector`) reads it at every scrape, and an application
embedding the bridge reads it the same way. The lag of a broker-partition is in bytes,
as 0.7 offsets are: the 0.7 log end minus the offset the bridge has copied up to
(committed on the target). The log ends come from :class:`LogEnds`, one task per 0.7
broker in the bridge's supervisor asking it for its partitions' ends (OFFSETS,
pipelined) every ``interval_ms``. A broker that does not answer (down, stopped, slower
than ``interval_ms`` + 2 s) makes its partitions' log ends unknown until it answers
again: their ``log_end`` and lag are None, never a stale value and never 0 (a monitor
never turns unknown into zero).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..connection import BrokerAddress
from ..monitor.offsets import probe_broker
from ..pool import ConnectionPool
from ..records import TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from .positions import Position

__all__ = ["BridgeMetrics", "LogEnds", "PartitionLag", "Phase", "TopicCounts"]

log = logging.getLogger("aiokafka07.bridge")


@dataclass(frozen=True)
class PartitionLag:
    """One 0.7 broker-partition: the position copied up to (committed on the target),
    its log end as last read (None: not read yet, or its broker did not answer the last
    probe), and the bytes between them (None while the log end is unknown)."""

    position: Position
    log_end: int | None

    @property
    def lag_bytes(self) -> int | None:
        """Bytes of the 0.7 log not yet copied (0 when caught up)."""
        if self.log_end is None:
            return None
        return max(0, self.log_end - self.position.offset)


#: Where a bridge is in its run (:attr:`BridgeMetrics.phase`).
Phase = Literal["idle", "starting", "copying", "stopping", "stopped", "failed"]


@dataclass(frozen=True)
class TopicCounts:
    """One topic's counts in this process: messages and bytes (values) written in
    committed transactions, and messages recovery found already on the target and that
    were not written again when read from 0.7 again."""

    messages: int = 0
    bytes: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class BridgeMetrics:
    """A snapshot of a bridge's counters (this process: every :meth:`Bridge.run
    <aiokafka07.bridge.Bridge.run>` of the object) and of its lag per 0.7
    broker-partition (the current run's)."""

    #: Messages and bytes (values) written to the target in committed transactions.
    messages: int = 0
    bytes: int = 0
    #: Transactions committed.
    transactions: int = 0
    #: Messages found already copied at recovery and not written again.
    skipped: int = 0
    partitions: Mapping[TopicPartition, PartitionLag] = field(default_factory=dict)
    #: The counts above per topic (topics with nothing counted yet included).
    topics: Mapping[str, TopicCounts] = field(default_factory=dict)
    #: Transactions aborted after a failed write (the run then ends with the error).
    aborted: int = 0
    #: Recoveries completed (one per run that got past reading the checkpoint).
    recoveries: int = 0
    #: ``time.time()`` of the last commit (None: no transaction committed yet).
    last_commit: float | None = None
    #: Seconds since the last commit, or since the copying began when no transaction was
    #: committed since (None: not copying yet).
    commit_age: float | None = None
    phase: Phase = "idle"
    #: Topics a whitelist or blacklist chooses, registered in the 0.7 cluster, that the
    #: bridge does not copy because the target cannot take them (missing there, and no
    #: ``create_partitions``), with why; each is tried again (see :meth:`Bridge.run
    #: <aiokafka07.bridge.Bridge.run>`).
    topics_not_copied: Mapping[str, str] = field(default_factory=dict)

    @property
    def lag_bytes(self) -> int | None:
        """The sum of the partitions' lags (None while any log end is unknown)."""
        lags = [p.lag_bytes for p in self.partitions.values()]
        if any(lag is None for lag in lags):
            return None
        return sum(lag for lag in lags if lag is not None)

    @property
    def unknown(self) -> int:
        """Broker-partitions whose log end, hence lag, is unknown now."""
        return sum(p.log_end is None for p in self.partitions.values())


class LogEnds:
    """The 0.7 log end of each broker-partition the bridge reads, refreshed every
    ``interval_ms`` by one task per broker in ``supervisor`` (LOG policy: a display that
    stops moving costs the copying nothing, and says why once in the log).

    :attr:`ends` holds the partitions whose broker answered its last probe: a broker
    that fails one, or does not answer within ``interval_ms`` + 2 s, has its partitions
    removed until it answers again (unknown, not stale). One task per broker, so a
    broker that hangs delays no other broker's ends.
    """

    def __init__(self, supervisor: Supervisor, *, interval_ms: float = 1000.0) -> None:
        self.supervisor = supervisor
        self.interval = interval_ms / 1000
        self.ends: dict[TopicPartition, int] = {}

    def watch(self, brokers: Mapping[BrokerAddress, Sequence[TopicPartition]]) -> None:
        """Start refreshing the log ends of these broker-partitions."""
        for address, sources in brokers.items():
            self.supervisor.spawn(
                f"log-ends {address}",
                self._refresh(address, list(sources)),
                policy=CrashPolicy.LOG,
            )

    async def _refresh(self, address: BrokerAddress, sources: list[TopicPartition]) -> None:
        async with ConnectionPool(request_timeout_ms=self.interval * 1000 + 2000) as pool:
            while True:
                probe = await probe_broker(pool, address, sources)
                if probe.error is None:
                    self.ends.update({tp: offsets.end for tp, offsets in probe.offsets.items()})
                else:
                    for tp in sources:
                        self.ends.pop(tp, None)
                    log.debug("log ends of broker %s unknown: %s", address, probe.error)
                await asyncio.sleep(self.interval)
