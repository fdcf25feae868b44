"""Reading the 0.7 side: every chosen broker-partition from a position, in order.

One :class:`~aiokafka07.simple.SimpleConsumer` iteration per broker-partition
(:meth:`~aiokafka07.simple.SimpleConsumer.messages`, polling when caught up), each in a
task of the bridge's supervisor, all feeding one bounded queue: each item is the
messages of one fetch of one broker-partition (a list of :class:`SourceMessage`, in
order), so a message costs no queue operation of its own.
A reader whose broker goes away is restarted (bounded, with the library's backoff) from
the position after the last message it queued, so a 0.7 broker restart loses and repeats
nothing; after its restarts are used up the bridge fails with the last error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import NamedTuple

from ..backoff import Backoff
from ..connection import BrokerAddress
from ..errors import BridgeError
from ..records import ConsumerRecord, TopicPartition
from ..simple import SimpleConsumer
from ..supervisor import CrashPolicy, Supervisor
from .positions import Position, PositionTracker

__all__ = ["SourceMessage", "SourceReaders"]

log = logging.getLogger("aiokafka07.bridge")


class SourceMessage(NamedTuple):
    """A 0.7 message and the position after it."""

    source: TopicPartition
    record: ConsumerRecord
    position: Position


class SourceReaders:
    """Readers of broker-partitions feeding :attr:`queue` (owned by ``supervisor``);
    ``queue_size`` bounds the fetches waiting in it (each at most ``fetch_size`` bytes
    of message sets)."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        queue_size: int = 16,
        poll_interval_ms: float = 200.0,
        fetch_size: int = 1024 * 1024,
        max_restarts: int = 10,
    ) -> None:
        self.supervisor = supervisor
        self.queue: asyncio.Queue[list[SourceMessage]] = asyncio.Queue(queue_size)
        self.poll_interval_ms = poll_interval_ms
        self.fetch_size = fetch_size
        self.max_restarts = max_restarts
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()
        self._trackers: dict[TopicPartition, PositionTracker] = {}

    def start(self, source: TopicPartition, address: BrokerAddress, start: Position) -> None:
        """Read ``source`` (on the broker at ``address``) from ``start`` on."""
        tracker = PositionTracker(start)
        self._trackers[source] = tracker

        def crashed(exc: BaseException) -> None:
            log.warning("reading %s/%s failed (restarting): %s", source.topic, source.name, exc)

        def gave_up(exc: BaseException) -> None:
            self.failure = BridgeError(f"reading {source.topic}/{source.name} failed: {exc}")
            self.failed.set()

        self.supervisor.spawn(
            f"read-{source.topic}-{source.name}",
            lambda: self._read(source, address, tracker),
            policy=CrashPolicy.RESTART,
            on_crash=crashed,
            on_give_up=gave_up,
            backoff=Backoff(0.2, 5.0),
            max_restarts=self.max_restarts,
        )

    async def _read(
        self, source: TopicPartition, address: BrokerAddress, tracker: PositionTracker
    ) -> None:
        start = tracker.current
        skip = start.skip
        async with SimpleConsumer(
            address.host, address.port, broker_id=address.broker_id, fetch_size=self.fetch_size
        ) as consumer:
            fetches = consumer.batches(
                source.topic,
                source.partition,
                start.offset,
                poll_interval_ms=self.poll_interval_ms,
            )
            async with contextlib.aclosing(fetches):
                async for fetched in fetches:
                    chunk = []
                    for record in fetched.messages:
                        if skip:
                            skip -= 1
                            continue
                        chunk.append(SourceMessage(source, record, tracker.after(record)))
                    if chunk:
                        await self.queue.put(chunk)
